package layers

import (
	"errors"
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// PositionsConfig configures a positional encoding for sequences of up to
// MaxLen positions of width Dim.
type PositionsConfig struct {
	// Kind is PositionsLearned (the default for ""), PositionsSinusoidal or
	// PositionsNone.
	Kind        PositionsKind
	MaxLen, Dim int
	// Std is the standard deviation of a learned table's N(0, Std²)
	// entries; 0 means 1 (GPT-2's is 0.02). The other kinds learn nothing.
	Std float64
}

// Positions adds a positional encoding to (B, S, D) activations, S <= MaxLen.
// Its configuration is fixed when it is built: Config returns a copy.
type Positions struct {
	cfg   PositionsConfig
	name  string      // the scope, for error messages
	table *G.Node     // (MaxLen, D)
	param graph.Param // the table, when learned
}

// Validate checks what NewPositions checks, without allocating anything: a
// known kind, MaxLen and Dim positive, and the (MaxLen, Dim) table (learned or
// sinusoidal) within graph.MaxElements.
func (c PositionsConfig) Validate() error { return c.validate("") }

// validate is Validate for the layer at scope prefix name.
func (c PositionsConfig) validate(name string) error {
	if err := checkPositive(size{"MaxLen", "max_len", c.MaxLen}, size{"Dim", "dim", c.Dim}); err != nil {
		return layerErr("positions", name, err)
	}
	if err := checkStd("Std", c.Std); err != nil {
		return layerErr("positions", name, err)
	}
	switch c.Kind {
	case "", PositionsLearned, PositionsSinusoidal:
		if err := checkTensor("table (MaxLen, Dim)", "max_len", []string{"dim"}, c.MaxLen, c.Dim); err != nil {
			return layerErr("positions", name, err)
		}
	case PositionsNone, PositionsRoPE, PositionsRoPEInterleaved, PositionsALiBi: // nothing added here
	default:
		return layerErr("positions", name, fieldErrorf("positions", nil, "unknown kind %q, want one of %v", c.Kind, positionsKinds))
	}
	return nil
}

// NewPositions returns the positional encoding cfg describes. A learned table
// is the parameter "table" (MaxLen, Dim) of the scope, role
// graph.RoleEmbedding, initialised from N(0, 1), the same scale as the token
// embeddings (not GPT-2's 0.02); the sinusoidal table is a constant.
func NewPositions(s *Scope, cfg PositionsConfig) (*Positions, error) {
	if err := s.checkLayer("positions", cfg.validate); err != nil {
		return nil, err
	}
	if cfg.Kind == "" {
		cfg.Kind = PositionsLearned
	}
	maxLen, dim := cfg.MaxLen, cfg.Dim
	p := &Positions{cfg: cfg, name: s.prefix}
	switch cfg.Kind {
	case PositionsLearned:
		// N(0, 1), not GPT-2's 0.02: at 0.02 position was nearly invisible
		// beside the N(0, 1) token embeddings, and reverse took 975 steps to
		// learn instead of 325.
		var err error
		if p.param, err = s.param("table", graph.RoleEmbedding, normal(stdOr1(cfg.Std)), maxLen, dim); err != nil {
			return nil, layerErr("positions", s.path(), err)
		}
		p.table = p.param.Node
	case PositionsSinusoidal:
		// Validated above; checked again here because this make is the one
		// allocation of the layers package that does not go through param.
		if err := checkTensor("table (MaxLen, Dim)", "max_len", []string{"dim"}, maxLen, dim); err != nil {
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

// Config returns a copy of the configuration the layer was built with, Kind
// filled in; the zero PositionsConfig for a nil Positions.
func (p *Positions) Config() PositionsConfig { return orZero(p).cfg }

// Table returns the learned (MaxLen, Dim) table, role graph.RoleEmbedding;
// the zero Param for fixed encodings (sinusoidal, none), which learn nothing.
func (p *Positions) Table() graph.Param { return orZero(p).param }

// Forward returns x + PE[:S] for x of shape (B, S, D).
func (p *Positions) Forward(x *G.Node) (*G.Node, error) {
	if p == nil || p.cfg.MaxLen <= 0 || p.cfg.Dim <= 0 || (p.table == nil) != (p.cfg.Kind == PositionsNone || p.cfg.Kind.inAttention()) {
		return nil, errors.New("layers: positions: the layer is nil or a zero value: make it with NewPositions")
	}
	kind := p.cfg.Kind
	if err := graph.CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("layers: positions %q (%s): %w", p.name, kind, err)
	}
	s := x.Shape()
	if len(s) != 3 || s[1] > p.cfg.MaxLen || s[2] != p.cfg.Dim {
		return nil, shapeErrorf("layers: positions %q (%s): input shape %v, want (B, S<=%d, %d)", p.name, kind, s, p.cfg.MaxLen, p.cfg.Dim)
	}
	if p.table == nil {
		return x, nil
	}
	out, err := graph.AddPositions(x, p.table) // (B, S, D) + (MaxLen, D)[:S]
	if err != nil {
		return nil, fmt.Errorf("layers: positions %q (%s): %w", p.name, kind, err)
	}
	return out, nil
}

// At returns the rows PE[pos] (B, S, D) for positions pos (B, S), to add
// to the embeddings of tokens that are not at positions 0..S-1 (one new
// token per row when generating with a cache); nil for PositionsNone,
// which adds nothing.
func (p *Positions) At(pos *graph.IDs) (*G.Node, error) {
	if p == nil || p.cfg.MaxLen <= 0 || p.cfg.Dim <= 0 || (p.table == nil) != (p.cfg.Kind == PositionsNone || p.cfg.Kind.inAttention()) {
		return nil, errors.New("layers: positions: the layer is nil or a zero value: make it with NewPositions")
	}
	if err := pos.Check(); err != nil {
		return nil, fmt.Errorf("layers: positions %q: %w", p.name, err)
	}
	if pos.Vocab > p.cfg.MaxLen {
		return nil, shapeErrorf("layers: positions %q: positions range over %d, want at most MaxLen %d", p.name, pos.Vocab, p.cfg.MaxLen)
	}
	if p.table == nil {
		return nil, nil
	}
	out, err := graph.Embed(p.table, pos) // (B, S, D)
	if err != nil {
		return nil, fmt.Errorf("layers: positions %q: %w", p.name, err)
	}
	return out, nil
}

// Params returns the learned table, or nothing for fixed encodings.
func (p *Positions) Params() []graph.Param { return learned(orZero(p).param) }
