package layers

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Properties that need no expected values: causality, padding invariance,
// fully masked rows, permutation equivariance, normalised attention, float32
// stability, seeding.

// model is a built decoder or encoder with its inputs.
type model struct {
	out     *G.Node
	weights []*G.Node
	params  []graph.Param
	ids     *graph.IDs
	pad     *graph.MaskNode
}

func buildModel(t *testing.T, dt tensor.Dtype, seed uint64, decoder bool, cfg StackConfig, b, seqLen int, lengths []int) model {
	t.Helper()
	s := newScope(t, dt, seed)
	ids, err := graph.NewIDs(s.Graph(), b, seqLen, cfg.Vocab, "ids")
	if err != nil {
		t.Fatal(err)
	}
	m := model{ids: ids}
	if lengths != nil {
		_, m.pad = paddingMask(t, s, lengths, seqLen, seqLen, "pad")
	}
	m.out, m.weights, m.params = buildStack(t, s, decoder, cfg, ids, m.pad)
	return m
}

// bitsEqual reports whether a and b are equal bit for bit.
func bitsEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// row returns row (b, i) of a (B, S, W) slice.
func row(x []float64, seqLen, width, b, i int) []float64 {
	return x[(b*seqLen+i)*width:][:width]
}

// TestDecoderIsCausal changes the token at position j and checks that the
// logits at every i < j stay the same bit for bit, and that those at j do
// change. Exactness is expected, not just closeness: graph.MaskedSoftmax
// leaves a hidden key out of the row's max and normaliser and gives it weight
// exactly 0, so a future key adds exact zeros (0 * v) to the weighted sum
// over V, whatever its value; every other op (embedding, positions,
// LayerNorm, feed-forward, head) works row by row, and a matrix product's
// row i does not depend on the values of the other rows.
func TestDecoderIsCausal(t *testing.T) {
	const b, seqLen = 2, 5
	for _, tc := range []struct {
		name    string
		dt      tensor.Dtype
		cfg     StackConfig
		lengths []int
	}{
		{"float64/pre-LN", tensor.Float64, StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}, nil},
		{"float64/post-LN/sinusoidal/padding", tensor.Float64, StackConfig{Vocab: 7, MaxLen: 6, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Activation: ActivationGELU, PostLN: true, Positions: PositionsSinusoidal}}, []int{5, 4}},
		{"float32/pre-LN/padding", tensor.Float32, StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}, []int{3, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRand(40)
			m := buildModel(t, tc.dt, 5, true, tc.cfg, b, seqLen, tc.lengths)
			perturb(t, m.params, rng)
			r := newRunner(t, []*G.Node{m.out})
			base := randomIDs(rng, b*seqLen, tc.cfg.Vocab)
			want := r.run(t, func() error { return m.ids.Set(base) })[0]
			v := tc.cfg.Vocab
			for j := 0; j < seqLen; j++ {
				changed := slices.Clone(base)
				for n := 0; n < b; n++ {
					changed[n*seqLen+j] = (base[n*seqLen+j] + 1 + n) % v
				}
				got := r.run(t, func() error { return m.ids.Set(changed) })[0]
				for n := 0; n < b; n++ {
					for i := 0; i < j; i++ {
						if !bitsEqual(row(got, seqLen, v, n, i), row(want, seqLen, v, n, i)) {
							t.Errorf("changing token %d of sequence %d changed the logits at %d < %d:\n got %v\nwant %v", j, n, i, j, row(got, seqLen, v, n, i), row(want, seqLen, v, n, i))
						}
					}
					// The control: position j itself sees the new token.
					if bitsEqual(row(got, seqLen, v, n, j), row(want, seqLen, v, n, j)) {
						t.Errorf("changing token %d of sequence %d left the logits at %d unchanged", j, n, j)
					}
				}
			}
		})
	}
}

// TestEncoderIgnoresPadding changes the tokens at padded positions (>= the
// sequence's length) and checks that the hidden states at real positions are
// unchanged, EXACTLY (bit for bit), for the same reason as causality: a
// padded key is left out of the softmax and has weight exactly 0, so it adds
// exact zeros to every real query's sums; the padded queries' own rows do
// change, but rows never mix outside attention. As a control, changing a
// real token must change the other real positions of its sequence.
func TestEncoderIgnoresPadding(t *testing.T) {
	const b, seqLen = 2, 5
	lengths := []int{5, 3}
	for _, tc := range []struct {
		name string
		dt   tensor.Dtype
		cfg  StackConfig
	}{
		{"float64/pre-LN", tensor.Float64, StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}},
		{"float64/post-LN/gelu", tensor.Float64, StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Activation: ActivationGELU, PostLN: true, Bias: true}}},
		{"float32/pre-LN", tensor.Float32, StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRand(41)
			m := buildModel(t, tc.dt, 6, false, tc.cfg, b, seqLen, lengths)
			perturb(t, m.params, rng)
			d := tc.cfg.Dim
			r := newRunner(t, []*G.Node{m.out})
			base := randomIDs(rng, b*seqLen, tc.cfg.Vocab)
			want := r.run(t, func() error { return m.ids.Set(base) })[0]
			for trial := 0; trial < 4; trial++ {
				changed := slices.Clone(base)
				for n, l := range lengths {
					for i := l; i < seqLen; i++ {
						changed[n*seqLen+i] = rng.IntN(tc.cfg.Vocab)
					}
				}
				got := r.run(t, func() error { return m.ids.Set(changed) })[0]
				for n, l := range lengths {
					for i := 0; i < l; i++ {
						if !bitsEqual(row(got, seqLen, d, n, i), row(want, seqLen, d, n, i)) {
							t.Errorf("trial %d: changing padding tokens changed real position %d of sequence %d (ids %v -> %v)", trial, i, n, base, changed)
						}
					}
				}
			}
			// Control: a real token reaches the other real positions.
			changed := slices.Clone(base)
			changed[1*seqLen+1] = (base[1*seqLen+1] + 1) % tc.cfg.Vocab
			got := r.run(t, func() error { return m.ids.Set(changed) })[0]
			if bitsEqual(row(got, seqLen, d, 1, 0), row(want, seqLen, d, 1, 0)) {
				t.Error("changing real token 1 of sequence 1 did not change real position 0: the test cannot see leaks")
			}
		})
	}
}

// TestFullyMaskedRow gives MultiHeadAttention a query that may attend to
// nothing (and a whole sequence of them): its weights must be exactly zero,
// nothing may be NaN, the output row must be exactly the output bias bo (the
// head outputs are 0, and 0 Wo + bo = bo), and the gradients must be finite.
func TestFullyMaskedRow(t *testing.T) {
	const b, seqLen, d = 2, 4, 8
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			rng := newRand(42)
			s := newScope(t, dt, 1)
			a, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{Dim: d, Heads: 2, Bias: true, Causal: true})
			if err != nil {
				t.Fatal(err)
			}
			// Sequence 0: query 2 sees nothing. Sequence 1: length 0, no
			// query sees anything.
			m, err := graph.KeyPadding([]int{seqLen, 0}, seqLen, seqLen)
			if err != nil {
				t.Fatal(err)
			}
			for j := 0; j < seqLen; j++ {
				m.Allow[(0*seqLen+2)*seqLen+j] = false
			}
			blank := func(n, i int) bool { return n == 1 || i == 2 }
			x := valueNode(s.Graph(), dt, tensor.Shape{b, seqLen, d}, uniformVals(rng, b*seqLen*d, -1, 1), "x")
			xp := graph.Param{Name: "x", Node: x}
			params := append(a.Params(), xp)
			perturb(t, params, rng)
			out, weights, err := a.Forward(x, x, x, maskInput(t, s, m, "mask"))
			if err != nil {
				t.Fatal(err)
			}
			cost, _ := weightedSum(t, out, rng)
			grads, err := G.Grad(cost, graph.Nodes(params)...)
			if err != nil {
				t.Fatal(err)
			}
			got := evalOnce(t, nil, append([]*G.Node{out, weights}, grads...)...)
			for i, v := range got {
				if !allFinite(v) {
					t.Errorf("value %d (output, weights, gradients) is not finite: %v", i, v)
				}
			}
			bo := readParams(t, a.Params())["attn.bo"]
			w := got[1] // (B, H, Sq, Sk)
			for n := 0; n < b; n++ {
				for i := 0; i < seqLen; i++ {
					var rowSum float64
					for h := 0; h < 2; h++ {
						for j := 0; j < seqLen; j++ {
							v := w[((n*2+h)*seqLen+i)*seqLen+j]
							if blank(n, i) && v != 0 {
								t.Errorf("fully masked query (%d, %d): head %d key %d has weight %v, want 0", n, i, h, j, v)
							}
							rowSum += v
						}
					}
					if blank(n, i) {
						if got := row(got[0], seqLen, d, n, i); !bitsEqual(got, bo) {
							t.Errorf("fully masked query (%d, %d): output %v, want exactly bo = %v", n, i, got, bo)
						}
					} else if math.Abs(rowSum-2) > 1e-5 {
						t.Errorf("query (%d, %d): weights of 2 heads sum to %v, want 2", n, i, rowSum)
					}
				}
			}
		})
	}
}

// TestPermutationEquivariance: without positional encoding and without a
// mask, an encoder is permutation-equivariant: permuting the tokens of a
// sequence permutes its hidden states (within 1e-12, not exactly: the sums
// over keys run in another order). As a control, with learned positions it
// is not.
func TestPermutationEquivariance(t *testing.T) {
	const b, seqLen = 2, 5
	perms := [][]int{{3, 0, 4, 1, 2}, {4, 3, 2, 1, 0}}
	for _, tc := range []struct {
		positions   PositionsKind
		equivariant bool
	}{{PositionsNone, true}, {PositionsLearned, false}} {
		t.Run(string(tc.positions), func(t *testing.T) {
			rng := newRand(43)
			cfg := StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true, Positions: tc.positions}}
			m := buildModel(t, tensor.Float64, 7, false, cfg, b, seqLen, nil)
			perturb(t, m.params, rng)
			r := newRunner(t, []*G.Node{m.out})
			base := randomIDs(rng, b*seqLen, cfg.Vocab)
			permuted := make([]int, len(base))
			for n, p := range perms {
				for i := range p {
					permuted[n*seqLen+i] = base[n*seqLen+p[i]]
				}
			}
			x := r.run(t, func() error { return m.ids.Set(base) })[0]
			y := r.run(t, func() error { return m.ids.Set(permuted) })[0]
			var want []float64 // x permuted
			for n, p := range perms {
				for i := range p {
					want = append(want, row(x, seqLen, cfg.Dim, n, p[i])...)
				}
			}
			d := maxAbsDiff(y, want)
			if tc.equivariant && !(d <= 1e-12) {
				t.Errorf("permuting the tokens changed the outputs beyond the permutation: max diff %.3g > 1e-12", d)
			}
			if !tc.equivariant && d < 1e-6 {
				t.Errorf("with %s positions the encoder is still permutation-equivariant (diff %.3g): the control cannot fail", tc.positions, d)
			}
			t.Logf("max |f(P x) - P f(x)| = %.2e", d)
		})
	}
}

// TestAttentionRowsSumToOne checks every block's weights of a decoder with
// padding: each query's weights over the keys it may see sum to 1 and hidden
// keys get exactly 0.
func TestAttentionRowsSumToOne(t *testing.T) {
	const b, seqLen, heads = 2, 5, 2
	lengths := []int{5, 3}
	for _, decoder := range []bool{true, false} {
		name := map[bool]string{true: "decoder", false: "encoder"}[decoder]
		t.Run(name, func(t *testing.T) {
			rng := newRand(44)
			cfg := StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: heads, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}
			m := buildModel(t, tensor.Float64, 8, decoder, cfg, b, seqLen, lengths)
			perturb(t, m.params, rng)
			if err := m.ids.Set(randomIDs(rng, b*seqLen, cfg.Vocab)); err != nil {
				t.Fatal(err)
			}
			got := evalOnce(t, nil, m.weights...)
			for l, w := range got {
				for n := 0; n < b; n++ {
					for h := 0; h < heads; h++ {
						for i := 0; i < seqLen; i++ {
							var sum float64
							for j := 0; j < seqLen; j++ {
								v := w[((n*heads+h)*seqLen+i)*seqLen+j]
								visible := j < lengths[n] && (!decoder || j <= i)
								if !visible && v != 0 {
									t.Errorf("block %d (%d, %d, %d): hidden key %d has weight %v", l, n, h, i, j, v)
								}
								if v < 0 || v > 1 {
									t.Errorf("block %d (%d, %d, %d): weight %v of key %d is outside [0, 1]", l, n, h, i, v, j)
								}
								sum += v
							}
							if math.Abs(sum-1) > 1e-12 {
								t.Errorf("block %d (%d, %d, %d): weights sum to %.17g, want 1", l, n, h, i, sum)
							}
						}
					}
				}
			}
		})
	}
}

// TestFloat32LargeScores scales a float32 decoder up until its attention
// scores are near 1e3 and its logits near 1e3 (float32's exp overflows past
// 88): the logits, weights, loss and gradients must stay finite, and the
// logits must agree with the float64 reference at the same parameters.
func TestFloat32LargeScores(t *testing.T) {
	const b, seqLen = 2, 5
	cfg := StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}
	rng := newRand(45)
	s := newScope(t, tensor.Float32, 9)
	ids, err := graph.NewIDs(s.Graph(), b, seqLen, cfg.Vocab, "ids")
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, pad := paddingMask(t, s, []int{5, 4}, seqLen, seqLen, "pad")
	logits, weights, err := d.Forward(ids, pad)
	if err != nil {
		t.Fatal(err)
	}
	params := d.Params()
	perturb(t, params, rng)
	idv := randomIDs(rng, b*seqLen, cfg.Vocab)
	allow, err := graph.KeyPadding([]int{5, 4}, seqLen, seqLen)
	if err != nil {
		t.Fatal(err)
	}

	// Scale wq and wk of every block so that the largest |score| is ~1e3,
	// then the head so that the largest |logit| is ~1e3, as measured by the
	// reference.
	r := ref{t, readParams(t, params)}
	_, atts := r.stack("", cfg, true, idv, b, seqLen, allow.At)
	for l, a := range atts {
		f := math.Sqrt(1000 / a.MaxScore)
		for _, w := range []string{"wq", "wk"} {
			scaleParam(t, params, fmt.Sprintf("blocks.%d.attn.%s", l, w), f)
		}
	}
	r = ref{t, readParams(t, params)}
	want, atts := r.stack("", cfg, true, idv, b, seqLen, allow.At)
	var maxLogit float64
	for _, v := range want {
		maxLogit = math.Max(maxLogit, math.Abs(v))
	}
	scaleParam(t, params, "head.w", 1000/maxLogit)
	scaleParam(t, params, "head.b", 1000/maxLogit)
	r = ref{t, readParams(t, params)}
	want, atts = r.stack("", cfg, true, idv, b, seqLen, allow.At)
	maxLogit = 0
	for _, v := range want {
		maxLogit = math.Max(maxLogit, math.Abs(v))
	}
	for l, a := range atts {
		if a.MaxScore < 300 {
			t.Fatalf("block %d: largest |score| %v, the scaling did not reach 1e3", l, a.MaxScore)
		}
	}
	if maxLogit < 300 {
		t.Fatalf("largest |logit| %v, the scaling did not reach 1e3", maxLogit)
	}

	tg, err := graph.NewTargets(s.Graph(), tensor.Float32, b*seqLen, cfg.Vocab, "targets")
	if err != nil {
		t.Fatal(err)
	}
	cost, err := graph.CrossEntropy(logits, tg)
	if err != nil {
		t.Fatal(err)
	}
	grads, err := G.Grad(cost, graph.Nodes(params)...)
	if err != nil {
		t.Fatal(err)
	}
	nodes := append([]*G.Node{logits, cost}, weights...)
	got := evalOnce(t, func() error {
		if err := ids.Set(idv); err != nil {
			return err
		}
		targets := randomIDs(rng, b*seqLen, cfg.Vocab)
		return tg.Set(targets, []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 0})
	}, append(nodes, grads...)...)
	for i, v := range got {
		if !allFinite(v) {
			t.Errorf("value %d (logits, loss, weights, gradients) is not finite: %v", i, v)
		}
	}
	if diff := maxAbsDiff(got[0], want); !(diff <= 1e-3*maxLogit) {
		t.Errorf("float32 logits differ from the float64 reference by %.3g (largest |logit| %.0f)", diff, maxLogit)
	} else {
		t.Logf("largest |score| %.0f, |logit| %.0f; float32 vs float64 reference: max diff %.3g", atts[0].MaxScore, maxLogit, diff)
	}
}

// TestSeeding: the same seed gives the same parameters bit for bit, with the
// same names in the same order; another seed gives different random
// parameters; float32 holds the float64 values rounded; and models of both
// dtypes build and run to finite logits that agree.
func TestSeeding(t *testing.T) {
	const b, seqLen = 2, 4
	cfg := StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true, Activation: ActivationGELU}}
	build := func(dt tensor.Dtype, seed uint64) model {
		return buildModel(t, dt, seed, true, cfg, b, seqLen, nil)
	}
	names := func(ps []graph.Param) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	a, a2, other := build(tensor.Float64, 42), build(tensor.Float64, 42), build(tensor.Float64, 43)
	f32 := build(tensor.Float32, 42)

	// The names are the documented hierarchy, written out by hand.
	var wantNames []string
	wantNames = append(wantNames, "tok_emb.table", "pos_emb.table")
	for _, l := range []string{"0", "1"} {
		p := "blocks." + l + "."
		wantNames = append(wantNames, p+"ln1.gain", p+"ln1.bias",
			p+"attn.wq", p+"attn.bq", p+"attn.wk", p+"attn.bk", p+"attn.wv", p+"attn.bv", p+"attn.wo", p+"attn.bo",
			p+"ln2.gain", p+"ln2.bias", p+"ff.w1", p+"ff.b1", p+"ff.w2", p+"ff.b2")
	}
	wantNames = append(wantNames, "ln_f.gain", "ln_f.bias", "head.w", "head.b")
	for _, m := range []model{a, a2, other, f32} {
		if got := names(m.params); !slices.Equal(got, wantNames) {
			t.Fatalf("parameter names\n got %v\nwant %v", got, wantNames)
		}
	}

	pa, pa2, po, p32 := readParams(t, a.params), readParams(t, a2.params), readParams(t, other.params), readParams(t, f32.params)
	for _, n := range wantNames {
		if !bitsEqual(pa[n], pa2[n]) {
			t.Errorf("%s: two models of seed 42 differ", n)
		}
		if !bitsEqual(p32[n], roundTo(tensor.Float32, pa[n])) {
			t.Errorf("%s: the float32 model of seed 42 is not the float64 one rounded", n)
		}
		// LayerNorm gains and biases start at 1 and 0, and biases at 0,
		// whatever the seed; every random initialisation must differ.
		random := !slices.Contains([]string{"gain", "bias", "bq", "bk", "bv", "bo", "b1", "b2", "b"}, n[lastDot(n)+1:])
		if random && bitsEqual(pa[n], po[n]) {
			t.Errorf("%s: seeds 42 and 43 give the same values", n)
		}
		if !random && !bitsEqual(pa[n], po[n]) {
			t.Errorf("%s: a constant initialisation depends on the seed", n)
		}
	}

	// Both dtypes run, to finite logits that agree to float32 precision.
	idv := randomIDs(newRand(46), b*seqLen, cfg.Vocab)
	var logits [2][]float64
	for i, m := range []model{a, f32} {
		logits[i] = evalOnce(t, func() error { return m.ids.Set(idv) }, m.out)[0]
		if !allFinite(logits[i]) || len(logits[i]) != b*seqLen*cfg.Vocab {
			t.Fatalf("model %d: logits %v", i, logits[i])
		}
	}
	if d := maxAbsDiff(logits[0], logits[1]); d > 1e-4 {
		t.Errorf("float32 and float64 models of one seed differ by %.3g in logits", d)
	}
}

func lastDot(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}
