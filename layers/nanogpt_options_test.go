package layers

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Tests of the three options nanoGPT's bias=False model needs:
// TieEmbeddings, BiasFreeNorm and Init.

// numel is the number of values of params.
func numel(params []graph.Param) int {
	n := 0
	for _, p := range params {
		n += p.Node.Shape().TotalSize()
	}
	return n
}

// TestTiedDecoderParams: a tied decoder has no head.* parameter and no Head,
// a bias-free-norm one no LayerNorm bias; each holds exactly the values
// StackConfig's count says, which is the untied, biased count less
// Vocab·Dim + Vocab (head.w, head.b) and (2·Layers+1)·Dim (ln1, ln2 and
// ln_f biases).
func TestTiedDecoderParams(t *testing.T) {
	base := StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 3, Hidden: 16, BlockOptions: BlockOptions{Bias: true}}
	d0, err := NewDecoder(newScope(t, tensor.Float64, 1), base)
	if err != nil {
		t.Fatal(err)
	}
	full := numel(d0.Params())
	for _, tc := range []struct {
		name       string
		tie, nobia bool
		less       int
	}{
		{"tied", true, false, base.Vocab*base.Dim + base.Vocab},
		{"bias-free-norm", false, true, (2*base.Layers + 1) * base.Dim},
		{"both", true, true, base.Vocab*base.Dim + base.Vocab + (2*base.Layers+1)*base.Dim},
	} {
		cfg := base
		cfg.TieEmbeddings, cfg.BiasFreeNorm = tc.tie, tc.nobia
		d, err := NewDecoder(newScope(t, tensor.Float64, 1), cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ps := d.Params()
		for _, p := range ps {
			if tc.tie && strings.HasPrefix(p.Name, "head.") {
				t.Errorf("%s: parameter %q: a tied model has no head", tc.name, p.Name)
			}
			if tc.nobia && (strings.HasSuffix(p.Name, "ln1.bias") || strings.HasSuffix(p.Name, "ln2.bias") || p.Name == "ln_f.bias") {
				t.Errorf("%s: parameter %q: a bias-free norm has no bias", tc.name, p.Name)
			}
		}
		if (d.Head() == nil) != tc.tie {
			t.Errorf("%s: Head() = %v", tc.name, d.Head())
		}
		if got, want := numel(ps), full-tc.less; got != want {
			t.Errorf("%s: %d values, want %d = %d - %d", tc.name, got, want, full, tc.less)
		}
		count, err := cfg.validate(decoderKind, "")
		if err != nil || count != numel(ps) {
			t.Errorf("%s: validate counts %d (%v), the model holds %d", tc.name, count, err, numel(ps))
		}
		if tc.nobia && d.FinalNorm().Bias().Node != nil {
			t.Errorf("%s: ln_f.Bias() is a parameter", tc.name)
		}
	}
}

// TestTiedGradientIsLookupPlusHead: a tied decoder computes what an untied
// one computes whose head.w is tok_emb.tableᵀ and head.b 0, and the tied
// table's gradient is the untied table's plus the untied head.w's,
// transposed: the head's contribution is there, and counted once.
func TestTiedGradientIsLookupPlusHead(t *testing.T) {
	untied := StackConfig{Vocab: 6, MaxLen: 5, Dim: 8, Heads: 2, Layers: 1, Hidden: 16, BlockOptions: BlockOptions{Bias: true, BiasFreeNorm: true}}
	tied := untied
	tied.TieEmbeddings = true
	run := func(cfg StackConfig, values map[string][]float64) (float64, map[string][]float64, []graph.Param) {
		s := newScope(t, tensor.Float64, 3)
		d, err := NewDecoder(s, cfg)
		if err != nil {
			t.Fatal(err)
		}
		params := d.Params()
		if values == nil {
			perturb(t, params, newRand(9))
		} else {
			for _, p := range params {
				copy(p.Node.Value().Data().([]float64), values[p.Name])
			}
		}
		cost := decoderCost(t, s, d)
		grads, err := G.Grad(cost, graph.Nodes(params)...)
		if err != nil {
			t.Fatal(err)
		}
		vals := newRunner(t, append([]*G.Node{cost}, grads...)).run(t, nil)
		out := map[string][]float64{}
		for i, p := range params {
			out[p.Name] = vals[1+i]
		}
		return vals[0][0], out, params
	}
	// The untied model's head.w (D, V) is the table (V, D) transposed, its
	// head.b 0.
	_, _, ps := run(untied, nil)
	values := readParams(t, ps)
	table := values["tok_emb.table"]
	v, dim := untied.Vocab, untied.Dim
	for i := 0; i < v; i++ {
		for j := 0; j < dim; j++ {
			values["head.w"][j*v+i] = table[i*dim+j]
		}
	}
	clear(values["head.b"])
	costU, gradU, _ := run(untied, values)
	costT, gradT, _ := run(tied, values)
	if d := math.Abs(costU - costT); d > 1e-12 {
		t.Errorf("cost: tied %v, untied with head.w = tableᵀ %v (|diff| %.3g)", costT, costU, d)
	}
	want := append([]float64(nil), gradU["tok_emb.table"]...)
	var head float64 // norm of the head's part
	for i := 0; i < v; i++ {
		for j := 0; j < dim; j++ {
			g := gradU["head.w"][j*v+i]
			want[i*dim+j] += g
			head += g * g
		}
	}
	if math.Sqrt(head) < 0.1 {
		t.Fatalf("the head's gradient has norm %.3g: too small to tell", math.Sqrt(head))
	}
	d := checkClose(t, "tied tok_emb.table gradient vs lookup + head", gradT["tok_emb.table"], want, 1e-12)
	t.Logf("cost %.6f; head's part of the table gradient has norm %.3f; max |tied - (lookup + headᵀ)| = %.2g", costT, math.Sqrt(head), d)
}

// TestInitKinds: every parameter holds exactly what its kind's definition
// draws from the scope's random source, in creation order, redrawn here from
// the seed: InitDefault U(±1/sqrt(in)) weights and N(0, 1) tables (so the
// default is what it was before Init existed, bit for bit), InitGPT2
// N(0, 0.02²) weights and tables and N(0, (0.02/sqrt(2·Layers))²) for wo
// and w2; biases 0 and gains 1 either way.
func TestInitKinds(t *testing.T) {
	const seed = 11
	for _, tc := range []struct {
		kind InitKind
		tie  bool
	}{{InitDefault, false}, {InitGPT2, false}, {InitGPT2, true}} {
		cfg := StackConfig{
			Vocab:         9,
			MaxLen:        6,
			Dim:           8,
			Heads:         2,
			Layers:        3,
			Hidden:        12,
			Init:          tc.kind,
			TieEmbeddings: tc.tie,
			BlockOptions:  BlockOptions{Bias: true, AttentionVariants: AttentionVariants{Sinks: true, QKNorm: true}},
		}
		d, err := NewDecoder(newScope(t, tensor.Float64, seed), cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 0x716b76)) // as NewScope seeds it
		resid := 0.02 / math.Sqrt(2*float64(cfg.Layers))
		checked := 0
		for _, p := range d.Params() {
			got := p.Node.Value().Data().([]float64)
			shape := p.Node.Shape()
			var draw func() float64
			switch {
			case p.Role == graph.RoleGain:
				draw = func() float64 { return 1 }
			case p.Role == graph.RoleBias:
				draw = func() float64 { return 0 }
			case p.Role == graph.RoleEmbedding && tc.kind == InitGPT2:
				draw = func() float64 { return rng.NormFloat64() * 0.02 }
			case p.Role == graph.RoleEmbedding:
				draw = func() float64 { return rng.NormFloat64() }
			case tc.kind == InitGPT2 && (strings.HasSuffix(p.Name, ".wo") || strings.HasSuffix(p.Name, ".w2")):
				draw = func() float64 { return rng.NormFloat64() * resid }
			case tc.kind == InitGPT2:
				draw = func() float64 { return rng.NormFloat64() * 0.02 }
			default:
				bound := 1 / math.Sqrt(float64(shape[0]))
				draw = func() float64 { return (2*rng.Float64() - 1) * bound }
			}
			for i, g := range got {
				if w := draw(); g != w {
					t.Fatalf("init %q: %s[%d] = %v, want %v", tc.kind, p.Name, i, g, w)
				}
			}
			checked++
		}
		t.Logf("init %q (tied %v): %d parameters redrawn exactly", tc.kind, tc.tie, checked)
	}
}

// TestNanoGPTOptionErrors: an unknown Init and TieEmbeddings on a stack
// without a head are refused with ErrConfig, naming the field.
func TestNanoGPTOptionErrors(t *testing.T) {
	cfg := StackConfig{Vocab: 9, MaxLen: 6, Dim: 8, Heads: 2, Layers: 1, Hidden: 12, Init: "xavier"}
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `Init "xavier"`) || !strings.Contains(err.Error(), `"gpt2"`) {
		t.Errorf("unknown init: %v", err)
	}
	if _, err := NewDecoder(newScope(t, tensor.Float32, 1), cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Init") {
		t.Errorf("NewDecoder with an unknown init: %v", err)
	}
	cfg.Init, cfg.TieEmbeddings = "", true
	if _, err := NewEncoder(newScope(t, tensor.Float32, 1), cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "TieEmbeddings") {
		t.Errorf("a tied encoder: %v", err)
	}
	for _, s := range []string{"", "gpt2"} {
		if k, err := ParseInitKind(s); err != nil || string(k) != s {
			t.Errorf("ParseInitKind(%q) = %q, %v", s, k, err)
		}
	}
	if _, err := ParseInitKind("GPT2"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParseInitKind(GPT2): %v", err)
	}
	for _, c := range []any{LinearConfig{In: 2, Out: 2, Std: -1}, EmbeddingConfig{Vocab: 2, Dim: 2, Std: math.NaN()}, PositionsConfig{MaxLen: 2, Dim: 2, Std: math.Inf(1)},
		FeedForwardConfig{Dim: 2, Hidden: 2, Init: WeightInit{OutStd: -1}}, AttentionConfig{Dim: 2, Heads: 1, Init: WeightInit{Std: -1}}} {
		var err error
		switch c := c.(type) {
		case LinearConfig:
			err = c.Validate()
		case EmbeddingConfig:
			err = c.Validate()
		case PositionsConfig:
			err = c.Validate()
		case FeedForwardConfig:
			err = c.Validate()
		case AttentionConfig:
			err = c.Validate()
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Std") {
			t.Errorf("%T with a bad Std: %v", c, err)
		}
	}
}

// TestEncDecBiasFreeNormInit: an encoder–decoder takes BiasFreeNorm and
// Init to both halves: no LayerNorm bias anywhere, the count validate
// gives, and GPT-2's scale on the weights (every projection weight's
// entries within 6 standard deviations of 0.02, where U(±1/sqrt(8)) would
// reach 0.35).
func TestEncDecBiasFreeNormInit(t *testing.T) {
	cfg := EncDecConfig{
		SrcVocab:     7,
		SrcMaxLen:    5,
		TgtVocab:     6,
		TgtMaxLen:    4,
		Dim:          8,
		Heads:        2,
		Hidden:       16,
		EncLayers:    1,
		DecLayers:    2,
		Init:         InitGPT2,
		BlockOptions: BlockOptions{Bias: true, BiasFreeNorm: true},
	}
	m, err := NewEncoderDecoder(newScope(t, tensor.Float64, 2), cfg)
	if err != nil {
		t.Fatal(err)
	}
	count, err := cfg.validate("")
	if err != nil || count != numel(m.Params()) {
		t.Errorf("validate counts %d (%v), the model holds %d", count, err, numel(m.Params()))
	}
	for _, p := range m.Params() {
		if p.Role == graph.RoleBias && strings.Contains(p.Name, ".ln") {
			t.Errorf("parameter %q: a bias-free norm has no bias", p.Name)
		}
		if p.Role == graph.RoleWeight || p.Role == graph.RoleEmbedding {
			for _, v := range p.Node.Value().Data().([]float64) {
				if math.Abs(v) > 6*0.02 {
					t.Fatalf("%s holds %v: not GPT-2's N(0, 0.02²)", p.Name, v)
				}
			}
		}
	}
}
