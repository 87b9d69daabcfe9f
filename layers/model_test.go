package layers

import (
	"fmt"
	"math"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Forward passes of every layer against the plain-Go reference, on random
// inputs and random (perturbed) parameters, in float64 within 1e-12.

const refTol = 1e-12

// TestLayersMatchReference covers Linear, Embedding, Positions, LayerNorm and
// FeedForward one at a time.
func TestLayersMatchReference(t *testing.T) {
	const b, seqLen, d = 2, 3, 8
	for _, tc := range []struct {
		name string
		// run builds the layer in s, runs it and returns its output and the
		// reference's.
		run func(t *testing.T, s *Scope) (got, want []float64)
	}{
		{"linear/bias", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return linearCase(t, s, LinearConfig{In: 5, Out: 4, Bias: true}, tensor.Shape{b, seqLen, 5})
		}},
		{"linear/no bias", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return linearCase(t, s, LinearConfig{In: 5, Out: 4}, tensor.Shape{b, seqLen, 5})
		}},
		{"linear/2-D input", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return linearCase(t, s, LinearConfig{In: 3, Out: 6, Bias: true}, tensor.Shape{4, 3})
		}},
		{"linear/4-D input", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return linearCase(t, s, LinearConfig{In: 3, Out: 2, Bias: true}, tensor.Shape{2, 2, 3, 3})
		}},
		{"embedding", func(t *testing.T, s *Scope) ([]float64, []float64) {
			e, err := NewEmbedding(s.Sub("emb"), EmbeddingConfig{Vocab: 6, Dim: d})
			if err != nil {
				t.Fatal(err)
			}
			perturb(t, e.Params(), newRand(1))
			ids, err := graph.NewIDs(s.Graph(), b, 4, 6, "ids")
			if err != nil {
				t.Fatal(err)
			}
			idv := []int{5, 0, 3, 3, 1, 5, 2, 0}
			if err := ids.Set(idv); err != nil {
				t.Fatal(err)
			}
			out, err := e.Forward(ids)
			if err != nil {
				t.Fatal(err)
			}
			got := evalOnce(t, nil, out)[0]
			table := ref{t, readParams(t, e.Params())}.w("emb.table")
			var want []float64
			for _, id := range idv {
				want = append(want, table[id*d:(id+1)*d]...)
			}
			return got, want
		}},
		{"positions/learned S<MaxLen", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return positionsCase(t, s, PositionsLearned, 5, seqLen)
		}},
		{"positions/learned S=MaxLen", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return positionsCase(t, s, PositionsLearned, seqLen, seqLen)
		}},
		{"positions/sinusoidal", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return positionsCase(t, s, PositionsSinusoidal, 50, 40)
		}},
		{"positions/none", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return positionsCase(t, s, PositionsNone, 5, seqLen)
		}},
		{"layernorm", func(t *testing.T, s *Scope) ([]float64, []float64) {
			ln, err := NewLayerNorm(s.Sub("ln"), LayerNormConfig{Dim: d})
			if err != nil {
				t.Fatal(err)
			}
			perturb(t, ln.Params(), newRand(2))
			x := uniformVals(newRand(3), b*seqLen*d, -2, 3)
			out, err := ln.Forward(valueNode(s.Graph(), tensor.Float64, tensor.Shape{b, seqLen, d}, x, "x"))
			if err != nil {
				t.Fatal(err)
			}
			return evalOnce(t, nil, out)[0], ref{t, readParams(t, ln.Params())}.layerNorm(x, b*seqLen, d, "ln", 1e-5)
		}},
		{"layernorm/eps 0.5", func(t *testing.T, s *Scope) ([]float64, []float64) {
			ln, err := NewLayerNorm(s.Sub("ln"), LayerNormConfig{Dim: d, Eps: 0.5})
			if err != nil {
				t.Fatal(err)
			}
			perturb(t, ln.Params(), newRand(2))
			x := uniformVals(newRand(3), b*seqLen*d, -1, 1)
			out, err := ln.Forward(valueNode(s.Graph(), tensor.Float64, tensor.Shape{b * seqLen, d}, x, "x"))
			if err != nil {
				t.Fatal(err)
			}
			return evalOnce(t, nil, out)[0], ref{t, readParams(t, ln.Params())}.layerNorm(x, b*seqLen, d, "ln", 0.5)
		}},
		{"feedforward/relu", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return ffCase(t, s, FeedForwardConfig{Dim: d, Hidden: 16, Bias: true})
		}},
		{"feedforward/gelu", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return ffCase(t, s, FeedForwardConfig{Dim: d, Hidden: 16, Activation: ActivationGELU, Bias: true})
		}},
		{"feedforward/gelu no bias", func(t *testing.T, s *Scope) ([]float64, []float64) {
			return ffCase(t, s, FeedForwardConfig{Dim: d, Hidden: 16, Activation: ActivationGELU})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScope(t, tensor.Float64, 1)
			got, want := tc.run(t, s)
			d := checkClose(t, "output", got, want, refTol)
			t.Logf("max |graph - reference| = %.2e", d)
		})
	}
}

func linearCase(t *testing.T, s *Scope, cfg LinearConfig, shape tensor.Shape) ([]float64, []float64) {
	l, err := NewLinear(s.Sub("lin"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	perturb(t, l.Params(), newRand(4))
	r := ref{t, readParams(t, l.Params())}
	x := uniformVals(newRand(5), shape.TotalSize(), -1, 1)
	out, err := l.Forward(valueNode(s.Graph(), tensor.Float64, shape, x, "x"))
	if err != nil {
		t.Fatal(err)
	}
	want := append(shape[:len(shape)-1].Clone(), cfg.Out)
	if !out.Shape().Eq(want) {
		t.Errorf("output shape %v, want %v", out.Shape(), want)
	}
	return evalOnce(t, nil, out)[0], r.linear(x, shape.TotalSize()/cfg.In, cfg.In, cfg.Out, "lin.w", "lin.b", cfg.Bias)
}

func positionsCase(t *testing.T, s *Scope, kind PositionsKind, maxLen, seqLen int) ([]float64, []float64) {
	const b, d = 2, 8
	p, err := NewPositions(s.Sub("pos"), PositionsConfig{Kind: kind, MaxLen: maxLen, Dim: d})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Params()); (kind == PositionsLearned) != (n == 1) {
		t.Errorf("%s positions have %d parameters", kind, n)
	}
	perturb(t, p.Params(), newRand(6))
	r := ref{t, readParams(t, p.Params())}
	x := uniformVals(newRand(7), b*seqLen*d, -1, 1)
	out, err := p.Forward(valueNode(s.Graph(), tensor.Float64, tensor.Shape{b, seqLen, d}, x, "x"))
	if err != nil {
		t.Fatal(err)
	}
	return evalOnce(t, nil, out)[0], r.positions("pos", kind, x, b, seqLen, d)
}

func ffCase(t *testing.T, s *Scope, cfg FeedForwardConfig) ([]float64, []float64) {
	const n = 6
	f, err := NewFeedForward(s.Sub("ff"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	perturb(t, f.Params(), newRand(8))
	r := ref{t, readParams(t, f.Params())}
	x := uniformVals(newRand(9), n*cfg.Dim, -1.5, 1.5)
	out, err := f.Forward(valueNode(s.Graph(), tensor.Float64, tensor.Shape{2, 3, cfg.Dim}, x, "x"))
	if err != nil {
		t.Fatal(err)
	}
	return evalOnce(t, nil, out)[0], r.feedForward(x, n, cfg.Dim, cfg.Hidden, "ff", cfg.Activation, cfg.Bias)
}

// TestBlockMatchesReference runs pre-LN and post-LN blocks against the
// reference. The reference takes Q, K and V from one input (LN1(x) for
// pre-LN, x for post-LN); as a control, a reference whose keys and values
// come from the raw x while queries come from LN1(x) must not match, so a
// block that fed different nodes to Q, K and V would fail.
func TestBlockMatchesReference(t *testing.T) {
	const b, seqLen = 2, 5
	for i, tc := range []struct {
		name    string
		cfg     BlockConfig
		lengths []int // key padding, nil for none
	}{
		{"pre-LN/relu/no mask", BlockConfig{Dim: 8, Heads: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}, nil},
		{"pre-LN/gelu/causal+padding", BlockConfig{Dim: 8, Heads: 2, Hidden: 16, Causal: true, BlockOptions: BlockOptions{Activation: ActivationGELU, Bias: true}}, []int{5, 3}},
		{"post-LN/relu/padding", BlockConfig{Dim: 8, Heads: 2, Hidden: 16, BlockOptions: BlockOptions{PostLN: true, Bias: true}}, []int{2, 5}},
		{"post-LN/gelu/causal no bias eps", BlockConfig{Dim: 8, Heads: 4, Hidden: 16, Causal: true, Eps: 1e-3, BlockOptions: BlockOptions{Activation: ActivationGELU, PostLN: true}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRand(200 + uint64(i))
			s := newScope(t, tensor.Float64, 3)
			blk, err := NewBlock(s.Sub("blocks").Sub("0"), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			perturb(t, blk.Params(), rng)
			x := uniformVals(rng, b*seqLen*tc.cfg.Dim, -1.5, 1.5)
			var m *graph.Mask
			var mn *graph.MaskNode
			if tc.lengths != nil {
				mask, node := paddingMask(t, s, tc.lengths, seqLen, seqLen, "pad")
				m, mn = &mask, node
			}
			y, w, err := blk.Forward(valueNode(s.Graph(), tensor.Float64, tensor.Shape{b, seqLen, tc.cfg.Dim}, x, "x"), mn)
			if err != nil {
				t.Fatal(err)
			}
			got := evalOnce(t, nil, y, w)
			r := ref{t, readParams(t, blk.Params())}
			wantY, wantA := r.block("blocks.0", tc.cfg, x, b, seqLen, allowFunc(m))
			dy := checkClose(t, "block output", got[0], wantY, refTol)
			dw := checkClose(t, "attention weights", got[1], wantA.Weights, refTol)
			t.Logf("max |graph - reference|: output %.2e, weights %.2e", dy, dw)

			if !tc.cfg.PostLN {
				// Control: Q from LN1(x), K and V from x.
				h := r.layerNorm(x, b*seqLen, tc.cfg.Dim, "blocks.0.ln1", 1e-5)
				allow := allowFunc(m)
				if tc.cfg.Causal {
					allow = and(allow, causalAllow)
				}
				dims := attnDims{B: b, Sq: seqLen, Sk: seqLen, Dim: 8, KeyDim: 8, ValueDim: 8, Heads: tc.cfg.Heads}
				wrong := r.attention("blocks.0.attn", dims, tc.cfg.Bias, h, x, x, allow, 8/tc.cfg.Heads)
				if d := maxAbsDiff(got[1], wrong.Weights); d < 1e-6 {
					t.Errorf("weights also match K, V taken from the raw input (diff %.2e): the control cannot fail", d)
				}
			}
		})
	}
}

// TestStacksMatchReference runs whole decoders (logits) and encoders
// (hidden states) against the plain-Go model: embeddings + positions +
// blocks + final LN (pre-LN) + head (decoder), and compares every block's
// attention weights too.
func TestStacksMatchReference(t *testing.T) {
	const b, seqLen = 2, 5
	for i, tc := range []struct {
		name    string
		decoder bool
		cfg     StackConfig
		lengths []int
	}{
		{"decoder/pre-LN/learned", true, StackConfig{Vocab: 7, MaxLen: 6, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}, nil},
		{"decoder/pre-LN/gelu/sinusoidal/padding", true, StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Activation: ActivationGELU, Positions: PositionsSinusoidal}}, []int{5, 3}},
		{"decoder/post-LN/learned/padding", true, StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 4, Layers: 1, Hidden: 16, BlockOptions: BlockOptions{PostLN: true, Bias: true}}, []int{4, 5}},
		{"encoder/pre-LN/padding", false, StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}, []int{5, 2}},
		{"encoder/post-LN/gelu/none", false, StackConfig{Vocab: 5, MaxLen: 7, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Activation: ActivationGELU, PostLN: true, Positions: PositionsNone, Bias: true}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRand(300 + uint64(i))
			s := newScope(t, tensor.Float64, 11)
			ids, err := graph.NewIDs(s.Graph(), b, seqLen, tc.cfg.Vocab, "ids")
			if err != nil {
				t.Fatal(err)
			}
			idv := randomIDs(rng, b*seqLen, tc.cfg.Vocab)
			if err := ids.Set(idv); err != nil {
				t.Fatal(err)
			}
			var m *graph.Mask
			var mn *graph.MaskNode
			if tc.lengths != nil {
				mask, node := paddingMask(t, s, tc.lengths, seqLen, seqLen, "pad")
				m, mn = &mask, node
			}
			out, weights, params := buildStack(t, s, tc.decoder, tc.cfg, ids, mn)
			perturb(t, params, rng)
			if len(weights) != tc.cfg.Layers {
				t.Fatalf("%d attention weight nodes for %d layers", len(weights), tc.cfg.Layers)
			}
			got := evalOnce(t, nil, append(weights, out)...)
			r := ref{t, readParams(t, params)}
			want, atts := r.stack("", tc.cfg, tc.decoder, idv, b, seqLen, allowFunc(m))
			d := checkClose(t, "output", got[len(got)-1], want, refTol)
			for l, a := range atts {
				d = math.Max(d, checkClose(t, fmt.Sprintf("weights of block %d", l), got[l], a.Weights, refTol))
			}
			t.Logf("max |graph - reference| = %.2e", d)
		})
	}
}

// buildStack builds a decoder or an encoder and returns its output, the
// attention weights of every block and its parameters.
func buildStack(t *testing.T, s *Scope, decoder bool, cfg StackConfig, ids *graph.IDs, pad *graph.MaskNode) (out *G.Node, weights []*G.Node, params []graph.Param) {
	t.Helper()
	if decoder {
		d, err := NewDecoder(s, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if out, weights, err = d.Forward(ids, pad); err != nil {
			t.Fatal(err)
		}
		return out, weights, d.Params()
	}
	e, err := NewEncoder(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if out, weights, err = e.Forward(ids, pad); err != nil {
		t.Fatal(err)
	}
	return out, weights, e.Params()
}
