package layers

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestLinearStepEqualsForward: the recurrent form, fed one position at a
// time from a zero state, gives Forward's outputs (causal) position by
// position, for every feature map, with and without the denominator, and
// its state never grows.
func TestLinearStepEqualsForward(t *testing.T) {
	const b, seqLen = 2, 6
	for _, fm := range []graph.FeatureMap{graph.FeatureTaylor, graph.FeatureELU1, graph.FeatureReLU, graph.FeatureIdentity} {
		for _, norm := range []LinearNorm{LinearNormSum, LinearNormNone} {
			name := fmt.Sprintf("%s/%s", fm, norm)
			cfg := LinearAttentionConfig{Dim: 8, Heads: 2, Causal: true, Bias: true, LinearOptions: LinearOptions{FeatureMap: fm, FeatureDim: 3, LinearNorm: norm, LinearChunk: 4}}
			s := newScope(t, tensor.Float64, 5)
			a, err := NewLinearAttention(s.Sub("attn"), cfg)
			if err != nil {
				t.Fatal(err)
			}
			rng := newRand(9)
			perturb(t, a.Params(), rng)
			xs := uniformVals(rng, b*seqLen*cfg.Dim, -1, 1)
			x := valueNode(s.Graph(), tensor.Float64, tensor.Shape{b, seqLen, cfg.Dim}, xs, "x")
			full, err := a.Forward(x, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := evalOnce(t, nil, full)[0]

			// The step graph: one position, the state as inputs.
			sg := G.NewGraph()
			ss, err := NewScope(sg, tensor.Float64, 5)
			if err != nil {
				t.Fatal(err)
			}
			sa, err := NewLinearAttention(ss.Sub("attn"), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range sa.Params() {
				copy(p.Node.Value().Data().([]float64), a.Params()[i].Node.Value().Data().([]float64))
			}
			shS, shZ := sa.StateShapes(b)
			state := G.NewTensor(sg, tensor.Float64, 3, G.WithShape(shS...), G.WithName("S"))
			z := G.NewTensor(sg, tensor.Float64, 3, G.WithShape(shZ...), G.WithName("z"))
			xt := G.NewTensor(sg, tensor.Float64, 3, G.WithShape(b, 1, cfg.Dim), G.WithName("xt"))
			out, nextS, nextZ, err := sa.Step(xt, state, z)
			if err != nil {
				t.Fatal(err)
			}
			sv, zv := make([]float64, shS.TotalSize()), make([]float64, shZ.TotalSize())
			for pos := range seqLen {
				xv := make([]float64, 0, b*cfg.Dim)
				for row := range b {
					xv = append(xv, xs[(row*seqLen+pos)*cfg.Dim:][:cfg.Dim]...)
				}
				got := evalOnce(t, func() error {
					return errors.Join(G.Let(xt, graph.NewDense(tensor.Float64, tensor.Shape{b, 1, cfg.Dim}, xv)),
						G.Let(state, graph.NewDense(tensor.Float64, shS, sv)), G.Let(z, graph.NewDense(tensor.Float64, shZ, zv)))
				}, out, nextS, nextZ)
				sv, zv = got[1], got[2]
				for row := range b {
					for c := range cfg.Dim {
						w, g := want[(row*seqLen+pos)*cfg.Dim+c], got[0][row*cfg.Dim+c]
						if math.Abs(w-g) > 1e-12*math.Max(1, math.Abs(w)) {
							t.Fatalf("%s: row %d position %d feature %d: step %v, forward %v", name, row, pos, c, g, w)
						}
					}
				}
			}
		}
	}
}

// TestLinearComposedEqualsChunked: the quadratic form in gorgonia's ops and
// the chunked op compute the same layer, padded or not.
func TestLinearComposedEqualsChunked(t *testing.T) {
	for _, causal := range []bool{true, false} {
		var outs [2][]float64
		for i, impl := range []AttentionImpl{AttentionComposed, AttentionFused} {
			s := newScope(t, tensor.Float64, 3)
			a, err := NewLinearAttention(s.Sub("attn"), LinearAttentionConfig{Dim: 8, Heads: 2, Causal: causal, Impl: impl, LinearOptions: LinearOptions{LinearChunk: 2}})
			if err != nil {
				t.Fatal(err)
			}
			rng := newRand(4)
			perturb(t, a.Params(), rng)
			x := valueNode(s.Graph(), tensor.Float64, tensor.Shape{2, 5, 8}, uniformVals(rng, 80, -1, 1), "x")
			y, err := a.Forward(x, padMask([]int{5, 3}, 5, false)(t, s))
			if err != nil {
				t.Fatal(err)
			}
			outs[i] = evalOnce(t, nil, y)[0]
		}
		for j := range outs[0] {
			if math.Abs(outs[0][j]-outs[1][j]) > 1e-12 {
				t.Fatalf("causal %v: output %d: composed %v, chunked %v", causal, j, outs[0][j], outs[1][j])
			}
		}
	}
}

// TestLayerKinds: the kinds parse, cycle over the blocks, and refusals name
// layer_kinds; a hybrid decoder's blocks are what its kinds say.
func TestLayerKinds(t *testing.T) {
	kinds, err := ParseLayerKinds("linear, window:64,softmax")
	if err != nil {
		t.Fatal(err)
	}
	if want := []LayerKind{{Linear: true}, {Window: 64}, {}}; !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	for _, bad := range []string{"lineal", "window:0", "window:x", "linear,", "softmax;linear"} {
		var fe *FieldError
		if _, err := ParseLayerKinds(bad); !errors.As(err, &fe) || fe.Field != "layer_kinds" {
			t.Errorf("ParseLayerKinds(%q): %v, want a FieldError on layer_kinds", bad, err)
		}
	}
	cfg := StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 5, Hidden: 16, LayerKinds: "linear,window:2"}
	d, err := NewDecoder(newScope(t, tensor.Float32, 1), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, blk := range d.Blocks() {
		linear := i%2 == 0
		if (blk.LinearAttention() != nil) != linear || (blk.Attention() != nil) == linear {
			t.Errorf("block %d: linear %v, softmax %v", i, blk.LinearAttention() != nil, blk.Attention() != nil)
		}
		if !linear && blk.Attention().Config().Window != 2 {
			t.Errorf("block %d: window %d, want 2", i, blk.Attention().Config().Window)
		}
	}
	n, err := cfg.NumParams()
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, p := range d.Params() {
		held += p.Node.Shape().TotalSize()
	}
	if n != held {
		t.Errorf("NumParams %d, the decoder holds %d", n, held)
	}
	ks, vs := d.StepShapes(3, 5)
	if !ks[0].Eq(tensor.Shape{3, 2 * (1 + 4 + 16), 4}) || !vs[0].Eq(tensor.Shape{3, 1, 2 * (1 + 4 + 16)}) || !ks[1].Eq(tensor.Shape{3, 5, 8}) {
		t.Errorf("step shapes %v %v", ks, vs)
	}
	cfg.LayerKinds = "linear,attention"
	var fe *FieldError
	if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != "layer_kinds" {
		t.Errorf("Validate with a bad kind: %v", err)
	}
	cfg.LayerKinds, cfg.FeatureMap = "linear", "cosine"
	if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != "feature_map" {
		t.Errorf("Validate with a bad feature map: %v", err)
	}
}
