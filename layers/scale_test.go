package layers

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	"gorgonia.org/tensor"
)

// scaleWidth is the width w whose 1/sqrt(w) a scale multiplies the scores
// by, for the plain-Go reference: dk, D or 1.
func scaleWidth(s AttentionScale, dim, heads int) int {
	switch s {
	case ScaleDModel:
		return dim
	case ScaleNone:
		return 1
	}
	return dim / heads
}

var allScales = []AttentionScale{ScaleDK, ScaleDModel, ScaleNone}

// TestAttentionScaleMatchesReference: with every scale and every
// implementation, the layer's output equals the plain-Go reference computed
// with that scale, and differs from the reference computed with either of
// the other two (so the test can tell the scales apart, and a scale that
// did not reach an implementation fails it). The empty scale is dk, bit for
// bit.
func TestAttentionScaleMatchesReference(t *testing.T) {
	const b, n, dim, heads = 2, 5, 8, 2
	for _, impl := range []AttentionImpl{AttentionComposed, AttentionFused, AttentionFlash} {
		outs := map[AttentionScale][]float64{}
		for _, scale := range append([]AttentionScale{""}, allScales...) {
			t.Run(fmt.Sprintf("%s/%q", impl, scale), func(t *testing.T) {
				rng := newRand(900)
				s := newScope(t, tensor.Float64, 1)
				a, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{Dim: dim, Heads: heads, Bias: true, Causal: true, Impl: impl, Scale: scale})
				if err != nil {
					t.Fatal(err)
				}
				perturb(t, a.Params(), rng)
				// Large inputs, so that the scales give clearly different
				// softmaxes.
				xq := uniformVals(rng, b*n*dim, -2, 2)
				x := valueNode(s.Graph(), tensor.Float64, tensor.Shape{b, n, dim}, xq, "x")
				m, mn := paddingMask(t, s, []int{5, 3}, n, n, "pad")
				out, _, err := a.Forward(x, x, x, mn)
				if err != nil {
					t.Fatal(err)
				}
				got := evalOnce(t, nil, out)[0]
				outs[scale] = got
				r := ref{t, readParams(t, a.Params())}
				dims := attnDims{B: b, Sq: n, Sk: n, Dim: dim, KeyDim: dim, ValueDim: dim, Heads: heads}
				allow := and(allowFunc(&m), causalAllow)
				want := r.attention("attn", dims, true, xq, xq, xq, allow, scaleWidth(scale, dim, heads))
				d := checkClose(t, "output", got, want.Out, 1e-12)
				t.Logf("max |layer - reference| %.2e", d)
				for _, other := range allScales {
					if scaleWidth(other, dim, heads) == scaleWidth(scale, dim, heads) {
						continue
					}
					wrong := r.attention("attn", dims, true, xq, xq, xq, allow, scaleWidth(other, dim, heads))
					if d := maxAbsDiff(got, wrong.Out); d < 1e-3 {
						t.Errorf("scale %q: output matches the reference of scale %q within %.2e", scale, other, d)
					}
				}
			})
		}
		if maxAbsDiff(outs[""], outs[ScaleDK]) != 0 {
			t.Errorf("%s: scale \"\" and %q differ by %.3g, want bit for bit", impl, ScaleDK, maxAbsDiff(outs[""], outs[ScaleDK]))
		}
	}
}

// TestAttentionScaleEqualsScaledQuery: the scale acts on the queries only,
// through the scores. A dk layer whose wq and bq are multiplied by
// sqrt(dk)·scale computes what a layer of that scale computes with the
// original weights (within rounding), and with the original weights it
// computes something else.
func TestAttentionScaleEqualsScaledQuery(t *testing.T) {
	const b, n, dim, heads = 2, 4, 12, 3
	dk := float64(dim / heads)
	run := func(scale AttentionScale, f float64) []float64 {
		rng := newRand(31)
		s := newScope(t, tensor.Float64, 2)
		a, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{Dim: dim, Heads: heads, Bias: true, Scale: scale})
		if err != nil {
			t.Fatal(err)
		}
		perturb(t, a.Params(), rng)
		scaleParam(t, a.Params(), "attn.wq", f)
		scaleParam(t, a.Params(), "attn.bq", f)
		x := valueNode(s.Graph(), tensor.Float64, tensor.Shape{b, n, dim}, uniformVals(rng, b*n*dim, -2, 2), "x")
		out, _, err := a.Forward(x, x, x, nil)
		if err != nil {
			t.Fatal(err)
		}
		return evalOnce(t, nil, out)[0]
	}
	dkOut := run(ScaleDK, 1)
	for _, c := range []struct {
		scale AttentionScale
		f     float64 // sqrt(dk) times the scale's factor
	}{{ScaleDModel, math.Sqrt(dk / dim)}, {ScaleNone, math.Sqrt(dk)}} {
		got := run(c.scale, 1)
		checkClose(t, fmt.Sprintf("%s vs dk with wq, bq times %.4g", c.scale, c.f), got, run(ScaleDK, c.f), 1e-12)
		if d := maxAbsDiff(got, dkOut); d < 1e-2 {
			t.Errorf("scale %s and dk give outputs within %.2e on the same weights: the scale changes nothing", c.scale, d)
		}
	}
}

// TestAttentionScaleGradients checks the float64 gradients of every
// parameter and of the input for the scales dmodel and none on each
// implementation (causal, with key padding).
func TestAttentionScaleGradients(t *testing.T) {
	for i, impl := range []AttentionImpl{AttentionComposed, AttentionFused, AttentionFlash} {
		for j, scale := range []AttentionScale{ScaleDModel, ScaleNone} {
			t.Run(fmt.Sprintf("%s/%s", impl, scale), func(t *testing.T) {
				rng := newRand(600 + uint64(10*i+j))
				s := newScope(t, tensor.Float64, 21)
				cfg := AttentionConfig{Dim: 8, Heads: 2, Bias: true, Causal: true, Impl: impl, Scale: scale}
				cost, params := selfAttention(cfg, 2, 4, padMask([]int{3, 4}, 4, false))(t, s, rng)
				perturb(t, params, rng)
				report, err := graph.GradCheck(cost, params, nil, graph.GradCheckConfig{Floor: gradFloor})
				if err != nil {
					t.Fatal(err)
				}
				if len(report) != len(attnNames) {
					t.Fatalf("report has %d entries, want %d:\n%v", len(report), len(attnNames), report)
				}
				for _, e := range report {
					if !(e.Rel < gradTol) {
						t.Errorf("%s: relative gradient error %.3g >= %g", e.Name, e.Rel, gradTol)
					}
					if strings.HasSuffix(e.Name, ".bk") {
						if e.Norm > 1e-6 {
							t.Errorf("%s: gradient norm %.3g, want 0", e.Name, e.Norm)
						}
					} else if e.Norm < gradFloor {
						t.Errorf("%s: gradient norm %.3g below the floor %g", e.Name, e.Norm, gradFloor)
					}
				}
				if t.Failed() {
					t.Logf("report:\n%v", report)
				}
				w := report.Worst()
				t.Logf("worst relative error %.2e (%s)", w.Rel, w.Name)
			})
		}
	}
}

// TestAttentionScaleImplsAgree: for each scale, composed and flash give the
// fused output and gradients (float64 and float32).
func TestAttentionScaleImplsAgree(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		outTol, gTol := 1e-12, 1e-10
		if dt == tensor.Float32 {
			outTol, gTol = 1e-5, 1e-4
		}
		for _, scale := range allScales {
			t.Run(fmt.Sprintf("%v/%s", dt, scale), func(t *testing.T) {
				fused := runImpl(t, dt, AttentionFused, scale, attnVariant{}, 3, 6, 6, true, []int{6, 4, 1})
				for _, impl := range []AttentionImpl{AttentionComposed, AttentionFlash} {
					got := runImpl(t, dt, impl, scale, attnVariant{}, 3, 6, 6, true, []int{6, 4, 1})
					if d := relDiff(got.out, fused.out); d > outTol {
						t.Errorf("%s output differs from fused by %.3g (tolerance %g)", impl, d, outTol)
					}
					for name, g := range fused.grads {
						if d := relDiff(got.grads[name], g); d > gTol {
							t.Errorf("%s gradient of %s differs from fused by %.3g (tolerance %g)", impl, name, d, gTol)
						}
					}
				}
			})
		}
	}
}

// TestAttentionScaleValidation: an unknown scale is refused by every
// configuration that holds one, naming the layer and the field.
func TestAttentionScaleValidation(t *testing.T) {
	bad := AttentionScale("sqrt")
	errs := map[string]error{
		"attention": AttentionConfig{Dim: 8, Heads: 2, Scale: bad}.Validate(),
		"block":     BlockConfig{Dim: 8, Heads: 2, Hidden: 8, BlockOptions: BlockOptions{AttnScale: bad}}.Validate(),
		"stack":     StackConfig{Vocab: 5, MaxLen: 4, Dim: 8, Heads: 2, Layers: 1, Hidden: 8, BlockOptions: BlockOptions{AttnScale: bad}}.Validate(),
		"encdec": EncDecConfig{
			SrcVocab:     5,
			SrcMaxLen:    4,
			TgtVocab:     5,
			TgtMaxLen:    4,
			Dim:          8,
			Heads:        2,
			Hidden:       8,
			EncLayers:    1,
			DecLayers:    1,
			BlockOptions: BlockOptions{AttnScale: bad},
		}.Validate(),
	}
	for what, err := range errs {
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `unknown Scale "sqrt"`) || !strings.Contains(err.Error(), "attention") {
			t.Errorf("%s with scale %q: %v, want an ErrConfig error naming the attention layer and the scale", what, bad, err)
		}
	}
	if err := errs["stack"]; err != nil && !strings.Contains(err.Error(), `"blocks.0.attn"`) {
		t.Errorf("stack error %q does not name blocks.0.attn", err)
	}
	s := newScope(t, tensor.Float64, 1)
	if _, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{Dim: 8, Heads: 2, Scale: bad}); err == nil || !strings.Contains(err.Error(), `"attn"`) {
		t.Errorf("NewMultiHeadAttention with scale %q: %v, want an error naming \"attn\"", bad, err)
	}
	for _, sc := range append([]AttentionScale{""}, allScales...) {
		if err := (AttentionConfig{Dim: 8, Heads: 2, Scale: sc}).Validate(); err != nil {
			t.Errorf("scale %q: %v", sc, err)
		}
	}
	for name, want := range map[string]AttentionScale{"dk": ScaleDK, "dmodel": ScaleDModel, "none": ScaleNone} {
		if got, err := ParseAttentionScale(name); err != nil || got != want {
			t.Errorf("ParseAttentionScale(%q) = %q, %v", name, got, err)
		}
	}
	for _, name := range []string{"", "DK", "d_k"} {
		if _, err := ParseAttentionScale(name); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseAttentionScale(%q): %v, want ErrConfig", name, err)
		}
	}
	for _, c := range []struct {
		s    AttentionScale
		want float64
	}{{"", 0.25}, {ScaleDK, 0.25}, {ScaleDModel, 0.125}, {ScaleNone, 1}} {
		if got := c.s.Factor(64, 4); got != c.want {
			t.Errorf("%q.Factor(64, 4) = %v, want %v", c.s, got, c.want)
		}
	}
	if !math.IsNaN(bad.Factor(64, 4)) || !math.IsNaN(ScaleDK.Factor(0, 4)) {
		t.Error("Factor of an unknown scale or a zero width is not NaN")
	}
}

// TestAttentionScaleReachesEveryAttention: a stack's, an encoder's and an
// encoder-decoder's scale reaches every attention they build, the
// cross-attention included.
func TestAttentionScaleReachesEveryAttention(t *testing.T) {
	sc := StackConfig{Vocab: 5, MaxLen: 4, Dim: 8, Heads: 2, Layers: 2, Hidden: 8, BlockOptions: BlockOptions{AttnScale: ScaleNone}}
	dec, err := NewDecoder(newScope(t, tensor.Float64, 1), sc)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := NewEncoder(newScope(t, tensor.Float64, 1), sc)
	if err != nil {
		t.Fatal(err)
	}
	var attns []*MultiHeadAttention
	for _, b := range append(dec.Blocks(), enc.Blocks()...) {
		attns = append(attns, b.Attention())
	}
	ed, err := NewEncoderDecoder(newScope(t, tensor.Float64, 1), EncDecConfig{
		SrcVocab:     5,
		SrcMaxLen:    4,
		TgtVocab:     6,
		TgtMaxLen:    3,
		Dim:          8,
		Heads:        2,
		Hidden:       8,
		EncLayers:    1,
		DecLayers:    2,
		BlockOptions: BlockOptions{AttnScale: ScaleDModel},
	})
	if err != nil {
		t.Fatal(err)
	}
	var edAttns []*MultiHeadAttention
	for _, b := range ed.Encoder().Blocks() {
		edAttns = append(edAttns, b.Attention())
	}
	for _, b := range ed.DecoderBlocks() {
		edAttns = append(edAttns, b.SelfAttention(), b.CrossAttention())
	}
	for i, a := range attns {
		if got := a.Config().Scale; got != ScaleNone {
			t.Errorf("stack attention %d has scale %q, want %q", i, got, ScaleNone)
		}
	}
	for i, a := range edAttns {
		if got := a.Config().Scale; got != ScaleDModel {
			t.Errorf("encoder-decoder attention %d has scale %q, want %q", i, got, ScaleDModel)
		}
	}
	if len(attns) != 4 || len(edAttns) != 5 {
		t.Errorf("%d and %d attentions, want 4 and 5", len(attns), len(edAttns))
	}
}
