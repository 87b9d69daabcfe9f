package graph

import G "gorgonia.org/gorgonia"

// Param is a learnable node with its stable hierarchical name, such as
// "blocks.0.attn.wq". Checkpoints, optimizers and GradCheck reports use the
// name; it never changes between runs of the same configuration.
type Param struct {
	Name string
	Node *G.Node
}

// Nodes returns the nodes of params, in order.
func Nodes(params []Param) G.Nodes {
	out := make(G.Nodes, len(params))
	for i, p := range params {
		out[i] = p.Node
	}
	return out
}
