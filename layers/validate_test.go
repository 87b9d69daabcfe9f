package layers

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	"gorgonia.org/tensor"
)

// validStack is a small configuration every test below varies one field of.
var validStack = StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 1, Hidden: 16}

func withStack(f func(*StackConfig)) StackConfig { c := validStack; f(&c); return c }

// TestStackValidateMatchesConstructors: StackConfig.Validate refuses what
// NewDecoder refuses, with the same message, and accepts what it accepts, so
// that a caller can validate a configuration instead of building a model.
func TestStackValidateMatchesConstructors(t *testing.T) {
	huge := 1 << 33
	for _, tc := range []struct {
		name string
		cfg  StackConfig
		want []string // substrings of the error; nil for a valid configuration
	}{
		{"valid", validStack, nil},
		{"valid post-LN sinusoidal GELU", withStack(func(c *StackConfig) {
			c.PostLN, c.Positions, c.Activation, c.Bias, c.Dropout, c.AttnDropout = true, PositionsSinusoidal, ActivationGELU, true, 0.1, 0.2
		}), nil},
		{"zero layers", withStack(func(c *StackConfig) { c.Layers = 0 }), []string{"Layers", "got 0"}},
		{"zero vocab", withStack(func(c *StackConfig) { c.Vocab = 0 }), []string{"Vocab", "got 0"}},
		{"negative max len", withStack(func(c *StackConfig) { c.MaxLen = -5 }), []string{"MaxLen", "-5"}},
		{"zero dim", withStack(func(c *StackConfig) { c.Dim = 0 }), []string{`"tok_emb"`, "Dim", "got 0"}},
		{"D%H", withStack(func(c *StackConfig) { c.Heads = 3 }), []string{`"blocks.0.attn"`, "Dim 8", "Heads 3"}},
		{"zero heads", withStack(func(c *StackConfig) { c.Heads = 0 }), []string{`"blocks.0.attn"`, "Heads", "got 0"}},
		{"zero hidden", withStack(func(c *StackConfig) { c.Hidden = 0 }), []string{`"blocks.0.ff"`, "Hidden", "got 0"}},
		{"dropout 1", withStack(func(c *StackConfig) { c.Dropout = 1 }), []string{"Dropout 1"}},
		{"dropout NaN", withStack(func(c *StackConfig) { c.Dropout = nan() }), []string{"Dropout NaN"}},
		{"attention dropout NaN", withStack(func(c *StackConfig) { c.AttnDropout = nan() }), []string{`"blocks.0.attn"`, "Dropout NaN"}},
		{"positions", withStack(func(c *StackConfig) { c.Positions = "rotary" }), []string{`"pos_emb"`, `"rotary"`}},
		{"activation", withStack(func(c *StackConfig) { c.Activation = "silu" }), []string{`"blocks.0.ff"`, `"silu"`}},
		{"vocab*dim overflows", withStack(func(c *StackConfig) { c.Vocab, c.Dim, c.Heads = huge, huge, 1 }), []string{`"tok_emb"`, "overflows int"}},
		{"dim over the cap", withStack(func(c *StackConfig) { c.Dim, c.Heads, c.Vocab = 3037000499, 1, 1 }), []string{`"tok_emb"`, "(1, 3037000499)", "exceed graph.MaxElements"}},
		{"hidden over the cap", withStack(func(c *StackConfig) { c.Hidden = 1 << 29 }), []string{`"blocks.0.ff"`, "exceed graph.MaxElements"}},
		{"max len over the cap", withStack(func(c *StackConfig) { c.MaxLen = 1 << 30 }), []string{`"pos_emb"`, "exceed graph.MaxElements"}},
		{"sinusoidal max len over the cap", withStack(func(c *StackConfig) { c.MaxLen, c.Positions = 1<<30, PositionsSinusoidal }), []string{`"pos_emb"`, "exceed graph.MaxElements"}},
		{"layers beyond the parameter cap", withStack(func(c *StackConfig) { c.Layers = 1 << 40 }), []string{"1099511627776 layers", "MaxElements"}},
		{"total beyond the parameter cap", withStack(func(c *StackConfig) { c.Vocab, c.MaxLen, c.Dim = 1<<26, 1<<26, 16 }), []string{"MaxElements", "parameters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verr := noPanic(t, "Validate", tc.cfg.Validate)
			if tc.want == nil {
				if verr != nil {
					t.Fatalf("Validate: %v", verr)
				}
				if _, err := NewDecoder(newScope(t, tensor.Float64, 1), tc.cfg); err != nil {
					t.Fatalf("Validate accepted what NewDecoder refuses: %v", err)
				}
				return
			}
			if verr == nil {
				t.Fatal("Validate: no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(verr.Error(), w) {
					t.Errorf("Validate: error %q does not contain %q", verr, w)
				}
			}
			// The constructors refuse it too, with the same reason, before
			// allocating anything (these sizes would not fit in memory).
			derr := noPanic(t, "NewDecoder", func() error { _, err := NewDecoder(newScope(t, tensor.Float64, 1), tc.cfg); return err })
			if derr == nil {
				t.Fatal("NewDecoder: no error")
			}
			if strings.Replace(verr.Error(), "layers: model:", "layers: decoder:", 1) != derr.Error() {
				t.Errorf("Validate and NewDecoder disagree:\n%v\n%v", verr, derr)
			}
			if eerr := noPanic(t, "NewEncoder", func() error { _, err := NewEncoder(newScope(t, tensor.Float64, 1), tc.cfg); return err }); eerr == nil {
				t.Error("NewEncoder: no error")
			}
		})
	}
}

// TestValidateAllocatesNothing: validating a configuration whose model would
// hold a billion parameters must not build any of it.
func TestValidateAllocatesNothing(t *testing.T) {
	cfg := withStack(func(c *StackConfig) { c.Vocab, c.Dim, c.Heads, c.Hidden = 1<<19, 1<<10, 8, 1<<10 })
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 100; i++ {
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Errorf("100 Validate calls allocated %d bytes", d)
	}
}

// TestConfigValidate: each Config's Validate refuses what its constructor
// refuses, and says which field is wrong.
func TestConfigValidate(t *testing.T) {
	checkErrCases(t, []errCase{
		{"linear/zero in", func(*testing.T) error { return LinearConfig{Out: 3}.Validate() }, []string{"layers: linear:", "In", "got 0"}},
		{"linear/overflow", func(*testing.T) error { return LinearConfig{In: 1 << 33, Out: 1 << 33}.Validate() }, []string{"linear", "(8589934592, 8589934592)", "overflows int"}},
		{"embedding/cap", func(*testing.T) error { return EmbeddingConfig{Vocab: 1 << 20, Dim: 1 << 12}.Validate() }, []string{"embedding", "exceed graph.MaxElements"}},
		{"layernorm/NaN eps", func(*testing.T) error { return LayerNormConfig{Dim: 4, Eps: nan()}.Validate() }, []string{"layernorm", "Eps", "NaN"}},
		{"layernorm/Inf eps", func(*testing.T) error { return LayerNormConfig{Dim: 4, Eps: inf()}.Validate() }, []string{"layernorm", "Eps", "+Inf"}},
		{"feedforward/activation", func(*testing.T) error { return FeedForwardConfig{Dim: 4, Hidden: 4, Activation: "swish"}.Validate() }, []string{"feed-forward", `"swish"`}},
		{"feedforward/cap", func(*testing.T) error { return FeedForwardConfig{Dim: 1 << 16, Hidden: 1 << 16}.Validate() }, []string{"feed-forward", "w1", "exceed"}},
		{"attention/D%H", func(*testing.T) error { return AttentionConfig{Dim: 10, Heads: 4}.Validate() }, []string{"attention", "Dim 10", "Heads 4"}},
		{"attention/NaN dropout", func(*testing.T) error { return AttentionConfig{Dim: 8, Heads: 2, Dropout: nan()}.Validate() }, []string{"attention", "Dropout NaN"}},
		{"attention/key dim cap", func(*testing.T) error { return AttentionConfig{Dim: 8, Heads: 2, KeyDim: 1 << 30}.Validate() }, []string{"attention", "wk", "exceed"}},
		{"attention/dim squared over the cap", func(*testing.T) error { return AttentionConfig{Dim: 3037000499, Heads: 1}.Validate() }, []string{"attention", "wq", "9223372030926249001 elements exceed"}},
		{"attention/dim overflow", func(*testing.T) error { return AttentionConfig{Dim: 1 << 32, Heads: 1}.Validate() }, []string{"attention", "wq", "overflows int"}},
		{"block/NaN dropout", func(*testing.T) error {
			return BlockConfig{Dim: 8, Heads: 2, Hidden: 8, BlockOptions: BlockOptions{Dropout: nan()}}.Validate()
		}, []string{"block", "Dropout NaN"}},
		{"block/attention", func(*testing.T) error { return BlockConfig{Dim: 8, Heads: 3, Hidden: 8}.Validate() }, []string{`"attn"`, "Heads 3"}},
		{"block/ff", func(*testing.T) error { return BlockConfig{Dim: 8, Heads: 2}.Validate() }, []string{`"ff"`, "Hidden"}},
	})
	for _, ok := range []interface{ Validate() error }{
		LinearConfig{In: 3, Out: 4}, EmbeddingConfig{Vocab: 3, Dim: 4}, LayerNormConfig{Dim: 4}, FeedForwardConfig{Dim: 4, Hidden: 8},
		AttentionConfig{Dim: 8, Heads: 2, KeyDim: 3}, BlockConfig{Dim: 8, Heads: 2, Hidden: 8}, validStack,
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%T %+v: %v", ok, ok, err)
		}
	}
	// The cap is the one graph exports.
	if err := graph.CheckElements(graph.MaxElements); err != nil {
		t.Errorf("CheckElements(MaxElements): %v", err)
	}
}

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }

// TestFieldErrorKeys: every refusal of a model configuration names the
// config.json key at fault and the keys its problem involves, whichever
// layer finds it, so that a program holding the configuration can point at
// it without checking the value again.
func TestFieldErrorKeys(t *testing.T) {
	base := StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 1, Hidden: 16}
	for _, c := range []struct {
		name  string
		edit  func(*StackConfig)
		field string
		with  []string
	}{
		{"vocab", func(c *StackConfig) { c.Vocab = 0 }, "vocab", nil},
		{"max_len", func(c *StackConfig) { c.MaxLen = 0 }, "max_len", nil},
		{"layers", func(c *StackConfig) { c.Layers = 0 }, "layers", nil},
		{"dim", func(c *StackConfig) { c.Dim = 0 }, "dim", nil},
		{"hidden", func(c *StackConfig) { c.Hidden = 0 }, "hidden", nil},
		{"heads", func(c *StackConfig) { c.Heads = 3 }, "heads", []string{"dim"}},
		{"dropout", func(c *StackConfig) { c.Dropout = math.NaN() }, "dropout", nil},
		{"attn_dropout", func(c *StackConfig) { c.AttnDropout = 1 }, "attn_dropout", nil},
		{"activation", func(c *StackConfig) { c.Activation = "swish" }, "activation", nil},
		{"positions", func(c *StackConfig) { c.Positions = "rotary" }, "positions", nil},
		{"rope odd dk", func(c *StackConfig) { c.Positions, c.Dim = PositionsRoPE, 6 }, "positions", []string{"dim", "heads"}},
		{"rope_base", func(c *StackConfig) { c.RoPEBase = 500 }, "rope_base", []string{"positions"}},
		{"attention", func(c *StackConfig) { c.Attention = "sparse" }, "attention", nil},
		{"flash dropout", func(c *StackConfig) { c.Attention, c.AttnDropout = AttentionFlash, 0.1 }, "attn_dropout", []string{"attention"}},
		{"attn_scale", func(c *StackConfig) { c.AttnScale = "sqrt" }, "attn_scale", nil},
		{"kv_heads", func(c *StackConfig) { c.KVHeads = 3 }, "kv_heads", []string{"heads"}},
		{"softcap", func(c *StackConfig) { c.Softcap = -1 }, "softcap", nil},
		{"window", func(c *StackConfig) { c.Window = -1 }, "window", nil},
		{"init", func(c *StackConfig) { c.Init = "xavier" }, "init", nil},
		{"too many layers", func(c *StackConfig) { c.Dim, c.Hidden, c.Layers = 1<<14, 1<<14, 1<<10 }, "layers", []string{"dim", "hidden"}},
	} {
		cfg := base
		c.edit(&cfg)
		err := cfg.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v: want a *FieldError matching ErrConfig", c.name, err)
			continue
		}
		if fe.Field != c.field || !slices.Equal(fe.With, c.with) {
			t.Errorf("%s: field %q with %q, want %q with %q (%v)", c.name, fe.Field, fe.With, c.field, c.with, err)
		}
	}
	// An encoder–decoder names its own keys for what its halves find.
	ed := EncDecConfig{SrcVocab: 7, SrcMaxLen: 5, TgtVocab: 6, TgtMaxLen: 5, Dim: 8, Heads: 2, Hidden: 16, EncLayers: 1, DecLayers: 1}
	for _, c := range []struct {
		edit  func(*EncDecConfig)
		field string
	}{
		{func(c *EncDecConfig) { c.SrcVocab = 0 }, "src_vocab"},
		{func(c *EncDecConfig) { c.TgtVocab = 1 << 30 }, "tgt_vocab"},
		{func(c *EncDecConfig) { c.SrcMaxLen = 1 << 30 }, "src_max_len"},
	} {
		cfg := ed
		c.edit(&cfg)
		var fe *FieldError
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%v: want a *FieldError on %q", err, c.field)
		}
	}
}
