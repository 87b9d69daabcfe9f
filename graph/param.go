package graph

import G "gorgonia.org/gorgonia"

// Role says what a parameter is to the layer that made it. Optimizers decide
// by role, not by name, which parameters get weight decay (only RoleWeight in
// qkv's AdamW), and a user's own code can find, say, every gain of a model
// without parsing names.
type Role string

// Roles of the parameters qkv's layers create. The zero Role, RoleNone, is
// that of a Param made outside them whose creator did not say.
const (
	RoleNone Role = ""
	// RoleWeight is a weight matrix of a projection (y = x W): attention's
	// wq, wk, wv, wo, the feed-forward w1, w2, a Linear's w and the head's.
	RoleWeight Role = "weight"
	// RoleBias is the additive bias of a projection or of a LayerNorm.
	RoleBias Role = "bias"
	// RoleGain is a LayerNorm's multiplicative gain.
	RoleGain Role = "gain"
	// RoleEmbedding is a lookup table: token embeddings and learned
	// positions. Its rows are looked up, not multiplied, and a rare token's
	// row should not be pulled to zero, so it is not decayed.
	RoleEmbedding Role = "embedding"
)

// String returns the role's name, "none" for RoleNone.
func (r Role) String() string {
	if r == RoleNone {
		return "none"
	}
	return string(r)
}

// Param is a learnable node with its stable hierarchical name, such as
// "blocks.0.attn.wq", and its role. Checkpoints, optimizers and GradCheck
// reports use the name; it never changes between runs of the same
// configuration.
type Param struct {
	Name string
	Node *G.Node
	// Role is what the parameter is (RoleWeight, RoleBias, ...); the layers
	// set it when they create the parameter.
	Role Role
}

// Nodes returns the nodes of params, in order.
func Nodes(params []Param) G.Nodes {
	out := make(G.Nodes, len(params))
	for i, p := range params {
		out[i] = p.Node
	}
	return out
}
