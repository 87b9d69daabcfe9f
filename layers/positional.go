package layers

import (
	"errors"
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Positional encodings: attention alone is permutation-equivariant, so the
// order of tokens reaches the model only through a vector added at each
// position.
const (
	// PositionsLearned is a learned (MaxLen, D) table.
	PositionsLearned = "learned"
	// PositionsSinusoidal is the fixed table of "Attention Is All You Need":
	// PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)).
	PositionsSinusoidal = "sinusoidal"
	// PositionsNone adds nothing; the model then cannot tell positions apart.
	PositionsNone = "none"
)

// Positions adds a positional encoding to (B, S, D) activations, S <= MaxLen.
type Positions struct {
	Kind   string
	MaxLen int
	Dim    int
	name   string      // the scope, for error messages
	table  *G.Node     // (MaxLen, D)
	param  graph.Param // the table, when learned
}

// NewPositions returns the encoding of the given kind for sequences of up to
// maxLen positions of width dim. A learned table is the parameter "table"
// (maxLen, dim) of the scope, initialised from N(0, 1), the same scale as the
// token embeddings (not GPT-2's 0.02); the sinusoidal table is a constant.
func NewPositions(s *Scope, kind string, maxLen, dim int) (*Positions, error) {
	if err := s.check(); err != nil {
		return nil, layerErr("positions", s.path(), err)
	}
	if err := validatePositions(s.path(), kind, maxLen, dim); err != nil {
		return nil, err
	}
	p := &Positions{Kind: kind, MaxLen: maxLen, Dim: dim, name: s.prefix}
	switch kind {
	case PositionsLearned:
		// N(0, 1), not GPT-2's 0.02: at 0.02 position was nearly invisible
		// beside the N(0, 1) token embeddings, and reverse took 975 steps to
		// learn instead of 325.
		var err error
		if p.param, err = s.param("table", normal(1), maxLen, dim); err != nil {
			return nil, layerErr("positions", s.path(), err)
		}
		p.table = p.param.Node
	case PositionsSinusoidal:
		// Validated above; checked again here because this make is the one
		// allocation of the layers package that does not go through param.
		if err := checkTensor("table (MaxLen, Dim)", maxLen, dim); err != nil {
			return nil, layerErr("positions", s.path(), err)
		}
		vals := make([]float64, maxLen*dim)
		for pos := 0; pos < maxLen; pos++ {
			for i := 0; i < dim; i++ {
				angle := float64(pos) / math.Pow(10000, float64(i-i%2)/float64(dim))
				if i%2 == 0 {
					vals[pos*dim+i] = math.Sin(angle)
				} else {
					vals[pos*dim+i] = math.Cos(angle)
				}
			}
		}
		// In(s.g): a constant outside the graph makes Slice and
		// BroadcastAdd fail with "No Graph Supplied".
		p.table = G.NewConstant(graph.NewDense(s.dt, tensor.Shape{maxLen, dim}, vals), G.WithName(s.Name("sinusoid")), G.In(s.g))
	}
	return p, nil
}

// validatePositions checks what NewPositions checks, without allocating:
// a known kind, MaxLen and Dim positive, and the (MaxLen, Dim) table (learned
// or sinusoidal) within graph.MaxElements. name is the scope, for messages.
func validatePositions(name, kind string, maxLen, dim int) error {
	if err := checkPositive(size{"MaxLen", maxLen}, size{"Dim", dim}); err != nil {
		return layerErr("positions", name, err)
	}
	switch kind {
	case PositionsLearned, PositionsSinusoidal:
		if err := checkTensor("table (MaxLen, Dim)", maxLen, dim); err != nil {
			return layerErr("positions", name, err)
		}
	case PositionsNone:
	default:
		return layerErr("positions", name, fmt.Errorf("unknown kind %q, want %q, %q or %q", kind, PositionsLearned, PositionsSinusoidal, PositionsNone))
	}
	return nil
}

// Forward returns x + PE[:S] for x of shape (B, S, D).
func (p *Positions) Forward(x *G.Node) (*G.Node, error) {
	if p == nil || p.MaxLen <= 0 || p.Dim <= 0 || (p.table == nil) != (p.Kind == PositionsNone) {
		return nil, errors.New("layers: positions: the layer is nil or a zero value: make it with NewPositions")
	}
	if err := graph.CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("layers: positions %q (%s): %w", p.name, p.Kind, err)
	}
	s := x.Shape()
	if len(s) != 3 || s[1] > p.MaxLen || s[2] != p.Dim {
		return nil, fmt.Errorf("layers: positions %q (%s): input shape %v, want (B, S<=%d, %d)", p.name, p.Kind, s, p.MaxLen, p.Dim)
	}
	if p.table == nil {
		return x, nil
	}
	pe := p.table // (MaxLen, D)
	var err error
	if s[1] < p.MaxLen {
		if pe, err = G.Slice(pe, G.S(0, s[1])); err != nil { // (S, D)
			return nil, fmt.Errorf("layers: positions %q (%s): %w", p.name, p.Kind, err)
		}
	}
	return G.BroadcastAdd(x, pe, nil, []byte{0}) // (B, S, D)
}

// Params returns the learned table, or nothing for fixed encodings.
func (p *Positions) Params() []graph.Param {
	if p == nil || p.param.Node == nil {
		return nil
	}
	return []graph.Param{p.param}
}
