package layers

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
)

// apiDecoder builds a float32 decoder of cfg in a fresh graph.
func apiDecoder(t *testing.T, cfg StackConfig) *Decoder {
	t.Helper()
	d, err := NewDecoder(newScope(t, tensor.Float32, 1), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// apiDefault is the model of `qkv train` (D=48, H=4, 2 layers, FF=192, GELU,
// learned positions, biases) for a vocabulary of 5.
var apiDefault = StackConfig{
	Vocab:        5,
	MaxLen:       11,
	Dim:          48,
	Heads:        4,
	Layers:       2,
	Hidden:       192,
	BlockOptions: BlockOptions{Activation: ActivationGELU, Positions: PositionsLearned, Bias: true},
}

// A built layer cannot change: Config returns a copy, and changing it (or the
// configuration the layer was built from) changes neither what Config
// returns next nor the graph Forward builds.
func TestConfigIsACopy(t *testing.T) {
	s := newScope(t, tensor.Float64, 1)
	cfg := AttentionConfig{Dim: 8, Heads: 2}
	a, err := NewMultiHeadAttention(s.Sub("attn"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Heads = 4
	c := a.Config()
	c.Heads, c.Causal = 8, true
	if got := a.Config(); got.Heads != 2 || got.Causal || got.KeyDim != 8 || got.ValueDim != 8 {
		t.Errorf("Config() = %+v after changing copies, want Heads 2, not causal, KeyDim = ValueDim = 8", got)
	}
	x := G.NewTensor(s.Graph(), tensor.Float64, 3, G.WithShape(1, 3, 8), G.WithName("x"))
	_, w, err := a.Forward(x, x, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (tensor.Shape{1, 2, 3, 3}); !w.Shape().Eq(want) {
		t.Errorf("weights %v, want %v: the layer read a changed configuration", w.Shape(), want)
	}

	d := apiDecoder(t, apiDefault)
	dc := d.Config()
	dc.Heads, dc.Layers = 1, 7
	if got := d.Config(); got != apiDefault {
		t.Errorf("Decoder.Config() = %+v, want %+v", got, apiDefault)
	}
	blocks := d.Blocks()
	blocks[0] = nil
	if d.Blocks()[0] == nil {
		t.Error("Blocks() returned the model's own slice")
	}
	e, err := NewEncoder(newScope(t, tensor.Float32, 1), StackConfig{Vocab: 5, MaxLen: 4, Dim: 8, Heads: 2, Layers: 1, Hidden: 16, BlockOptions: BlockOptions{PostLN: true}})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Config(); got.Positions != PositionsLearned || !got.PostLN || e.FinalNorm() != nil {
		t.Errorf("Encoder.Config() = %+v (FinalNorm %v), want learned positions filled in, post-LN, no final norm", got, e.FinalNorm())
	}

	// Every layer's Config reports what it was built with, defaults filled.
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"linear", d.Head().Config(), LinearConfig{In: 48, Out: 5, Bias: true, WeightName: "w", BiasName: "b"}},
		{"embedding", d.TokenEmbedding().Config(), EmbeddingConfig{Vocab: 5, Dim: 48}},
		{"positions", d.Positions().Config(), PositionsConfig{Kind: PositionsLearned, MaxLen: 11, Dim: 48}},
		{"layernorm", d.FinalNorm().Config(), LayerNormConfig{Dim: 48, Eps: 1e-5}},
		{"feed-forward", d.Blocks()[1].FeedForward().Config(), FeedForwardConfig{Dim: 48, Hidden: 192, Activation: ActivationGELU, Bias: true}},
		{"attention", d.Blocks()[1].Attention().Config(), AttentionConfig{Dim: 48, Heads: 4, KeyDim: 48, ValueDim: 48, Causal: true, Bias: true}},
		{"block", d.Blocks()[0].Config(), BlockConfig{Dim: 48, Heads: 4, Hidden: 192, Causal: true, BlockOptions: BlockOptions{Activation: ActivationGELU, Bias: true}}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: Config() = %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

// Every parameter is reachable by role through the getters, with the name
// and role Params lists it with, and the getters reach nothing else.
func TestGettersByRole(t *testing.T) {
	for _, bias := range []bool{true, false} {
		cfg := apiDefault
		cfg.Bias = bias
		d := apiDecoder(t, cfg)
		type want struct {
			p    graph.Param
			name string
			role graph.Role
		}
		ws := []want{
			{d.TokenEmbedding().Table(), "tok_emb.table", graph.RoleEmbedding},
			{d.Positions().Table(), "pos_emb.table", graph.RoleEmbedding},
		}
		for i, b := range d.Blocks() {
			pre := "blocks." + string(rune('0'+i)) + "."
			a, ff := b.Attention(), b.FeedForward()
			ws = append(ws,
				want{b.LN1().Gain(), pre + "ln1.gain", graph.RoleGain}, want{b.LN1().Bias(), pre + "ln1.bias", graph.RoleBias},
				want{a.WQ(), pre + "attn.wq", graph.RoleWeight}, want{a.WK(), pre + "attn.wk", graph.RoleWeight},
				want{a.WV(), pre + "attn.wv", graph.RoleWeight}, want{a.WO(), pre + "attn.wo", graph.RoleWeight},
				want{b.LN2().Gain(), pre + "ln2.gain", graph.RoleGain}, want{b.LN2().Bias(), pre + "ln2.bias", graph.RoleBias},
				want{ff.W1(), pre + "ff.w1", graph.RoleWeight}, want{ff.W2(), pre + "ff.w2", graph.RoleWeight})
			if bias {
				ws = append(ws,
					want{a.BQ(), pre + "attn.bq", graph.RoleBias}, want{a.BK(), pre + "attn.bk", graph.RoleBias},
					want{a.BV(), pre + "attn.bv", graph.RoleBias}, want{a.BO(), pre + "attn.bo", graph.RoleBias},
					want{ff.B1(), pre + "ff.b1", graph.RoleBias}, want{ff.B2(), pre + "ff.b2", graph.RoleBias})
			} else {
				for _, p := range []graph.Param{a.BQ(), a.BK(), a.BV(), a.BO(), ff.B1(), ff.B2()} {
					if p.Node != nil {
						t.Errorf("bias %q exists without Bias", p.Name)
					}
				}
			}
		}
		ws = append(ws,
			want{d.FinalNorm().Gain(), "ln_f.gain", graph.RoleGain}, want{d.FinalNorm().Bias(), "ln_f.bias", graph.RoleBias},
			want{d.Head().Weight(), "head.w", graph.RoleWeight}, want{d.Head().Bias(), "head.b", graph.RoleBias})

		byName := map[string]graph.Param{}
		for _, p := range d.Params() {
			byName[p.Name] = p
		}
		if len(ws) != len(byName) {
			t.Errorf("bias %v: the getters reach %d parameters, Params lists %d", bias, len(ws), len(byName))
		}
		for _, w := range ws {
			p, ok := byName[w.name]
			switch {
			case !ok:
				t.Errorf("bias %v: %q is not in Params", bias, w.name)
			case w.p.Name != w.name || w.p.Node != p.Node:
				t.Errorf("bias %v: getter for %q returned %q", bias, w.name, w.p.Name)
			case w.p.Role != w.role || p.Role != w.role:
				t.Errorf("bias %v: %q has role %v (in Params %v), want %v", bias, w.name, w.p.Role, p.Role, w.role)
			}
		}
	}
	// Fixed encodings have no table; nil layers return zero values.
	cfg := apiDefault
	cfg.Positions = PositionsSinusoidal
	if p := apiDecoder(t, cfg).Positions().Table(); p.Node != nil {
		t.Errorf("sinusoidal positions have a learned table %q", p.Name)
	}
	var a *MultiHeadAttention
	var d *Decoder
	var b *Block
	if a.WQ().Node != nil || a.BO().Node != nil || d.Head() != nil || d.Blocks() != nil || b.Attention() != nil || (*FeedForward)(nil).W1().Node != nil {
		t.Error("a getter of a nil layer returned something")
	}
}

func TestParseKinds(t *testing.T) {
	for _, s := range []string{"relu", "gelu"} {
		a, err := ParseActivation(s)
		if err != nil || a.String() != s {
			t.Errorf("ParseActivation(%q) = %q, %v", s, a, err)
		}
	}
	for _, s := range []string{"learned", "sinusoidal", "none"} {
		k, err := ParsePositionsKind(s)
		if err != nil || k.String() != s {
			t.Errorf("ParsePositionsKind(%q) = %q, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "swish", "GELU", "relu "} {
		if a, err := ParseActivation(s); err == nil || !errors.Is(err, ErrConfig) {
			t.Errorf("ParseActivation(%q) = %q, %v; want an error matching ErrConfig", s, a, err)
		}
		if k, err := ParsePositionsKind(s); err == nil || !errors.Is(err, ErrConfig) {
			t.Errorf("ParsePositionsKind(%q) = %q, %v; want an error matching ErrConfig", s, k, err)
		}
	}
	// The JSON form is the plain string, as before the types existed.
	b, err := json.Marshal(apiDefault)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"vocab":5,"max_len":11,"dim":48,"heads":4,"layers":2,"hidden":192,"activation":"gelu","positions":"learned","post_ln":false,"bias":true,"dropout":0,"attn_dropout":0}`
	if string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back StackConfig
	if err := json.Unmarshal([]byte(want), &back); err != nil || back != apiDefault {
		t.Errorf("Unmarshal = %+v, %v; want %+v", back, err, apiDefault)
	}
}

func TestPositionsConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg PositionsConfig
		ok  bool
	}{
		{PositionsConfig{MaxLen: 4, Dim: 8}, true}, // "" is learned
		{PositionsConfig{Kind: PositionsNone, MaxLen: 4, Dim: 8}, true},
		{PositionsConfig{Kind: PositionsSinusoidal, MaxLen: 4, Dim: 8}, true},
		{PositionsConfig{Kind: "rotary", MaxLen: 4, Dim: 8}, false},
		{PositionsConfig{Kind: PositionsLearned, MaxLen: 0, Dim: 8}, false},
		{PositionsConfig{Kind: PositionsNone, MaxLen: 4, Dim: -1}, false},
		{PositionsConfig{Kind: PositionsLearned, MaxLen: 1 << 30, Dim: 1 << 30}, false},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%+v.Validate() = %v, want ok %v (errors matching ErrConfig)", tc.cfg, err, tc.ok)
		}
		p, err2 := NewPositions(newScope(t, tensor.Float32, 1).Sub("pos"), tc.cfg)
		if (err2 == nil) != tc.ok {
			t.Errorf("NewPositions(%+v) = %v, want ok %v", tc.cfg, err2, tc.ok)
		}
		if tc.ok && tc.cfg.Kind == "" && (p.Config().Kind != PositionsLearned || p.Table().Node == nil) {
			t.Errorf("NewPositions with no kind: %+v, table %v; want a learned table", p.Config(), p.Table().Node)
		}
	}
}

// Errors match their sentinel through every wrapping, messages unchanged.
func TestSentinelErrors(t *testing.T) {
	s := newScope(t, tensor.Float64, 1)
	lin, err := NewLinear(s.Sub("lin"), LinearConfig{In: 4, Out: 3})
	if err != nil {
		t.Fatal(err)
	}
	wrong := G.NewTensor(s.Graph(), tensor.Float64, 3, G.WithShape(2, 3, 5), G.WithName("wrong"))
	attn, err := NewMultiHeadAttention(s.Sub("attn"), AttentionConfig{Dim: 4, Heads: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, linErr := lin.Forward(wrong)
	_, _, attnErr := attn.Forward(wrong, wrong, wrong, nil)
	_, cfgErr := NewDecoder(s.Sub("dec"), StackConfig{Vocab: 5, MaxLen: 4, Dim: 6, Heads: 4, Layers: 1, Hidden: 8})
	_, actErr := NewFeedForward(s.Sub("ff"), FeedForwardConfig{Dim: 4, Hidden: 8, Activation: "swish"})
	for _, tc := range []struct {
		name       string
		err        error
		is, isNot  error
		mentioning string
	}{
		{"linear input shape", linErr, ErrShape, ErrConfig, "input shape (2, 3, 5)"},
		{"attention query shape", attnErr, graph.ErrShape, ErrConfig, "query shape"},
		{"D % H", cfgErr, ErrConfig, ErrShape, "not divisible"},
		{"StackConfig.Validate", StackConfig{Vocab: -1}.Validate(), ErrConfig, ErrShape, "Vocab"},
		{"unknown activation", actErr, ErrConfig, ErrShape, `"swish"`},
	} {
		switch {
		case tc.err == nil:
			t.Errorf("%s: no error", tc.name)
		case !errors.Is(tc.err, tc.is) || errors.Is(tc.err, tc.isNot):
			t.Errorf("%s: %v: errors.Is %v = %v, %v = %v", tc.name, tc.err, tc.is, errors.Is(tc.err, tc.is), tc.isNot, errors.Is(tc.err, tc.isNot))
		case !strings.Contains(tc.err.Error(), tc.mentioning):
			t.Errorf("%s: %q does not mention %q", tc.name, tc.err, tc.mentioning)
		}
	}
}
