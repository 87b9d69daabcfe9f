package layers

import (
	"errors"
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
	SrcVocab:     7,
	SrcMaxLen:    6,
	TgtVocab:     5,
	TgtMaxLen:    5,
	Dim:          8,
	Heads:        2,
	Hidden:       16,
	EncLayers:    1,
	DecLayers:    1,
	BlockOptions: BlockOptions{Bias: true},
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
		{"post-LN gelu 2 decoder layers dropout", func() EncDecConfig {
			c := smallEncDec
			c.PostLN, c.Activation, c.DecLayers, c.Bias = true, ActivationGELU, 2, false
			c.Dropout, c.AttnDropout = 0.1, 0.15
			return c
		}()},
		{"pre-LN causal encoder", func() EncDecConfig {
			c := smallEncDec
			c.CausalEncoder = true
			return c
		}()},
		{"pre-LN RoPE, MQA, window 2, sinks, softcap, QK-norm", func() EncDecConfig {
			c := smallEncDec
			c.Positions = PositionsRoPE
			c.AttentionVariants = AttentionVariants{KVHeads: 1, Window: 2, Sinks: true, Softcap: 1.5, QKNorm: true}
			return c
		}()},
		{"post-LN ALiBi, window 3, flash", func() EncDecConfig {
			c := smallEncDec
			c.PostLN, c.Positions, c.Attention = true, PositionsALiBi, AttentionFlash
			c.Window = 3
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
			// Fixed dropout masks: the check differentiates through them.
			for _, d := range md.m.Dropouts() {
				if err := d.Resample(3); err != nil {
					t.Fatal(err)
				}
			}
			if n := len(md.m.Dropouts()); (tc.cfg.Dropout > 0) != (n > 0) {
				t.Errorf("%d dropout masks with Dropout %v", n, tc.cfg.Dropout)
			}
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
				// Sinks, a softcap, QK-norm and RoPE break that invariance.
				shiftFree := !tc.cfg.Sinks && tc.cfg.Softcap == 0 && !tc.cfg.QKNorm && !tc.cfg.Positions.rope()
				if strings.HasSuffix(e.Name, ".bk") {
					if shiftFree && e.Norm > 1e-6 {
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
			var notBK graph.GradError
			for _, e := range report {
				if !strings.HasSuffix(e.Name, ".bk") && e.Rel >= notBK.Rel {
					notBK = e
				}
			}
			t.Logf("%d parameters (%d values); worst relative error %.2e (%s), without the key biases %.2e (%s)",
				len(params), totalSize(params), w.Rel, w.Name, notBK.Rel, notBK.Name)
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
			SrcVocab:     9,
			SrcMaxLen:    7,
			TgtVocab:     6,
			TgtMaxLen:    6,
			Dim:          8,
			Heads:        4,
			Hidden:       12,
			EncLayers:    2,
			DecLayers:    3,
			BlockOptions: BlockOptions{Activation: ActivationGELU, Positions: PositionsSinusoidal},
		}, encDecBatch{b: 3, ss: 7, st: 3, src: randomIDs(newRand(41), 21, 9), srcLengths: []int{7, 1, 4}, tgt: randomIDs(newRand(42), 9, 6), tgtLengths: []int{3, 2, 1}}},
		{"post-LN/relu/learned/St > Ss", EncDecConfig{
			SrcVocab:     5,
			SrcMaxLen:    3,
			TgtVocab:     8,
			TgtMaxLen:    6,
			Dim:          8,
			Heads:        2,
			Hidden:       16,
			EncLayers:    2,
			DecLayers:    2,
			BlockOptions: BlockOptions{PostLN: true, Bias: true},
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

// TestEncDecProperties checks, on one compiled model run with different
// bindings, what the masks promise without any expected value:
//   - a padded source token never changes any logit (bit for bit), while a
//     real source token does;
//   - target token j never changes the logits at i < j (bit for bit), while
//     it does change those at i >= j;
//   - every cross-attention row is a distribution over the real source
//     tokens: it sums to 1 there and is exactly 0 on padding.
func TestEncDecProperties(t *testing.T) {
	for _, impl := range []AttentionImpl{AttentionFused, AttentionComposed, AttentionFlash} {
		t.Run(string(impl), func(t *testing.T) {
			cfg := smallEncDec
			cfg.DecLayers, cfg.Attention = 2, impl
			bt := padded
			md := buildEncDec(t, cfg, bt, 5)
			perturb(t, md.m.Params(), newRand(77))
			nodes := append([]*G.Node{md.logits}, md.attn.Cross...)
			if impl == AttentionFlash {
				for l, w := range md.attn.Cross {
					if w != nil {
						t.Errorf("flash returned cross-attention weights for layer %d", l)
					}
				}
				nodes = nodes[:1]
			}
			run := newRunner(t, nodes)
			eval := func(src, tgt []int) [][]float64 {
				return run.run(t, func() error { return md.in.Set(src, bt.srcLengths, tgt, bt.tgtLengths) })
			}
			base := eval(bt.src, bt.tgt)
			v := cfg.TgtVocab

			// Source padding: sequence 1 has 3 real tokens of 5.
			src := append([]int(nil), bt.src...)
			src[1*bt.ss+3], src[1*bt.ss+4] = 0, 5
			if d := maxAbsDiff(eval(src, bt.tgt)[0], base[0]); d != 0 {
				t.Errorf("changing padded source tokens changed the logits by %.3g", d)
			}
			src = append([]int(nil), bt.src...)
			src[1*bt.ss+2] = (src[1*bt.ss+2] + 1) % cfg.SrcVocab
			if d := maxAbsDiff(eval(src, bt.tgt)[0][bt.st*v:], base[0][bt.st*v:]); !(d > 1e-6) {
				t.Errorf("changing a real source token changed sequence 1's logits by only %.3g: the decoder does not read the source", d)
			}

			// Causality: change target token j of sequence 0 (length 3).
			for j := 0; j < bt.st; j++ {
				tgt := append([]int(nil), bt.tgt...)
				tgt[j] = (tgt[j] + 1) % v
				got := eval(bt.src, tgt)[0]
				if d := maxAbsDiff(got[:j*v], base[0][:j*v]); d != 0 {
					t.Errorf("changing target token %d changed the logits before it by %.3g", j, d)
				}
				if d := maxAbsDiff(got[j*v:bt.st*v], base[0][j*v:bt.st*v]); !(d > 1e-6) {
					t.Errorf("changing target token %d changed the logits from it on by only %.3g", j, d)
				}
				if d := maxAbsDiff(got[bt.st*v:], base[0][bt.st*v:]); d != 0 {
					t.Errorf("changing target token %d of sequence 0 changed sequence 1 by %.3g", j, d)
				}
			}

			// Cross-attention rows, every target row (padding rows too:
			// they still read the real source).
			worst := 0.0
			for l, w := range base[1:] {
				for b := 0; b < bt.b; b++ {
					for h := 0; h < cfg.Heads; h++ {
						for i := 0; i < bt.st; i++ {
							row := w[((b*cfg.Heads+h)*bt.st+i)*bt.ss:][:bt.ss]
							var sum float64
							for j, p := range row {
								if j >= bt.srcLengths[b] {
									if p != 0 {
										t.Errorf("layer %d (b=%d, h=%d, i=%d): weight %v on padded source key %d", l, b, h, i, p, j)
									}
									continue
								}
								sum += p
							}
							worst = math.Max(worst, math.Abs(sum-1))
						}
					}
				}
			}
			if worst > 1e-14 {
				t.Errorf("cross-attention rows sum to 1 within %.3g over the real source, want 1e-14", worst)
			}
			t.Logf("cross-attention rows: max |sum - 1| = %.2e", worst)
		})
	}
}

// TestCausalEncoder: with CausalEncoder every encoder weight after its
// query's position or on source padding is exactly 0 and each real row sums
// to 1 over the keys it may see, under both implementations that form the
// weights; the same model with a bidirectional encoder does weigh keys
// after the query, so the check can fail. A decoder refuses the option.
func TestCausalEncoder(t *testing.T) {
	dec := StackConfig{Vocab: 5, MaxLen: 4, Dim: 8, Heads: 2, Layers: 1, Hidden: 16, CausalEncoder: true}
	if _, err := NewDecoder(newScope(t, tensor.Float64, 1), dec); err == nil || !strings.Contains(err.Error(), "CausalEncoder") {
		t.Errorf("NewDecoder with CausalEncoder: error %v, want one naming CausalEncoder", err)
	}
	for _, impl := range []AttentionImpl{AttentionFused, AttentionComposed} {
		for _, causal := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/causal=%v", impl, causal), func(t *testing.T) {
				cfg := smallEncDec
				cfg.EncLayers, cfg.Attention, cfg.CausalEncoder = 2, impl, causal
				md := buildEncDec(t, cfg, padded, 5)
				perturb(t, md.m.Params(), newRand(78))
				w := newRunner(t, md.attn.Encoder).run(t, func() error {
					return md.in.Set(padded.src, padded.srcLengths, padded.tgt, padded.tgtLengths)
				})
				ss, ahead, worst := padded.ss, 0.0, 0.0
				for l, wl := range w {
					for b := 0; b < padded.b; b++ {
						for h := 0; h < cfg.Heads; h++ {
							for i := 0; i < ss; i++ {
								row := wl[((b*cfg.Heads+h)*ss+i)*ss:][:ss]
								var sum float64
								for j, p := range row {
									switch {
									case j >= padded.srcLengths[b]:
										if p != 0 {
											t.Errorf("layer %d (b=%d, h=%d, i=%d): weight %v on padded key %d", l, b, h, i, p, j)
										}
									case j > i:
										ahead = math.Max(ahead, p)
										sum += p
									default:
										sum += p
									}
								}
								if i < padded.srcLengths[b] {
									worst = math.Max(worst, math.Abs(sum-1))
								}
							}
						}
					}
				}
				if worst > 1e-14 {
					t.Errorf("encoder rows sum to 1 within %.3g over their visible keys, want 1e-14", worst)
				}
				switch {
				case causal && ahead != 0:
					t.Errorf("causal encoder: weight %v on a key after its query", ahead)
				case !causal && !(ahead > 1e-3):
					t.Errorf("bidirectional encoder: largest weight after the query %v, want it to reach ahead", ahead)
				}
			})
		}
	}
}

// TestEncDecImplementationsAgree builds the same model (same seed, same
// perturbed parameters) with fused, composed and flash attention: the
// logits agree within 1e-12 in float64, fused and composed return the same
// weights, and flash returns none.
func TestEncDecImplementationsAgree(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  EncDecConfig
	}{
		{"pre-LN", smallEncDec},
		{"post-LN gelu 2+2 layers", func() EncDecConfig {
			c := smallEncDec
			c.PostLN, c.Activation, c.EncLayers, c.DecLayers = true, ActivationGELU, 2, 2
			return c
		}()},
		{"pre-LN causal encoder 2+1 layers", func() EncDecConfig {
			c := smallEncDec
			c.EncLayers, c.CausalEncoder = 2, true
			return c
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fused [][]float64
			for _, impl := range []AttentionImpl{AttentionFused, AttentionComposed, AttentionFlash} {
				cfg := tc.cfg
				cfg.Attention = impl
				md := buildEncDec(t, cfg, padded, 9)
				perturb(t, md.m.Params(), newRand(88))
				ws := append(append(append([]*G.Node(nil), md.attn.Encoder...), md.attn.DecoderSelf...), md.attn.Cross...)
				nodes := []*G.Node{md.logits}
				for _, w := range ws {
					if (w == nil) != (impl == AttentionFlash) {
						t.Fatalf("%s: a weight node is nil %t", impl, w == nil)
					}
					if w != nil {
						nodes = append(nodes, w)
					}
				}
				got := evalOnce(t, nil, nodes...)
				if impl == AttentionFused {
					fused = got
					continue
				}
				d := checkClose(t, string(impl)+" logits", got[0], fused[0], refTol)
				for k := 1; k < len(got); k++ {
					d = math.Max(d, checkClose(t, fmt.Sprintf("%s weights %d", impl, k-1), got[k], fused[k], refTol))
				}
				t.Logf("%s vs fused: max difference %.2e over %d tensors", impl, d, len(got))
			}
		})
	}
}

// TestEncDecAPI checks parameter names, roles and order, that Validate
// counts exactly the parameters the constructor makes, the getters, Config
// as a copy, the scope prefix, and the dropout masks.
func TestEncDecAPI(t *testing.T) {
	s := newScope(t, tensor.Float64, 1)
	cfg := smallEncDec
	cfg.Dropout, cfg.AttnDropout = 0.1, 0.2
	m, err := NewEncoderDecoder(s.Sub("model"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	params := m.Params()
	names := map[string]graph.Param{}
	var order []string
	for _, p := range params {
		if _, dup := names[p.Name]; dup {
			t.Errorf("two parameters are called %q", p.Name)
		}
		names[p.Name] = p
		order = append(order, p.Name)
	}
	want := []string{"enc.tok_emb.table", "enc.pos_emb.table"}
	for _, ln := range []string{"ln1", "ln2"} {
		want = append(want, "enc.blocks.0."+ln+".gain", "enc.blocks.0."+ln+".bias")
	}
	for _, w := range []string{"wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo"} {
		want = append(want, "enc.blocks.0.attn."+w, "dec.blocks.0.self_attn."+w, "dec.blocks.0.cross_attn."+w)
	}
	for _, ln := range []string{"ln1", "ln2", "ln3"} {
		want = append(want, "dec.blocks.0."+ln+".gain", "dec.blocks.0."+ln+".bias")
	}
	for _, f := range []string{"w1", "b1", "w2", "b2"} {
		want = append(want, "enc.blocks.0.ff."+f, "dec.blocks.0.ff."+f)
	}
	want = append(want, "enc.ln_f.gain", "enc.ln_f.bias", "dec.tok_emb.table", "dec.pos_emb.table", "dec.ln_f.gain", "dec.ln_f.bias", "head.w", "head.b")
	for _, n := range want {
		if _, ok := names["model."+n]; !ok {
			t.Errorf("no parameter %q; have %v", "model."+n, order)
		}
	}
	if len(want) != len(params) {
		t.Errorf("%d parameters, want %d: %v", len(params), len(want), order)
	}
	if order[0] != "model.enc.tok_emb.table" || order[len(order)-1] != "model.head.b" {
		t.Errorf("order %v: want the encoder's first and the head's last", order)
	}
	for _, p := range params {
		var role graph.Role
		last := p.Name[strings.LastIndex(p.Name, ".")+1:]
		switch {
		case last == "table":
			role = graph.RoleEmbedding
		case last == "gain":
			role = graph.RoleGain
		case last == "bias" || strings.HasPrefix(last, "b"):
			role = graph.RoleBias
		default:
			role = graph.RoleWeight
		}
		if p.Role != role {
			t.Errorf("%s has role %v, want %v", p.Name, p.Role, role)
		}
	}
	shapes := map[string]tensor.Shape{
		"model.enc.tok_emb.table": {7, 8}, "model.enc.pos_emb.table": {6, 8},
		"model.dec.tok_emb.table": {5, 8}, "model.dec.pos_emb.table": {5, 8},
		"model.dec.blocks.0.cross_attn.wk": {8, 8}, "model.head.w": {8, 5}, "model.head.b": {5},
	}
	for n, sh := range shapes {
		if p, ok := names[n]; ok && !p.Node.Shape().Eq(sh) {
			t.Errorf("%s has shape %v, want %v", n, p.Node.Shape(), sh)
		}
	}
	if n, err := cfg.validate(""); err != nil || n != totalSize(params) {
		t.Errorf("validate counts %d parameters (err %v), the model has %d", n, err, totalSize(params))
	}

	// Getters return the same parameters, by role.
	blk := m.DecoderBlocks()[0]
	for _, c := range []struct {
		got  graph.Param
		want string
	}{
		{m.Encoder().TokenEmbedding().Table(), "model.enc.tok_emb.table"},
		{m.Encoder().Blocks()[0].Attention().WQ(), "model.enc.blocks.0.attn.wq"},
		{m.Encoder().FinalNorm().Gain(), "model.enc.ln_f.gain"},
		{m.TargetEmbedding().Table(), "model.dec.tok_emb.table"},
		{m.TargetPositions().Table(), "model.dec.pos_emb.table"},
		{blk.LN1().Gain(), "model.dec.blocks.0.ln1.gain"},
		{blk.SelfAttention().WQ(), "model.dec.blocks.0.self_attn.wq"},
		{blk.LN2().Bias(), "model.dec.blocks.0.ln2.bias"},
		{blk.CrossAttention().WK(), "model.dec.blocks.0.cross_attn.wk"},
		{blk.CrossAttention().WV(), "model.dec.blocks.0.cross_attn.wv"},
		{blk.LN3().Gain(), "model.dec.blocks.0.ln3.gain"},
		{blk.FeedForward().W2(), "model.dec.blocks.0.ff.w2"},
		{m.FinalNorm().Gain(), "model.dec.ln_f.gain"},
		{m.Head().Weight(), "model.head.w"},
	} {
		if c.got.Name != c.want || c.got.Node != names[c.want].Node {
			t.Errorf("getter returned %q, want %q", c.got.Name, c.want)
		}
	}
	if blk.SelfAttention().Config().Causal != true || blk.CrossAttention().Config().Causal {
		t.Error("want causal self-attention and non-causal cross-attention")
	}
	got := m.Config()
	got.Dim = 99
	if m.Config().Dim != 8 || m.Config().Positions != PositionsLearned {
		t.Errorf("Config is not a copy with defaults filled in: %+v", m.Config())
	}
	m.DecoderBlocks()[0] = nil
	if m.DecoderBlocks()[0] == nil {
		t.Error("DecoderBlocks returned the model's own slice")
	}

	// Dropout: the encoder's embedding and 3 per block (attention weights,
	// after attention, after feed-forward); the decoder's embedding and 5
	// per block (self and cross weights, after each of the 3 sublayers).
	in, err := NewEncDecInputs(s, cfg, 2, 5, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Forward(in.Src, in.SrcPad, in.Tgt, in.TgtPad, in.CrossPad); err != nil {
		t.Fatal(err)
	}
	if n, want := len(m.Dropouts()), 1+3*cfg.EncLayers+1+5*cfg.DecLayers; n != want {
		t.Errorf("%d dropout masks, want %d", n, want)
	}
	if cfg.Validate() != nil || smallEncDec.Validate() != nil {
		t.Error("Validate refuses a valid configuration")
	}
}

// TestEncDecBadInput gives constructors, Forward and the inputs' Set bad
// arguments: each returns an error (the ones about shapes matching
// ErrShape, configurations ErrConfig) and nothing panics.
func TestEncDecBadInput(t *testing.T) {
	s := newScope(t, tensor.Float64, 1)
	g := s.Graph()
	cfg := smallEncDec // SrcVocab 7, SrcMaxLen 6, TgtVocab 5, TgtMaxLen 5
	m, err := NewEncoderDecoder(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewEncDecInputs(s.Sub("in"), cfg, 2, 5, 4)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(b, n, vocab int, name string) *graph.IDs {
		x, err := graph.NewIDs(g, b, n, vocab, name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	mask := func(dt tensor.Dtype, b, sq, sk int, name string) *graph.MaskNode {
		x, err := graph.NewMaskInput(g, dt, b, sq, sk, name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	type args struct {
		src, tgt                 *graph.IDs
		srcPad, tgtPad, crossPad *graph.MaskNode
	}
	ok := args{in.Src, in.Tgt, in.SrcPad, in.TgtPad, in.CrossPad}
	with := func(f func(a *args)) args { a := ok; f(&a); return a }
	for _, tc := range []struct {
		name  string
		m     *EncoderDecoder
		a     args
		shape bool // the error must match ErrShape
	}{
		{"nil model", nil, ok, false},
		{"zero model", &EncoderDecoder{}, ok, false},
		{"nil source", m, with(func(a *args) { a.src = nil }), false},
		{"nil target", m, with(func(a *args) { a.tgt = nil }), false},
		{"zero target ids", m, with(func(a *args) { a.tgt = &graph.IDs{} }), false},
		{"batch mismatch", m, with(func(a *args) { a.src = ids(3, 5, 7, "src3") }), true},
		{"source longer than SrcMaxLen", m, with(func(a *args) { a.src = ids(2, 7, 7, "src7") }), true},
		{"target longer than TgtMaxLen", m, with(func(a *args) { a.tgt = ids(2, 6, 5, "tgt6") }), true},
		{"source vocabulary too large", m, with(func(a *args) { a.src = ids(2, 5, 8, "srcv8") }), true},
		{"target vocabulary too large", m, with(func(a *args) { a.tgt = ids(2, 4, 7, "tgtv7") }), true},
		{"source and target swapped", m, with(func(a *args) { a.src, a.tgt = in.Tgt, in.Src }), true},
		{"source mask (B, St, St)", m, with(func(a *args) { a.srcPad = mask(tensor.Float64, 2, 4, 4, "m1") }), true},
		{"target mask (B, Ss, Ss)", m, with(func(a *args) { a.tgtPad = mask(tensor.Float64, 2, 5, 5, "m2") }), true},
		{"cross mask transposed (B, Ss, St)", m, with(func(a *args) { a.crossPad = mask(tensor.Float64, 2, 5, 4, "m3") }), true},
		{"cross mask of another batch", m, with(func(a *args) { a.crossPad = mask(tensor.Float64, 3, 4, 5, "m4") }), true},
		{"source mask without cross mask", m, with(func(a *args) { a.crossPad = nil }), true},
		{"cross mask without source mask", m, with(func(a *args) { a.srcPad = nil }), true},
		{"mask without a bias node", m, with(func(a *args) { a.crossPad = &graph.MaskNode{B: 2, Sq: 4, Sk: 5} }), false},
		{"float32 mask", m, with(func(a *args) { a.tgtPad = mask(tensor.Float32, 2, 4, 4, "m5") }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := noPanic(t, tc.name, func() error {
				_, _, err := tc.m.Forward(tc.a.src, tc.a.srcPad, tc.a.tgt, tc.a.tgtPad, tc.a.crossPad)
				return err
			})
			if err == nil {
				t.Fatal("no error")
			}
			if tc.shape && !errors.Is(err, ErrShape) {
				t.Errorf("error %q does not match ErrShape", err)
			}
			if !strings.Contains(err.Error(), "encoder-decoder") {
				t.Errorf("error %q does not name the layer", err)
			}
			t.Log(err)
		})
	}

	// Masks may all be nil: an unpadded batch.
	if _, _, err := m.Forward(in.Src, nil, in.Tgt, nil, nil); err != nil {
		t.Errorf("unpadded batch: %v", err)
	}

	bad := func(f func(c *EncDecConfig)) EncDecConfig { c := smallEncDec; f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  EncDecConfig
	}{
		{"zero SrcVocab", bad(func(c *EncDecConfig) { c.SrcVocab = 0 })},
		{"zero TgtMaxLen", bad(func(c *EncDecConfig) { c.TgtMaxLen = 0 })},
		{"zero EncLayers", bad(func(c *EncDecConfig) { c.EncLayers = 0 })},
		{"negative DecLayers", bad(func(c *EncDecConfig) { c.DecLayers = -1 })},
		{"Dim % Heads", bad(func(c *EncDecConfig) { c.Heads = 3 })},
		{"zero Hidden", bad(func(c *EncDecConfig) { c.Hidden = 0 })},
		{"unknown activation", bad(func(c *EncDecConfig) { c.Activation = "tanh" })},
		{"unknown positions", bad(func(c *EncDecConfig) { c.Positions = "rotary" })},
		{"unknown attention", bad(func(c *EncDecConfig) { c.Attention = "sparse" })},
		{"flash with attention dropout", bad(func(c *EncDecConfig) { c.Attention, c.AttnDropout = AttentionFlash, 0.1 })},
		{"dropout 1", bad(func(c *EncDecConfig) { c.Dropout = 1 })},
		{"NaN attention dropout", bad(func(c *EncDecConfig) { c.AttnDropout = math.NaN() })},
		{"huge target vocabulary", bad(func(c *EncDecConfig) { c.TgtVocab = 1 << 40 })},
		{"huge source vocabulary", bad(func(c *EncDecConfig) { c.SrcVocab = 1 << 40 })},
		{"huge DecLayers", bad(func(c *EncDecConfig) { c.DecLayers = 1 << 40 })},
		{"huge EncLayers", bad(func(c *EncDecConfig) { c.EncLayers = 1 << 40 })},
	} {
		t.Run("config/"+tc.name, func(t *testing.T) {
			verr := noPanic(t, "Validate", tc.cfg.Validate)
			nerr := noPanic(t, "NewEncoderDecoder", func() error {
				_, err := NewEncoderDecoder(newScope(t, tensor.Float64, 1), tc.cfg)
				return err
			})
			for _, err := range []error{verr, nerr} {
				if !errors.Is(err, ErrConfig) {
					t.Errorf("error %v does not match ErrConfig", err)
				}
			}
			t.Log(nerr)
		})
	}

	// Nil and zero-value scopes, blocks, inputs.
	var nilModel *EncoderDecoder
	var nilBlock *DecoderBlock
	var nilIn *EncDecInputs
	x := node(s, tensor.Float64, "x", 2, 4, 8)
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"NewEncoderDecoder nil scope", func() error { _, err := NewEncoderDecoder(nil, cfg); return err }},
		{"NewEncoderDecoder zero scope", func() error { _, err := NewEncoderDecoder(&Scope{}, cfg); return err }},
		{"NewDecoderBlock nil scope", func() error {
			_, err := NewDecoderBlock(nil, cfg.decoderConfig().blockConfig(crossKind, LayerKind{}))
			return err
		}},
		{"NewDecoderBlock bad config", func() error {
			_, err := NewDecoderBlock(s.Sub("b"), BlockConfig{Dim: 8, Heads: 3, Hidden: 4})
			return err
		}},
		{"NewEncDecInputs nil scope", func() error { _, err := NewEncDecInputs(nil, cfg, 2, 5, 4); return err }},
		{"NewEncDecInputs zero batch", func() error { _, err := NewEncDecInputs(s, cfg, 0, 5, 4); return err }},
		{"nil block Forward", func() error { _, _, _, err := nilBlock.ForwardCross(x, x, nil, nil); return err }},
		{"block Forward nil memory", func() error { _, _, _, err := m.DecoderBlocks()[0].ForwardCross(x, nil, nil, nil); return err }},
		{"block Forward memory of another width", func() error {
			_, _, _, err := m.DecoderBlocks()[0].ForwardCross(x, node(s, tensor.Float64, "mem", 2, 5, 6), nil, nil)
			return err
		}},
		{"nil inputs Set", func() error { return nilIn.Set(padded.src, padded.srcLengths, padded.tgt, padded.tgtLengths) }},
		{"Set one length short", func() error { return in.Set(padded.src, []int{5}, padded.tgt, padded.tgtLengths) }},
		{"Set length beyond Ss", func() error { return in.Set(padded.src, []int{6, 3}, padded.tgt, padded.tgtLengths) }},
		{"Set source id out of vocabulary", func() error {
			src := append([]int(nil), padded.src...)
			src[0] = 7
			return in.Set(src, padded.srcLengths, padded.tgt, padded.tgtLengths)
		}},
		{"Set source and target swapped", func() error { return in.Set(padded.tgt, padded.srcLengths, padded.src, padded.tgtLengths) }},
	} {
		if err := noPanic(t, c.name, c.f); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if nilModel.Params() != nil || nilModel.Dropouts() != nil || nilModel.Encoder() != nil || nilModel.Head() != nil ||
		nilModel.TargetEmbedding() != nil || nilModel.TargetPositions() != nil || nilModel.FinalNorm() != nil ||
		nilModel.DecoderBlocks() != nil || nilModel.Config() != (EncDecConfig{}) {
		t.Error("a nil model's getters return something")
	}
	if nilBlock.Params() != nil || nilBlock.Dropouts() != nil || nilBlock.SelfAttention() != nil || nilBlock.CrossAttention() != nil ||
		nilBlock.LN1() != nil || nilBlock.LN2() != nil || nilBlock.LN3() != nil || nilBlock.FeedForward() != nil || nilBlock.Config() != (BlockConfig{}) {
		t.Error("a nil block's getters return something")
	}
}

// TestEncDecFloat32 builds the model in float32 and checks that its logits
// are finite and near the float64 model's with the same parameters.
func TestEncDecFloat32(t *testing.T) {
	var out [2][]float64
	for k, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		s := newScope(t, dt, 3)
		m, err := NewEncoderDecoder(s, smallEncDec)
		if err != nil {
			t.Fatal(err)
		}
		perturb(t, m.Params(), newRand(5))
		in, err := NewEncDecInputs(s, smallEncDec, padded.b, padded.ss, padded.st)
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Set(padded.src, padded.srcLengths, padded.tgt, padded.tgtLengths); err != nil {
			t.Fatal(err)
		}
		logits, _, err := m.Forward(in.Src, in.SrcPad, in.Tgt, in.TgtPad, in.CrossPad)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = evalOnce(t, nil, logits)[0]
		if !allFinite(out[k]) {
			t.Fatalf("%v logits are not finite", dt)
		}
	}
	d := checkClose(t, "float32 vs float64 logits", out[1], out[0], 1e-4)
	t.Logf("max |float32 - float64| = %.2e", d)
}

// ExampleEncoderDecoder builds a small encoder–decoder, binds a padded batch
// whose sources and targets differ in length, and prints what Forward
// returns: logits over the target vocabulary and, per layer, the three kinds
// of attention weights. In the cross-attention the queries are target
// positions and the keys source positions, so its weights are (B, H, St, Ss).
func ExampleEncoderDecoder() {
	g := G.NewGraph()
	scope, _ := NewScope(g, tensor.Float64, 1)
	cfg := EncDecConfig{SrcVocab: 10, SrcMaxLen: 8, TgtVocab: 12, TgtMaxLen: 6, Dim: 16, Heads: 2, Hidden: 32, EncLayers: 2, DecLayers: 2}
	model, err := NewEncoderDecoder(scope, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	in, _ := NewEncDecInputs(scope, cfg, 2, 5, 3) // B = 2, Ss = 5, St = 3
	// Source "3 1 4 1 5" and "9 2 6" (padded), target "1 2 3" and "4 5" (padded).
	if err := in.Set([]int{3, 1, 4, 1, 5, 9, 2, 6, 0, 0}, []int{5, 3}, []int{1, 2, 3, 4, 5, 0}, []int{3, 2}); err != nil {
		fmt.Println(err)
		return
	}
	logits, attn, err := model.Forward(in.Src, in.SrcPad, in.Tgt, in.TgtPad, in.CrossPad)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("logits", logits.Shape())
	fmt.Println("encoder self-attention", attn.Encoder[0].Shape())
	fmt.Println("decoder self-attention", attn.DecoderSelf[0].Shape())
	fmt.Println("cross-attention", attn.Cross[0].Shape())
	p := model.DecoderBlocks()[0].CrossAttention()
	fmt.Println(p.WQ().Name, "projects the target;", p.WK().Name, "and", p.WV().Name, "the encoder output")
	// Output:
	// logits (2, 3, 12)
	// encoder self-attention (2, 2, 5, 5)
	// decoder self-attention (2, 2, 3, 3)
	// cross-attention (2, 2, 3, 5)
	// dec.blocks.0.cross_attn.wq projects the target; dec.blocks.0.cross_attn.wk and dec.blocks.0.cross_attn.wv the encoder output
}

// TestBlockCross: a block without cross-attention and one with it are one
// Block type whose parameters are named and ordered as checkpoints know
// them (ln1, attn, ln2, ff; ln1, self_attn, ln2, cross_attn, ln3, ff), and
// each refuses the methods of the other kind with an error naming the one
// to call.
func TestBlockCross(t *testing.T) {
	s := newScope(t, tensor.Float64, 1)
	cfg := BlockConfig{Dim: 8, Heads: 2, Hidden: 16, Causal: true}
	plain, err := NewBlock(s.Sub("plain"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cross, err := NewDecoderBlock(s.Sub("cross"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		b    *Block
		want []string
	}{
		{plain, []string{"ln1.gain", "ln1.bias", "attn.wq", "attn.wk", "attn.wv", "attn.wo", "ln2.gain", "ln2.bias", "ff.w1", "ff.w2"}},
		{cross, []string{"ln1.gain", "ln1.bias", "self_attn.wq", "self_attn.wk", "self_attn.wv", "self_attn.wo", "ln2.gain", "ln2.bias",
			"cross_attn.wq", "cross_attn.wk", "cross_attn.wv", "cross_attn.wo", "ln3.gain", "ln3.bias", "ff.w1", "ff.w2"}},
	} {
		var got []string
		for _, p := range c.b.Params() {
			got = append(got, strings.TrimPrefix(p.Name, c.b.s.prefix+"."))
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s: params %v, want %v", c.b.s.prefix, got, c.want)
		}
		if want := totalSize(c.b.Params()); c.b.Config().params() != want {
			t.Errorf("%s: config counts %d parameters, the block has %d", c.b.s.prefix, c.b.Config().params(), want)
		}
	}
	if plain.CrossAttention() != nil || plain.LN3() != nil || cross.CrossAttention() == nil || cross.SelfAttention() != cross.Attention() {
		t.Error("getters: want no cross-attention or ln3 without Cross, and SelfAttention the same layer as Attention")
	}
	if !cross.Config().Cross || cross.Attention().Config().Causal != true || cross.CrossAttention().Config().Causal {
		t.Error("want Cross set, a causal self-attention and a non-causal cross-attention")
	}

	x := node(s, tensor.Float64, "x", 2, 1, 8)
	cache := node(s, tensor.Float64, "cache", 2, 3, 8)
	slot := node(s, tensor.Float64, "slot", 2, 3, 1)
	for _, c := range []struct {
		name, call string
		f          func() error
	}{
		{"Forward with Cross", "ForwardCross", func() error { _, _, err := cross.Forward(x, nil); return err }},
		{"ForwardCross without", "call Forward", func() error { _, _, _, err := plain.ForwardCross(x, x, nil, nil); return err }},
		{"Step with Cross", "StepCross", func() error { _, _, _, err := cross.Step(x, nil, cache, cache, slot, nil); return err }},
		{"StepCross without", "call Step", func() error {
			_, _, _, err := plain.StepCross(x, nil, cache, cache, slot, nil, cache, cache, nil)
			return err
		}},
	} {
		err := noPanic(t, c.name, c.f)
		if err == nil || !strings.Contains(err.Error(), c.call) {
			t.Errorf("%s: error %v, want one saying to %s", c.name, err, c.call)
		}
	}
}
