package layers

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
)

// Bad configurations and bad inputs must come back as errors, never panics,
// and the message must name the layer (its scope) and the offending value or
// shape, so that a user can find the mistake in a model of many layers.

type errCase struct {
	name string
	// run returns the error of the call under test.
	run func(t *testing.T) error
	// want are substrings the error message must contain.
	want []string
}

func checkErrCases(t *testing.T, cases []errCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := noPanic(t, tc.name, func() error { return tc.run(t) })
			graphtest.WantErr(t, err, tc.want...)
		})
	}
}

// sub returns the scope blocks.0.<name> of a fresh float64 graph.
func sub(t *testing.T, name string) *Scope {
	return newScope(t, tensor.Float64, 1).Sub("blocks").Sub("0").Sub(name)
}

func TestConstructorErrors(t *testing.T) {
	mha := func(cfg AttentionConfig) func(t *testing.T) error {
		return func(t *testing.T) error { _, err := NewMultiHeadAttention(sub(t, "attn"), cfg); return err }
	}
	block := func(cfg BlockConfig) func(t *testing.T) error {
		return func(t *testing.T) error {
			_, err := NewBlock(newScope(t, tensor.Float64, 1).Sub("blocks").Sub("0"), cfg)
			return err
		}
	}
	decoder := func(cfg StackConfig) func(t *testing.T) error {
		return func(t *testing.T) error { _, err := NewDecoder(newScope(t, tensor.Float64, 1), cfg); return err }
	}
	encoder := func(cfg StackConfig) func(t *testing.T) error {
		return func(t *testing.T) error { _, err := NewEncoder(newScope(t, tensor.Float64, 1), cfg); return err }
	}
	ok := StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 1, Hidden: 16}
	with := func(f func(*StackConfig)) StackConfig { c := ok; f(&c); return c }

	checkErrCases(t, []errCase{
		{"attention/D%H", mha(AttentionConfig{Dim: 10, Heads: 4}), []string{`"blocks.0.attn"`, "Dim 10", "Heads 4"}},
		{"attention/zero heads", mha(AttentionConfig{Dim: 8, Heads: 0}), []string{`"blocks.0.attn"`, "Heads", "got 0"}},
		{"attention/negative dim", mha(AttentionConfig{Dim: -8, Heads: 2}), []string{`"blocks.0.attn"`, "Dim", "-8"}},
		{"attention/negative key dim", mha(AttentionConfig{Dim: 8, Heads: 2, KeyDim: -1}), []string{`"blocks.0.attn"`, "KeyDim", "-1"}},
		{"attention/negative value dim", mha(AttentionConfig{Dim: 8, Heads: 2, ValueDim: -3}), []string{`"blocks.0.attn"`, "ValueDim", "-3"}},
		{"attention/dropout 1", mha(AttentionConfig{Dim: 8, Heads: 2, Dropout: 1}), []string{`"blocks.0.attn"`, "Dropout 1"}},
		{"attention/dropout negative", mha(AttentionConfig{Dim: 8, Heads: 2, Dropout: -0.1}), []string{`"blocks.0.attn"`, "Dropout -0.1"}},
		{"attention/KVHeads not dividing", mha(AttentionConfig{Dim: 8, Heads: 4, AttentionVariants: AttentionVariants{KVHeads: 3}}), []string{`"blocks.0.attn"`, "KVHeads 3 does not divide Heads 4"}},
		{"attention/KVHeads above Heads", mha(AttentionConfig{Dim: 8, Heads: 2, AttentionVariants: AttentionVariants{KVHeads: 4}}), []string{`"blocks.0.attn"`, "KVHeads 4"}},
		{"attention/softcap NaN", mha(AttentionConfig{Dim: 8, Heads: 2, AttentionVariants: AttentionVariants{Softcap: math.NaN()}}), []string{`"blocks.0.attn"`, "Softcap NaN"}},
		{"attention/window negative", mha(AttentionConfig{Dim: 8, Heads: 2, AttentionVariants: AttentionVariants{Window: -2}}), []string{`"blocks.0.attn"`, "Window -2"}},
		{"attention/RoPE odd dk", mha(AttentionConfig{Dim: 6, Heads: 2, Positions: PositionsRoPE}), []string{`"blocks.0.attn"`, "RoPE needs an even head dimension", "dk = Dim/Heads = 6/2 = 3"}},
		{"attention/RoPE base without RoPE", mha(AttentionConfig{Dim: 8, Heads: 2, Positions: PositionsALiBi, AttentionVariants: AttentionVariants{RoPEBase: 500}}), []string{`"blocks.0.attn"`, "RoPEBase 500 needs RoPE positions"}},
		{"attention/unknown positions", mha(AttentionConfig{Dim: 8, Heads: 2, Positions: "rotary"}), []string{`"blocks.0.attn"`, `unknown Positions "rotary"`}},
		{"attention/step of RoPE without positions", func(t *testing.T) error {
			s := sub(t, "attn")
			a, err := NewMultiHeadAttention(s, AttentionConfig{Dim: 4, Heads: 2, Positions: PositionsRoPE})
			if err != nil {
				return err
			}
			x := valueNode(s.Graph(), tensor.Float64, tensor.Shape{1, 1, 4}, make([]float64, 4), "x")
			cache := valueNode(s.Graph(), tensor.Float64, tensor.Shape{1, 3, 4}, make([]float64, 12), "cache")
			slot := valueNode(s.Graph(), tensor.Float64, tensor.Shape{1, 3, 1}, []float64{1, 0, 0}, "slot")
			m, err := graph.KeyPadding([]int{1}, 1, 3)
			if err != nil {
				return err
			}
			_, _, _, err = a.Step(x, nil, cache, cache, slot, maskInput(t, s, m, "seen"))
			return err
		}, []string{`"blocks.0.attn"`, "step: positions (rope, window 0)", "nil"}},
		{"linear/zero in", func(t *testing.T) error { _, err := NewLinear(sub(t, "proj"), LinearConfig{In: 0, Out: 3}); return err }, []string{`"blocks.0.proj"`, "In", "got 0"}},
		{"linear/negative out", func(t *testing.T) error {
			_, err := NewLinear(sub(t, "proj"), LinearConfig{In: 3, Out: -2})
			return err
		}, []string{`"blocks.0.proj"`, "Out", "-2"}},
		{"embedding/zero vocab", func(t *testing.T) error {
			_, err := NewEmbedding(sub(t, "emb"), EmbeddingConfig{Vocab: 0, Dim: 8})
			return err
		}, []string{`"blocks.0.emb"`, "Vocab", "got 0"}},
		{"embedding/negative dim", func(t *testing.T) error {
			_, err := NewEmbedding(sub(t, "emb"), EmbeddingConfig{Vocab: 5, Dim: -1})
			return err
		}, []string{`"blocks.0.emb"`, "Dim", "-1"}},
		{"layernorm/zero dim", func(t *testing.T) error { _, err := NewLayerNorm(sub(t, "ln1"), LayerNormConfig{}); return err }, []string{`"blocks.0.ln1"`, "Dim", "got 0"}},
		{"layernorm/negative eps", func(t *testing.T) error {
			_, err := NewLayerNorm(sub(t, "ln1"), LayerNormConfig{Dim: 8, Eps: -1e-5})
			return err
		}, []string{`"blocks.0.ln1"`, "Eps", "-1e-05"}},
		{"feedforward/unknown activation", func(t *testing.T) error {
			_, err := NewFeedForward(sub(t, "ff"), FeedForwardConfig{Dim: 8, Hidden: 16, Activation: "swish"})
			return err
		}, []string{`"blocks.0.ff"`, `"swish"`}},
		{"feedforward/zero hidden", func(t *testing.T) error {
			_, err := NewFeedForward(sub(t, "ff"), FeedForwardConfig{Dim: 8})
			return err
		}, []string{`"blocks.0.ff"`, "Hidden", "got 0"}},
		{"positions/unknown kind", func(t *testing.T) error {
			_, err := NewPositions(sub(t, "pos"), PositionsConfig{Kind: "rotary", MaxLen: 5, Dim: 8})
			return err
		}, []string{`"blocks.0.pos"`, `"rotary"`}},
		{"positions/zero max len", func(t *testing.T) error {
			_, err := NewPositions(sub(t, "pos"), PositionsConfig{Kind: PositionsLearned, MaxLen: 0, Dim: 8})
			return err
		}, []string{`"blocks.0.pos"`, "MaxLen", "got 0"}},
		{"block/dropout", block(BlockConfig{Dim: 8, Heads: 2, Hidden: 16, BlockOptions: BlockOptions{Dropout: 1.5}}), []string{`"blocks.0"`, "Dropout 1.5"}},
		{"block/D%H", block(BlockConfig{Dim: 8, Heads: 3, Hidden: 16}), []string{`"blocks.0.attn"`, "Dim 8", "Heads 3"}},
		{"block/attention dropout", block(BlockConfig{Dim: 8, Heads: 2, Hidden: 16, BlockOptions: BlockOptions{AttnDropout: 1}}), []string{`"blocks.0.attn"`, "Dropout 1"}},
		{"block/activation", block(BlockConfig{Dim: 8, Heads: 2, Hidden: 16, BlockOptions: BlockOptions{Activation: "tanh"}}), []string{`"blocks.0.ff"`, `"tanh"`}},
		{"block/zero dim", block(BlockConfig{Dim: 0, Heads: 2, Hidden: 16}), []string{`"blocks.0.ln1"`, "Dim", "got 0"}},
		{"decoder/zero layers", decoder(with(func(c *StackConfig) { c.Layers = 0 })), []string{"decoder", "Layers", "got 0"}},
		{"decoder/zero vocab", decoder(with(func(c *StackConfig) { c.Vocab = 0 })), []string{"decoder", "Vocab", "got 0"}},
		{"decoder/negative max len", decoder(with(func(c *StackConfig) { c.MaxLen = -5 })), []string{"decoder", "MaxLen", "-5"}},
		{"decoder/D%H", decoder(with(func(c *StackConfig) { c.Heads = 3 })), []string{`"blocks.0.attn"`, "Dim 8", "Heads 3"}},
		{"decoder/zero hidden", decoder(with(func(c *StackConfig) { c.Hidden = 0 })), []string{`"blocks.0.ff"`, "Hidden", "got 0"}},
		{"decoder/dropout", decoder(with(func(c *StackConfig) { c.Dropout = 1 })), []string{"decoder", "Dropout 1"}},
		{"decoder/attention dropout", decoder(with(func(c *StackConfig) { c.AttnDropout = -0.5 })), []string{`"blocks.0.attn"`, "Dropout -0.5"}},
		{"decoder/positions", decoder(with(func(c *StackConfig) { c.Positions = "rotary" })), []string{`"pos_emb"`, `"rotary"`}},
		{"decoder/activation", decoder(with(func(c *StackConfig) { c.Activation = "silu" })), []string{`"blocks.0.ff"`, `"silu"`}},
		{"encoder/zero layers", encoder(with(func(c *StackConfig) { c.Layers = -1 })), []string{"encoder", "Layers", "-1"}},
		{"encoder/D%H", encoder(with(func(c *StackConfig) { c.Dim = 9 })), []string{`"blocks.0.attn"`, "Dim 9", "Heads 2"}},
		{"scope/int dtype", func(t *testing.T) error { _, err := NewScope(G.NewGraph(), tensor.Int, 1); return err }, []string{"dtype int", "float32 or float64"}},
		{"scope/complex dtype", func(t *testing.T) error { _, err := NewScope(G.NewGraph(), tensor.Complex128, 1); return err }, []string{"complex128"}},
	})
}

// node returns a placeholder of the given dtype and shape.
func node(s *Scope, dt tensor.Dtype, name string, shape ...int) *G.Node {
	return G.NewTensor(s.Graph(), dt, len(shape), G.WithShape(shape...), G.WithName(name))
}

func TestForwardErrors(t *testing.T) {
	f64, f32 := tensor.Float64, tensor.Float32
	// attn builds attention at blocks.0.attn and calls Forward with inputs of
	// the given shapes (a nil shape reuses the query node) and a mask of
	// maskShape (nil: no mask).
	attn := func(cfg AttentionConfig, q, k, v []int, maskShape []int, dts ...tensor.Dtype) func(t *testing.T) error {
		return func(t *testing.T) error {
			s := sub(t, "attn")
			a, err := NewMultiHeadAttention(s, cfg)
			if err != nil {
				t.Fatal(err)
			}
			dt := func(i int) tensor.Dtype {
				if i < len(dts) {
					return dts[i]
				}
				return f64
			}
			qn := node(s, dt(0), "q", q...)
			kn, vn := qn, qn
			if k != nil {
				kn = node(s, dt(1), "k", k...)
			}
			if v != nil {
				vn = node(s, dt(2), "v", v...)
			}
			var m *graph.MaskNode
			if maskShape != nil {
				if m, err = graph.NewMaskInput(s.Graph(), dt(3), maskShape[0], maskShape[1], maskShape[2], "mask"); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err = a.Forward(qn, kn, vn, m)
			return err
		}
	}
	self := AttentionConfig{Dim: 8, Heads: 2}
	cross := AttentionConfig{Dim: 8, Heads: 2, KeyDim: 6, ValueDim: 4}
	scope := `"blocks.0.attn"`

	// stack builds a decoder or encoder with MaxLen 5 and vocabulary 7 and
	// calls Forward with ids (B, S) over vocab and a padding mask of
	// maskShape.
	stack := func(decoder bool, b, seqLen, vocab int, maskShape []int, maskDT tensor.Dtype) func(t *testing.T) error {
		return func(t *testing.T) error {
			s := newScope(t, f64, 1)
			ids, err := graph.NewIDs(s.Graph(), b, seqLen, vocab, "ids")
			if err != nil {
				t.Fatal(err)
			}
			var m *graph.MaskNode
			if maskShape != nil {
				if m, err = graph.NewMaskInput(s.Graph(), maskDT, maskShape[0], maskShape[1], maskShape[2], "pad"); err != nil {
					t.Fatal(err)
				}
			}
			cfg := StackConfig{Vocab: 7, MaxLen: 5, Dim: 8, Heads: 2, Layers: 1, Hidden: 16}
			if decoder {
				d, err := NewDecoder(s, cfg)
				if err != nil {
					t.Fatal(err)
				}
				_, _, err = d.Forward(ids, m)
				return err
			}
			e, err := NewEncoder(s, cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = e.Forward(ids, m)
			return err
		}
	}

	checkErrCases(t, []errCase{
		{"attention/query width", attn(self, []int{2, 4, 9}, nil, nil, nil), []string{scope, "(2, 4, 9)"}},
		{"attention/query 2-D", attn(self, []int{8, 8}, nil, nil, nil), []string{scope, "(8, 8)"}},
		{"attention/query 4-D", attn(self, []int{2, 4, 1, 8}, nil, nil, nil), []string{scope, "(2, 4, 1, 8)"}},
		{"attention/key width", attn(cross, []int{2, 3, 8}, []int{2, 5, 8}, []int{2, 5, 4}, nil), []string{scope, "key shape (2, 5, 8)", "6"}},
		{"attention/value width", attn(cross, []int{2, 3, 8}, []int{2, 5, 6}, []int{2, 5, 6}, nil), []string{scope, "value shape (2, 5, 6)"}},
		{"attention/value length", attn(cross, []int{2, 3, 8}, []int{2, 5, 6}, []int{2, 4, 4}, nil), []string{scope, "value shape (2, 4, 4)"}},
		{"attention/key batch", attn(cross, []int{2, 3, 8}, []int{3, 5, 6}, []int{3, 5, 4}, nil), []string{scope, "key shape (3, 5, 6)"}},
		{"attention/value batch", attn(cross, []int{2, 3, 8}, []int{2, 5, 6}, []int{1, 5, 4}, nil), []string{scope, "value shape (1, 5, 4)"}},
		{"attention/mask Sk", attn(self, []int{2, 4, 8}, nil, nil, []int{2, 4, 5}), []string{scope, "(2, 4, 5)", "(2, 4, 4)"}},
		{"attention/mask batch", attn(cross, []int{2, 3, 8}, []int{2, 5, 6}, []int{2, 5, 4}, []int{1, 3, 5}), []string{scope, "(1, 3, 5)", "(2, 3, 5)"}},
		{"attention/query dtype", attn(self, []int{2, 4, 8}, nil, nil, nil, f32), []string{scope, "float32", "float64"}},
		{"attention/value dtype", attn(cross, []int{2, 3, 8}, []int{2, 5, 6}, []int{2, 5, 4}, nil, f64, f64, f32), []string{scope, `"v"`, "float32"}},
		{"attention/mask dtype", attn(self, []int{2, 4, 8}, nil, nil, []int{2, 4, 4}, f64, f64, f64, f32), []string{scope, "float32"}},
		{"attention/causal Sq != Sk", attn(AttentionConfig{Dim: 8, Heads: 2, KeyDim: 6, ValueDim: 4, Causal: true}, []int{2, 3, 8}, []int{2, 5, 6}, []int{2, 5, 4}, nil), []string{scope, "Sq=3", "Sk=5"}},
		{"linear/input width", func(t *testing.T) error {
			s := sub(t, "proj")
			l, err := NewLinear(s, LinearConfig{In: 5, Out: 3})
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.Forward(node(s, f64, "x", 2, 3, 6))
			return err
		}, []string{`"blocks.0.proj.w"`, "(2, 3, 6)", "5"}},
		{"linear/1-D input", func(t *testing.T) error {
			s := sub(t, "proj")
			l, err := NewLinear(s, LinearConfig{In: 5, Out: 3})
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.Forward(node(s, f64, "x", 5))
			return err
		}, []string{`"blocks.0.proj.w"`, "(5)"}},
		{"linear/dtype", func(t *testing.T) error {
			s := sub(t, "proj")
			l, err := NewLinear(s, LinearConfig{In: 5, Out: 3})
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.Forward(node(s, f32, "x", 2, 5))
			return err
		}, []string{`"blocks.0.proj.w"`, "float32"}},
		{"layernorm/width", func(t *testing.T) error {
			s := sub(t, "ln1")
			l, err := NewLayerNorm(s, LayerNormConfig{Dim: 8})
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.Forward(node(s, f64, "x", 2, 4, 7))
			return err
		}, []string{`"blocks.0.ln1`, "(2, 4, 7)"}},
		{"feedforward/width", func(t *testing.T) error {
			s := sub(t, "ff")
			f, err := NewFeedForward(s, FeedForwardConfig{Dim: 8, Hidden: 16})
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Forward(node(s, f64, "x", 2, 4, 6))
			return err
		}, []string{`"blocks.0.ff.w1"`, "(2, 4, 6)"}},
		{"positions/S > MaxLen", func(t *testing.T) error {
			s := sub(t, "pos")
			p, err := NewPositions(s, PositionsConfig{Kind: PositionsLearned, MaxLen: 5, Dim: 8})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Forward(node(s, f64, "x", 2, 6, 8))
			return err
		}, []string{`"blocks.0.pos"`, "(2, 6, 8)", "5"}},
		{"positions/sinusoidal width", func(t *testing.T) error {
			s := sub(t, "pos")
			p, err := NewPositions(s, PositionsConfig{Kind: PositionsSinusoidal, MaxLen: 5, Dim: 8})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Forward(node(s, f64, "x", 2, 4, 6))
			return err
		}, []string{`"blocks.0.pos"`, "(2, 4, 6)"}},
		{"block/input width", func(t *testing.T) error {
			s := newScope(t, f64, 1).Sub("blocks").Sub("0")
			b, err := NewBlock(s, BlockConfig{Dim: 8, Heads: 2, Hidden: 16, BlockOptions: BlockOptions{PostLN: true}})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = b.Forward(node(s, f64, "x", 2, 4, 6), nil)
			return err
		}, []string{scope, "(2, 4, 6)"}},
		{"decoder/S > MaxLen", stack(true, 2, 6, 7, nil, f64), []string{"decoder", "sequence length 6", "MaxLen 5"}},
		{"encoder/S > MaxLen", stack(false, 2, 6, 7, nil, f64), []string{"encoder", "sequence length 6", "MaxLen 5"}},
		{"decoder/ids vocabulary larger than the table", stack(true, 2, 4, 9, nil, f64), []string{`"tok_emb.table"`, "9", "7"}},
		{"decoder/padding mask shape", stack(true, 2, 4, 7, []int{2, 4, 5}, f64), []string{"decoder", "(2, 4, 5)", "(2, 4, 4)"}},
		{"decoder/padding mask batch", stack(true, 2, 4, 7, []int{3, 4, 4}, f64), []string{"decoder", "(3, 4, 4)"}},
		{"decoder/padding mask dtype", stack(true, 2, 4, 7, []int{2, 4, 4}, f32), []string{"decoder", "float32"}},
		{"encoder/padding mask shape", stack(false, 2, 4, 7, []int{2, 5, 4}, f64), []string{"encoder", "(2, 5, 4)", "(2, 4, 4)"}},
		{"encoder/padding mask dtype", stack(false, 2, 4, 7, []int{2, 4, 4}, f32), []string{"encoder", "float32"}},
	})
}

// TestInputErrors: the per-batch inputs reject bad values when they are set,
// before the engine (which would return a wrong row or panic in its own
// goroutine) sees them.
func TestInputErrors(t *testing.T) {
	g := G.NewGraph()
	ids, err := graph.NewIDs(g, 2, 3, 5, "ids")
	if err != nil {
		t.Fatal(err)
	}
	mask, err := graph.NewMaskInput(g, tensor.Float64, 2, 3, 3, "pad")
	if err != nil {
		t.Fatal(err)
	}
	checkErrCases(t, []errCase{
		{"ids/too large", func(*testing.T) error { return ids.Set([]int{0, 1, 2, 3, 4, 5}) }, []string{`"ids"`, "id 5", "(b=1, s=2)", "[0, 5)"}},
		{"ids/negative", func(*testing.T) error { return ids.Set([]int{0, -1, 2, 3, 4, 0}) }, []string{`"ids"`, "id -1", "(b=0, s=1)"}},
		{"ids/too few", func(*testing.T) error { return ids.Set([]int{0, 1, 2, 3, 4}) }, []string{`"ids"`, "got 5 ids", "2*3"}},
		{"ids/too many", func(*testing.T) error { return ids.Set(make([]int, 7)) }, []string{`"ids"`, "got 7 ids"}},
		{"mask/shape", func(t *testing.T) error {
			m, err := graph.KeyPadding([]int{3, 2}, 3, 4)
			if err != nil {
				t.Fatal(err)
			}
			return mask.Set(m)
		}, []string{`"pad`, "(2, 3, 4)", "(2, 3, 3)"}},
		{"mask/length", func(*testing.T) error { _, err := graph.KeyPadding([]int{3, 4}, 3, 3); return err }, []string{"length 4", "[0, 3]"}},
	})
}
