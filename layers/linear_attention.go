package layers

import (
	"errors"
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// LinearAttentionConfig configures linear attention.
type LinearAttentionConfig struct {
	// Dim is the model width D; Heads is H, and the values of each head
	// are dk = D/H wide.
	Dim, Heads int
	// Causal lets query i read keys j <= i only (a decoder).
	Causal bool
	// Bias adds bq, bk, bv, bo to the projections.
	Bias bool
	// LinearOptions are the feature map, its input width, the denominator
	// and the chunk.
	LinearOptions
	// Impl is AttentionComposed for the quadratic form in gorgonia's ops
	// (the formula as a learner reads it, O(n²)); AttentionFused and
	// AttentionFlash both take the chunked form, O(n), the default.
	Impl AttentionImpl
	// Init draws wq, wk, wv with Init.Std and wo with Init.OutStd (see
	// WeightInit).
	Init WeightInit
}

// LinearAttention is linear attention (Katharopoulos et al. 2020), the
// mixer of Based (Arora et al. 2024) with the Taylor feature map: per head,
// with φ the feature map applied to each row,
//
//	Q = φ(x Wq), K = φ(x Wk), V = x Wv                      (B, S, H·dφ), (B, S, H·dk)
//	S_i = Σ_{j≤i} K_jᵀ V_j,  z_i = Σ_{j≤i} K_j              (dφ, dk), (dφ)
//	out_i = Q_i S_i / (Q_i · z_i + eps)                     (dk), or Q_i S_i with LinearNormNone
//	y = Concat(out_1..out_H) Wo                              (B, S, D)
//
// over j <= i in a decoder (Causal) and every j in an encoder. The softmax
// of attention is replaced by the dot products of features, so the sums
// S_i and z_i can be carried from position to position: training costs
// O(n·dφ·dk) per head instead of O(n²·dk), and generating keeps the
// (dφ, dk) state per head instead of a cache of every key and value
// (Step). What it gives up is the sharpness of the softmax lookup: a state
// of fixed size holds a bounded number of associations, which `qkv explain
// recall-vs-state` measures.
//
// Its parameters are wq (D, H·d'), wk (D, H·d'), wv (D, D), wo (D, D) and,
// with Bias, bq, bk (H·d'), bv, bo (D), where d' is FeatureDim (dk for 0);
// the names are softmax attention's, so that a block's parameters read the
// same whatever its kind.
type LinearAttention struct {
	cfg            LinearAttentionConfig
	wq, wk, wv, wo *Linear
	s              *Scope
}

// validate checks c for a layer at scope name.
func (c LinearAttentionConfig) validate(name string) error {
	if err := checkPositive(size{"Dim", "dim", c.Dim}, size{"Heads", "heads", c.Heads}); err != nil {
		return layerErr("linear attention", name, err)
	}
	if c.Dim%c.Heads != 0 {
		return layerErr("linear attention", name, fieldErrorf("heads", []string{"dim"}, "Dim %d is not divisible by Heads %d", c.Dim, c.Heads))
	}
	if !c.Impl.Valid() {
		return layerErr("linear attention", name, fieldErrorf("attention", nil, "unknown Impl %q, want %q, %q or %q", c.Impl, AttentionComposed, AttentionFused, AttentionFlash))
	}
	if err := c.Init.validate(); err != nil {
		return layerErr("linear attention", name, err)
	}
	dk := c.Dim / c.Heads
	if err := c.LinearOptions.validate(name, dk); err != nil {
		return err
	}
	for _, w := range []struct {
		name    string
		in, out int
	}{{"wq (Dim, Heads·FeatureDim)", c.Dim, c.Heads * c.featureDim(dk)}, {"wv (Dim, Dim)", c.Dim, c.Dim}, {"state (Heads·features, dk)", c.Heads * c.featureMap().Dim(c.featureDim(dk)), dk}} {
		if err := checkTensor(w.name, "feature_dim", []string{"dim", "heads"}, w.in, w.out); err != nil {
			return layerErr("linear attention", name, err)
		}
	}
	return nil
}

// projections are the configurations of wq, wk, wv and wo, in that order.
func (c LinearAttentionConfig) projections() [4]LinearConfig {
	qk := c.Heads * c.featureDim(c.Dim/c.Heads)
	return [4]LinearConfig{
		{In: c.Dim, Out: qk, Bias: c.Bias, WeightName: "wq", BiasName: "bq", Std: c.Init.Std},
		{In: c.Dim, Out: qk, Bias: c.Bias, WeightName: "wk", BiasName: "bk", Std: c.Init.Std},
		{In: c.Dim, Out: c.Dim, Bias: c.Bias, WeightName: "wv", BiasName: "bv", Std: c.Init.Std},
		{In: c.Dim, Out: c.Dim, Bias: c.Bias, WeightName: "wo", BiasName: "bo", Std: c.Init.OutStd},
	}
}

// params is the number of learnable values of a valid configuration.
func (c LinearAttentionConfig) params() int {
	n := 0
	for _, p := range c.projections() {
		n += p.params()
	}
	return n
}

// features is dφ, the width of each head's features after the map.
func (c LinearAttentionConfig) features() int {
	return c.featureMap().Dim(c.featureDim(c.Dim / c.Heads))
}

// NewLinearAttention returns a linear attention layer in scope s, its
// projections drawn in the order wq, wk, wv, wo.
func NewLinearAttention(s *Scope, cfg LinearAttentionConfig) (*LinearAttention, error) {
	if err := s.check(); err != nil {
		return nil, layerErr("linear attention", s.path(), err)
	}
	if err := cfg.validate(s.path()); err != nil {
		return nil, err
	}
	a := &LinearAttention{cfg: cfg, s: s}
	layers := [4]**Linear{&a.wq, &a.wk, &a.wv, &a.wo}
	for i, p := range cfg.projections() {
		var err error
		if *layers[i], err = NewLinear(s, p); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Config returns a copy of the configuration the layer was built with;
// the zero LinearAttentionConfig for a nil layer.
func (a *LinearAttention) Config() LinearAttentionConfig {
	if a == nil {
		return LinearAttentionConfig{}
	}
	return a.cfg
}

// Params returns wq, bq, wk, bk, wv, bv, wo, bo (no biases without Bias).
func (a *LinearAttention) Params() []graph.Param {
	if a == nil {
		return nil
	}
	var ps []graph.Param
	for _, l := range []*Linear{a.wq, a.wk, a.wv, a.wo} {
		ps = append(ps, l.Params()...)
	}
	return ps
}

// spec is the layer's graph.LinearSpec, without key lengths.
func (a *LinearAttention) spec() graph.LinearSpec {
	impl := graph.Fused // the chunked form, for fused and flash alike
	if a.cfg.Impl == AttentionComposed {
		impl = graph.Composed
	}
	return graph.LinearSpec{Heads: a.cfg.Heads, Causal: a.cfg.Causal, Normalize: a.cfg.LinearNorm != LinearNormNone, Chunk: a.cfg.LinearChunk, Impl: impl}
}

// features returns φ(x W + b) (B, S, H·dφ) for the projection l, wq or wk.
func (a *LinearAttention) features(l *Linear, x *G.Node) (*G.Node, error) {
	p, err := l.Forward(x) // (B, S, H·d')
	if err != nil {
		return nil, err
	}
	phi, err := graph.Features(p, a.cfg.Heads, a.cfg.featureMap()) // (B, S, H·dφ)
	if err != nil {
		return nil, fmt.Errorf("layers: linear attention %q: %w", a.s.prefix, err)
	}
	return phi, nil
}

// Forward maps x (B, S, D) to (B, S, D). mask, if not nil, is a (B, S, S)
// key-padding mask (graph.KeyPadding's), of which linear attention reads
// each sequence's length when the graph runs (graph.MaskNode.KeyLengths):
// any other mask is an error when the graph runs.
func (a *LinearAttention) Forward(x *G.Node, mask *graph.MaskNode) (*G.Node, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	name := a.s.prefix
	if err := graph.CheckNode(x, "input"); err != nil {
		return nil, fmt.Errorf("layers: linear attention %q: %w", name, err)
	}
	xs := x.Shape()
	if len(xs) != 3 || xs[2] != a.cfg.Dim {
		return nil, shapeErrorf("layers: linear attention %q: input shape %v, want (B, S, %d)", name, xs, a.cfg.Dim)
	}
	if x.Dtype() != a.s.dt {
		return nil, fmt.Errorf("layers: linear attention %q: input %q is %v, the layer is %v", name, x.Name(), x.Dtype(), a.s.dt)
	}
	if mask != nil && (mask.B != xs[0] || mask.Sq != xs[1] || mask.Sk != xs[1]) {
		return nil, shapeErrorf("layers: linear attention %q: mask is (B, Sq, Sk) = (%d, %d, %d), inputs need (%d, %d, %d)", name, mask.B, mask.Sq, mask.Sk, xs[0], xs[1], xs[1])
	}
	q, err := a.features(a.wq, x) // (B, S, H·dφ)
	if err != nil {
		return nil, err
	}
	k, err := a.features(a.wk, x) // (B, S, H·dφ)
	if err != nil {
		return nil, err
	}
	v, err := a.wv.Forward(x) // (B, S, D)
	if err != nil {
		return nil, err
	}
	spec := a.spec()
	spec.KeyLengths = mask.KeyLengths()
	y, err := graph.LinearAttend(q, k, v, spec) // (B, S, D)
	if err != nil {
		return nil, fmt.Errorf("layers: linear attention %q: %w", name, err)
	}
	return a.wo.Forward(y) // (B, S, D)
}

// StateShapes are the shapes of the recurrent state of b rows that Step
// reads and returns: the sums S (B, H·dφ, dk) and z (B, 1, H·dφ). They are
// the same at every position: what a linear layer keeps while generating
// does not grow with the sequence, where a softmax layer's key/value cache
// does.
func (a *LinearAttention) StateShapes(b int) (s, z tensor.Shape) {
	c := a.Config()
	if c.Heads <= 0 {
		return nil, nil
	}
	f := c.Heads * c.features()
	return tensor.Shape{b, f, c.Dim / c.Heads}, tensor.Shape{b, 1, f}
}

// Step is the recurrent form of Forward for generating, one new position
// per row: x (B, 1, D), the state s and z (StateShapes) summed over the
// row's positions before (zeros at its first position), and it returns
// the output (B, 1, D) and the state with the new position added, to bind
// at the next step. Its outputs equal Forward's (Causal) position by
// position.
func (a *LinearAttention) Step(x, s, z *G.Node) (out, nextS, nextZ *G.Node, err error) {
	if err := a.check(); err != nil {
		return nil, nil, nil, err
	}
	name := a.s.prefix
	if !a.cfg.Causal {
		return nil, nil, nil, fmt.Errorf("layers: linear attention %q: step: the layer is not causal: an encoder reads every position at once", name)
	}
	for _, n := range []struct {
		node *G.Node
		name string
	}{{x, "input"}, {s, "state S"}, {z, "state z"}} {
		if err := graph.CheckNode(n.node, n.name); err != nil {
			return nil, nil, nil, fmt.Errorf("layers: linear attention %q: step: %w", name, err)
		}
	}
	xs := x.Shape()
	if len(xs) != 3 || xs[1] != 1 || xs[2] != a.cfg.Dim {
		return nil, nil, nil, shapeErrorf("layers: linear attention %q: step: input shape %v, want (B, 1, %d)", name, xs, a.cfg.Dim)
	}
	wantS, wantZ := a.StateShapes(xs[0])
	if !s.Shape().Eq(wantS) || !z.Shape().Eq(wantZ) {
		return nil, nil, nil, shapeErrorf("layers: linear attention %q: step: state %v and %v, want %v and %v", name, s.Shape(), z.Shape(), wantS, wantZ)
	}
	q, err := a.features(a.wq, x) // (B, 1, H·dφ)
	if err != nil {
		return nil, nil, nil, err
	}
	k, err := a.features(a.wk, x) // (B, 1, H·dφ)
	if err != nil {
		return nil, nil, nil, err
	}
	v, err := a.wv.Forward(x) // (B, 1, D)
	if err != nil {
		return nil, nil, nil, err
	}
	y, nextS, nextZ, err := graph.LinearStep(q, k, v, s, z, a.spec()) // (B, 1, D), S and z with position t
	if err != nil {
		return nil, nil, nil, fmt.Errorf("layers: linear attention %q: step: %w", name, err)
	}
	if out, err = a.wo.Forward(y); err != nil { // (B, 1, D)
		return nil, nil, nil, err
	}
	return out, nextS, nextZ, nil
}

// check returns an error unless a was made by NewLinearAttention.
func (a *LinearAttention) check() error {
	if a == nil || a.s.check() != nil || a.wq == nil || a.wk == nil || a.wv == nil || a.wo == nil {
		return errors.New("layers: linear attention: the layer is nil or a zero value: make it with NewLinearAttention")
	}
	return nil
}
