package layers

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
)

// TestEncDecStepEqualsForward: decoding the target one position at a time,
// with the encoder's cross-attention keys and values projected once
// (Encode) and the self-attention keys and values cached (Step), gives at
// every position the logits the full Forward gives, within 1e-12, with
// padded sources of different lengths, pre- and post-LN, for every
// attention implementation.
func TestEncDecStepEqualsForward(t *testing.T) {
	const b, ss, st = 2, 5, 6
	src := []int{1, 2, 3, 4, 5, 6, 5, 4, 0, 0}
	srcLengths := []int{5, 3}
	tgt := []int{1, 2, 3, 4, 5, 2, 1, 5, 4, 3, 2, 1}
	for _, c := range []struct {
		postLN bool
		impl   AttentionImpl
	}{{false, AttentionFused}, {true, AttentionFused}, {false, AttentionComposed}, {false, AttentionFlash}} {
		t.Run(fmt.Sprintf("postLN=%v/%s", c.postLN, c.impl), func(t *testing.T) {
			cfg := EncDecConfig{
				SrcVocab:     7,
				SrcMaxLen:    ss,
				TgtVocab:     6,
				TgtMaxLen:    st,
				Dim:          8,
				Heads:        2,
				Hidden:       12,
				EncLayers:    1,
				DecLayers:    2,
				BlockOptions: BlockOptions{Activation: ActivationGELU, PostLN: c.postLN, Bias: true, Attention: c.impl},
			}
			build := func() (*Scope, *EncoderDecoder) {
				s := newScope(t, tensor.Float64, 3)
				m, err := NewEncoderDecoder(s, cfg)
				if err != nil {
					t.Fatal(err)
				}
				perturb(t, m.Params(), graphtest.NewRand(9)) // the same values in every graph
				return s, m
			}

			// The whole target at once.
			s, full := build()
			in, err := NewEncDecInputs(s, cfg, b, ss, st)
			if err != nil {
				t.Fatal(err)
			}
			logits, _, err := full.Forward(in.Src, in.SrcPad, in.Tgt, in.TgtPad, in.CrossPad)
			if err != nil {
				t.Fatal(err)
			}
			want := evalOnce(t, func() error { return in.Set(src, srcLengths, tgt, []int{st, st}) }, logits)[0] // (B, St, V)

			// The encoder once.
			es, enc := build()
			srcIDs, err := graph.NewIDs(es.Graph(), b, ss, cfg.SrcVocab, "src")
			if err != nil {
				t.Fatal(err)
			}
			_, srcPad := paddingMask(t, es, srcLengths, ss, ss, "src_pad")
			crossK, crossV, err := enc.Encode(srcIDs, srcPad)
			if err != nil {
				t.Fatal(err)
			}
			projected := evalOnce(t, func() error { return srcIDs.Set(src) }, append(append([]*G.Node{}, crossK...), crossV...)...)

			// Then one target position per step.
			ps, step := build()
			g := ps.Graph()
			tok, err := graph.NewIDs(g, b, 1, cfg.TgtVocab, "tok")
			if err != nil {
				t.Fatal(err)
			}
			pos, err := graph.NewIDs(g, b, 1, st, "pos")
			if err != nil {
				t.Fatal(err)
			}
			selfMask, err := graph.NewMaskInput(g, tensor.Float64, b, 1, st, "seen")
			if err != nil {
				t.Fatal(err)
			}
			_, crossMask := paddingMask(t, ps, srcLengths, 1, ss, "cross")
			slot := G.NewTensor(g, tensor.Float64, 3, G.WithShape(b, st, 1), G.WithName("slot"))
			var cacheK, cacheV, ck, cv []*G.Node
			for i := 0; i < cfg.DecLayers; i++ {
				cacheK = append(cacheK, valueNode(g, tensor.Float64, tensor.Shape{b, st, cfg.Dim}, make([]float64, b*st*cfg.Dim), fmt.Sprintf("k%d", i)))
				cacheV = append(cacheV, valueNode(g, tensor.Float64, tensor.Shape{b, st, cfg.Dim}, make([]float64, b*st*cfg.Dim), fmt.Sprintf("v%d", i)))
				ck = append(ck, valueNode(g, tensor.Float64, tensor.Shape{b, ss, cfg.Dim}, projected[i], fmt.Sprintf("ck%d", i)))
				cv = append(cv, valueNode(g, tensor.Float64, tensor.Shape{b, ss, cfg.Dim}, projected[cfg.DecLayers+i], fmt.Sprintf("cv%d", i)))
			}
			out, keys, values, err := step.Step(tok, pos, cacheK, cacheV, slot, selfMask, ck, cv, crossMask)
			if err != nil {
				t.Fatal(err)
			}
			r := newRunner(t, append(append([]*G.Node{out}, keys...), values...))
			worst := 0.0
			for p := 0; p < st; p++ {
				vals := r.run(t, func() error {
					if err := tok.Set([]int{tgt[p], tgt[st+p]}); err != nil {
						return err
					}
					if err := pos.Set([]int{p, p}); err != nil {
						return err
					}
					m, err := graph.KeyPadding([]int{p + 1, p + 1}, 1, st)
					if err != nil {
						return err
					}
					if err := selfMask.Set(m); err != nil {
						return err
					}
					sl := make([]float64, b*st)
					sl[p], sl[st+p] = 1, 1
					return G.Let(slot, graph.NewDense(tensor.Float64, tensor.Shape{b, st, 1}, sl))
				})
				v := cfg.TgtVocab
				for row := 0; row < b; row++ {
					got := vals[0][row*v : (row+1)*v]
					ref := want[(row*st+p)*v : (row*st+p+1)*v]
					worst = max(worst, maxAbsDiff(got, ref))
				}
				for i := range cacheK { // the caches with row p written in, for the next step
					if err := G.Let(cacheK[i], graph.NewDense(tensor.Float64, tensor.Shape{b, st, cfg.Dim}, vals[1+i])); err != nil {
						t.Fatal(err)
					}
					if err := G.Let(cacheV[i], graph.NewDense(tensor.Float64, tensor.Shape{b, st, cfg.Dim}, vals[1+cfg.DecLayers+i])); err != nil {
						t.Fatal(err)
					}
				}
			}
			if worst > 1e-12 {
				t.Errorf("step logits differ from Forward's by %.3g", worst)
			}
			t.Logf("worst |step - forward| over %d positions: %.2g", st, worst)
		})
	}
}
