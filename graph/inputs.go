package graph

import G "gorgonia.org/gorgonia"

// role names an input of one of the attention ops. An op lists the roles
// of its inputs once, in order (its roles method); building the op's
// arguments (args), declaring its type, checking input shapes, reading the
// inputs in the kernel and placing the gradients in SymDiff all look a role
// up in that one list, so that an optional input (a mask, a bias, sinks)
// cannot shift the others' positions in one place and not in another.
type role uint8

const (
	roleQ       role = iota // queries (B, Sq, D)
	roleK                   // keys (B, Sk, KV*dk)
	roleV                   // values (B, Sk, KV*dk)
	roleMask                // the mask tensor's bias (B, Sq, Sk)
	roleBias                // the score bias (H, Sq, Sk) or (B, H, Sq, Sk)
	roleSinks               // the sink logits (H)
	roleKeep                // dropout's keep-mask (B, H, Sq, Sk)
	roleP                   // the weights (B, H, Sq, Sk)
	roleDP                  // their gradient (B, H, Sq, Sk)
	roleDOut                // the output's gradient (B, Sq, D)
	roleDeriv               // the score modifier's derivative (B, H, Sq, Sk)
	rolePacked              // flash's packed output and log-sum-exp (B, Sq, D+2H)
	roleDPacked             // its gradient (B, Sq, D+2H)
	roleStacked             // flash's stacked dq, dk, dv (B, Sq+2Sk, D)
)

// maxInputs is the most inputs an attention op takes (flash's gradient:
// q, k, v, mask, packed, dpacked).
const maxInputs = 6

// roleList is an op's roles, in an array so that listing them at every
// run does not allocate.
type roleList struct {
	r [maxInputs]role
	n int
}

// add appends r when present is true: an optional input.
func (l *roleList) add(r role, present bool) {
	if present {
		l.r[l.n] = r
		l.n++
	}
}

// index returns the position of r among the inputs, -1 if absent.
func (l *roleList) index(r role) int {
	for i := range l.n {
		if l.r[i] == r {
			return i
		}
	}
	return -1
}

// all returns the roles in order.
func (l *roleList) all() []role { return l.r[:l.n] }

// nodesFor returns the nodes of l's roles, in order, from nodes by role:
// the arguments of an op whose inputs l lists.
func nodesFor(l roleList, nodes map[role]*G.Node) G.Nodes {
	args := make(G.Nodes, l.n)
	for i, r := range l.all() {
		args[i] = nodes[r]
	}
	return args
}

// inputOf returns the input of role r among in, whose roles l lists; nil
// if the op has none.
func inputOf[T any](l roleList, in [][]T, r role) []T {
	if i := l.index(r); i >= 0 {
		return in[i]
	}
	return nil
}
