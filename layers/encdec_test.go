package layers

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Tests of the encoder–decoder: a gradient check of the whole model with a
// weighted cross-entropy, the plain-Go reference (reference_test.go's
// encDec), properties (source padding is invisible, the decoder is causal,
// cross-attention rows are distributions over the real source), the three
// attention implementations agreeing, and bad input returning errors.

// smallEncDec is a model small enough to gradient-check: source and target
// vocabularies and lengths differ, so that a swapped size cannot pass.
var smallEncDec = EncDecConfig{
	SrcVocab: 7, SrcMaxLen: 6, TgtVocab: 5, TgtMaxLen: 5,
	Dim: 8, Heads: 2, Hidden: 16, EncLayers: 1, DecLayers: 1, Bias: true,
}

// encDecBatch is one padded batch: B = 2, sources of Ss = 5 tokens (lengths
// 5 and 3), targets of St = 4 (lengths 3 and 4).
type encDecBatch struct {
	b, ss, st              int
	src, tgt               []int
	srcLengths, tgtLengths []int
}

var padded = encDecBatch{
	b: 2, ss: 5, st: 4,
	src:        []int{1, 6, 2, 3, 4, 5, 0, 2, 6, 6},
	srcLengths: []int{5, 3},
	tgt:        []int{0, 3, 1, 4, 0, 2, 2, 1},
	tgtLengths: []int{3, 4},
}

// encDecModel is a built encoder–decoder with its inputs.
type encDecModel struct {
	m      *EncoderDecoder
	in     *EncDecInputs
	logits *G.Node
	attn   EncDecWeights
}

// buildEncDec builds cfg in a fresh float64 graph with seed, binds batch and
// runs Forward; perturb, if not nil, overwrites the parameters first.
func buildEncDec(t *testing.T, cfg EncDecConfig, batch encDecBatch, seed uint64) encDecModel {
	t.Helper()
	s := newScope(t, tensor.Float64, seed)
	m, err := NewEncoderDecoder(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewEncDecInputs(s, cfg, batch.b, batch.ss, batch.st)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Set(batch.src, batch.srcLengths, batch.tgt, batch.tgtLengths); err != nil {
		t.Fatal(err)
	}
	logits, attn, err := m.Forward(in.Src, in.SrcPad, in.Tgt, in.TgtPad, in.CrossPad)
	if err != nil {
		t.Fatal(err)
	}
	if want := (tensor.Shape{batch.b, batch.st, cfg.TgtVocab}); !logits.Shape().Eq(want) {
		t.Fatalf("logits shape %v, want %v", logits.Shape(), want)
	}
	return encDecModel{m: m, in: in, logits: logits, attn: attn}
}

// keyPad returns graph.KeyPadding(lengths, sq, sk).At.
func keyPad(t *testing.T, lengths []int, sq, sk int) func(b, i, j int) bool {
	t.Helper()
	m, err := graph.KeyPadding(lengths, sq, sk)
	if err != nil {
		t.Fatal(err)
	}
	return m.At
}

// TestEncDecGradients checks gorgonia's gradient of a weighted cross-entropy
// of the whole model against central finite differences, every parameter,
// on a batch padded on both sides with Ss != St: padding target positions
// are weighted 0, as a trainer weights them.
func TestEncDecGradients(t *testing.T) {
	for i, tc := range []struct {
		name string
		cfg  EncDecConfig
	}{
		{"pre-LN relu", smallEncDec},
		{"post-LN gelu 2 decoder layers", func() EncDecConfig {
			c := smallEncDec
			c.PostLN, c.Activation, c.DecLayers, c.Bias = true, ActivationGELU, 2, false
			return c
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && i > 0 {
				t.Skip("short: one configuration is enough")
			}
			rng := newRand(900 + uint64(i))
			md := buildEncDec(t, tc.cfg, padded, 31)
			params := md.m.Params()
			perturb(t, params, rng)
			g := md.logits.Graph()
			tg, err := graph.NewTargets(g, tensor.Float64, padded.b*padded.st, tc.cfg.TgtVocab, "targets")
			if err != nil {
				t.Fatal(err)
			}
			// Sequence 0 has 3 real target tokens, so its position 3 is
			// padding, weighted 0; the rest carry different weights.
			if err := tg.Set([]int{3, 1, 4, 0, 2, 2, 1, 3}, []float64{1, 2, 0.5, 0, 1, 1, 1.5, 1}); err != nil {
				t.Fatal(err)
			}
			mean, err := graph.CrossEntropy(md.logits, tg)
			if err != nil {
				t.Fatal(err)
			}
			// The weighted mean times the total weight, 8: the summed loss,
			// whose gradients are 8 times larger and so well above the
			// floor below which errors are judged absolutely. Relative
			// errors do not change with the scale.
			cost, err := G.Mul(mean, G.NewConstant(8.0))
			if err != nil {
				t.Fatal(err)
			}
			report, err := graph.GradCheck(cost, params, nil, graph.GradCheckConfig{Floor: gradFloor})
			if err != nil {
				t.Fatal(err)
			}
			if len(report) != len(params) {
				t.Fatalf("report has %d entries for %d parameters", len(report), len(params))
			}
			for _, e := range report {
				if !(e.Rel < gradTol) {
					t.Errorf("%s: relative gradient error %.3g >= %g", e.Name, e.Rel, gradTol)
				}
				// Every key bias, cross-attention's too, has an exactly zero
				// gradient (softmax is shift-invariant); every other
				// parameter must reach the cost, or the check compares 0
				// with 0.
				if strings.HasSuffix(e.Name, ".bk") {
					if e.Norm > 1e-6 {
						t.Errorf("%s: gradient norm %.3g, want 0", e.Name, e.Norm)
					}
				} else if e.Norm < gradFloor {
					t.Errorf("%s: gradient norm %.3g is below the floor %g", e.Name, e.Norm, gradFloor)
				}
			}
			if t.Failed() {
				t.Logf("report:\n%v", report)
			}
			w := report.Worst()
			t.Logf("%d parameters (%d values); worst relative error %.2e (%s)", len(params), totalSize(params), w.Rel, w.Name)
		})
	}
}

func totalSize(params []graph.Param) int {
	n := 0
	for _, p := range params {
		n += p.Node.Shape().TotalSize()
	}
	return n
}

// TestEncDecMatchesReference compares logits and every attention weight
// (encoder self, decoder self, cross) with the plain-Go model, in float64
// within 1e-12, on padded batches with Ss != St.
func TestEncDecMatchesReference(t *testing.T) {
	for i, tc := range []struct {
		name  string
		cfg   EncDecConfig
		batch encDecBatch
	}{
		{"pre-LN/relu/learned", smallEncDec, padded},
		{"pre-LN/gelu/sinusoidal/2+3 layers/4 heads", EncDecConfig{
			SrcVocab: 9, SrcMaxLen: 7, TgtVocab: 6, TgtMaxLen: 6, Dim: 8, Heads: 4, Hidden: 12,
			EncLayers: 2, DecLayers: 3, Activation: ActivationGELU, Positions: PositionsSinusoidal,
		}, encDecBatch{b: 3, ss: 7, st: 3, src: randomIDs(newRand(41), 21, 9), srcLengths: []int{7, 1, 4}, tgt: randomIDs(newRand(42), 9, 6), tgtLengths: []int{3, 2, 1}}},
		{"post-LN/relu/learned/St > Ss", EncDecConfig{
			SrcVocab: 5, SrcMaxLen: 3, TgtVocab: 8, TgtMaxLen: 6, Dim: 8, Heads: 2, Hidden: 16,
			EncLayers: 2, DecLayers: 2, PostLN: true, Bias: true,
		}, encDecBatch{b: 2, ss: 3, st: 6, src: randomIDs(newRand(43), 6, 5), srcLengths: []int{2, 3}, tgt: randomIDs(newRand(44), 12, 8), tgtLengths: []int{6, 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := buildEncDec(t, tc.cfg, tc.batch, 17)
			params := md.m.Params()
			perturb(t, params, newRand(700+uint64(i)))
			nodes := append([]*G.Node{md.logits}, md.attn.Encoder...)
			nodes = append(nodes, md.attn.DecoderSelf...)
			nodes = append(nodes, md.attn.Cross...)
			got := evalOnce(t, nil, nodes...)
			bt := tc.batch
			cfg := tc.cfg
			if cfg.Positions == "" {
				cfg.Positions = PositionsLearned
			}
			r := ref{t, readParams(t, params)}
			want := r.encDec(cfg, bt.src, bt.tgt, bt.b, bt.ss, bt.st,
				keyPad(t, bt.srcLengths, bt.ss, bt.ss), keyPad(t, bt.tgtLengths, bt.st, bt.st), keyPad(t, bt.srcLengths, bt.st, bt.ss))
			d := checkClose(t, "logits", got[0], want.Logits, refTol)
			k := 1
			for _, group := range []struct {
				name string
				want []attnOut
			}{{"encoder self-attention", want.Encoder}, {"decoder self-attention", want.DecSelf}, {"cross-attention", want.Cross}} {
				for l, a := range group.want {
					d = math.Max(d, checkClose(t, fmt.Sprintf("%s of layer %d", group.name, l), got[k], a.Weights, refTol))
					k++
				}
			}
			if k != len(got) {
				t.Errorf("%d weight nodes, the reference has %d", len(got)-1, k-1)
			}
			for l, w := range md.attn.Cross {
				if want := (tensor.Shape{bt.b, cfg.Heads, bt.st, bt.ss}); !w.Shape().Eq(want) {
					t.Errorf("cross-attention %d has shape %v, want (B, H, St, Ss) = %v", l, w.Shape(), want)
				}
			}
			t.Logf("max |graph - reference| over logits and %d weight tensors = %.2e", k-1, d)

		})
	}
}
