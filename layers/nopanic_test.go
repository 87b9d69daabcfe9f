package layers

import (
	"math"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Bad input never panics (issue 6): every constructor and Forward of layers,
// given a nil or zero-value scope, layer, node, ids or mask, or sizes whose
// element count overflows int or exceeds graph.MaxElements, returns an error
// naming the layer (its scope) or the input, and what was expected. The
// constructors refuse oversized configurations before allocating anything:
// these tests would otherwise ask for exabytes.

// forward2 and forward3 drop the node results of a Forward call.
func forward2(_ *G.Node, err error) error                  { return err }
func forward3(_, _ *G.Node, err error) error               { return err }
func forwardModel(_ *G.Node, _ []*G.Node, err error) error { return err }

// built holds one valid instance of every layer, to call Forward on with bad
// inputs, and valid inputs to pair with them.
type built struct {
	s      *Scope
	x      *G.Node // (2, 4, 8)
	ids    *graph.IDs
	lin    *Linear
	emb    *Embedding
	pos    *Positions
	ln     *LayerNorm
	ff     *FeedForward
	attn   *MultiHeadAttention
	block  *Block
	dec    *Decoder
	enc    *Encoder
	noBias *graph.MaskNode // a mask of the right sizes without its bias node
}

func buildAll(t *testing.T) built {
	t.Helper()
	var b built
	var err error
	must := func(e error) {
		t.Helper()
		if e != nil {
			t.Fatal(e)
		}
	}
	b.s = newScope(t, tensor.Float64, 1)
	b.x = node(b.s, tensor.Float64, "x", 2, 4, 8)
	b.ids, err = graph.NewIDs(b.s.Graph(), 2, 4, 7, "ids")
	must(err)
	b.lin, err = NewLinear(b.s.Sub("proj"), LinearConfig{In: 8, Out: 3})
	must(err)
	b.emb, err = NewEmbedding(b.s.Sub("emb"), EmbeddingConfig{Vocab: 7, Dim: 8})
	must(err)
	b.pos, err = NewPositions(b.s.Sub("pos"), PositionsConfig{Kind: PositionsSinusoidal, MaxLen: 5, Dim: 8})
	must(err)
	b.ln, err = NewLayerNorm(b.s.Sub("ln"), LayerNormConfig{Dim: 8})
	must(err)
	b.ff, err = NewFeedForward(b.s.Sub("ff"), FeedForwardConfig{Dim: 8, Hidden: 16})
	must(err)
	b.attn, err = NewMultiHeadAttention(b.s.Sub("attn"), AttentionConfig{Dim: 8, Heads: 2})
	must(err)
	b.block, err = NewBlock(b.s.Sub("blocks").Sub("0"), BlockConfig{Dim: 8, Heads: 2, Hidden: 16})
	must(err)
	b.dec, err = NewDecoder(b.s.Sub("dec"), validStack)
	must(err)
	b.enc, err = NewEncoder(b.s.Sub("enc"), validStack)
	must(err)
	b.noBias = &graph.MaskNode{B: 2, Sq: 4, Sk: 4}
	return b
}

func TestNoPanic(t *testing.T) {
	b := buildAll(t)
	x, s := b.x, b.s
	f64 := tensor.Float64
	var nilScope *Scope
	var zeroScope Scope
	zeroNode := &G.Node{}
	big := 1 << 33

	// scopeCases: every constructor given a nil and a zero-value scope.
	ctors := []struct {
		name string
		make func(*Scope) error
	}{
		{"NewLinear", func(s *Scope) error { _, err := NewLinear(s, LinearConfig{In: 2, Out: 3}); return err }},
		{"NewEmbedding", func(s *Scope) error { _, err := NewEmbedding(s, EmbeddingConfig{Vocab: 2, Dim: 3}); return err }},
		{"NewPositions", func(s *Scope) error {
			_, err := NewPositions(s, PositionsConfig{Kind: PositionsLearned, MaxLen: 2, Dim: 3})
			return err
		}},
		{"NewLayerNorm", func(s *Scope) error { _, err := NewLayerNorm(s, LayerNormConfig{Dim: 3}); return err }},
		{"NewFeedForward", func(s *Scope) error { _, err := NewFeedForward(s, FeedForwardConfig{Dim: 2, Hidden: 3}); return err }},
		{"NewMultiHeadAttention", func(s *Scope) error {
			_, err := NewMultiHeadAttention(s, AttentionConfig{Dim: 4, Heads: 2})
			return err
		}},
		{"NewBlock", func(s *Scope) error { _, err := NewBlock(s, BlockConfig{Dim: 4, Heads: 2, Hidden: 8}); return err }},
		{"NewDecoder", func(s *Scope) error { _, err := NewDecoder(s, validStack); return err }},
		{"NewEncoder", func(s *Scope) error { _, err := NewEncoder(s, validStack); return err }},
	}
	var cases []errCase
	for _, c := range ctors {
		c := c
		cases = append(cases,
			errCase{c.name + "/nil scope", func(*testing.T) error { return c.make(nilScope) }, []string{"scope is nil", "NewScope"}},
			errCase{c.name + "/nil scope's Sub", func(*testing.T) error { return c.make(nilScope.Sub("a").Sub("b")) }, []string{"scope is nil"}},
			errCase{c.name + "/zero-value scope", func(*testing.T) error { return c.make(zeroScope.Sub("x")) }, []string{"zero value", "NewScope"}},
		)
	}

	cases = append(cases, []errCase{
		{"NewScope/nil graph", func(*testing.T) error { _, err := NewScope(nil, f64, 1); return err }, []string{"scope", "graph is nil"}},

		// Forward with a nil input.
		{"Linear/nil input", func(*testing.T) error { return forward2(b.lin.Forward(nil)) }, []string{`linear "proj.w"`, "input is nil"}},
		{"Linear/zero-value input", func(*testing.T) error { return forward2(b.lin.Forward(zeroNode)) }, []string{`linear "proj.w"`, "zero-value node"}},
		{"Embedding/nil ids", func(*testing.T) error { return forward2(b.emb.Forward(nil)) }, []string{`embedding "emb.table"`, "ids are nil"}},
		{"Embedding/zero-value ids", func(*testing.T) error { return forward2(b.emb.Forward(&graph.IDs{})) }, []string{`embedding "emb.table"`, "zero value"}},
		{"Positions/nil input", func(*testing.T) error { return forward2(b.pos.Forward(nil)) }, []string{`positions "pos"`, "input is nil"}},
		{"LayerNorm/nil input", func(*testing.T) error { return forward2(b.ln.Forward(nil)) }, []string{`layernorm "ln.gain"`, "input is nil"}},
		{"FeedForward/nil input", func(*testing.T) error { return forward2(b.ff.Forward(nil)) }, []string{`linear "ff.w1"`, "input is nil"}},
		{"MultiHeadAttention/nil query", func(*testing.T) error { return forward3(b.attn.Forward(nil, x, x, nil)) }, []string{`attention "attn"`, "query is nil"}},
		{"MultiHeadAttention/nil key", func(*testing.T) error { return forward3(b.attn.Forward(x, nil, x, nil)) }, []string{`attention "attn"`, "key is nil"}},
		{"MultiHeadAttention/nil value", func(*testing.T) error { return forward3(b.attn.Forward(x, x, nil, nil)) }, []string{`attention "attn"`, "value is nil"}},
		{"MultiHeadAttention/zero-value key", func(*testing.T) error { return forward3(b.attn.Forward(x, zeroNode, x, nil)) }, []string{`attention "attn"`, "key is a zero-value node"}},
		{"MultiHeadAttention/mask without bias", func(*testing.T) error { return forward3(b.attn.Forward(x, x, x, b.noBias)) }, []string{`attention "attn"`, "bias is nil"}},
		{"Block/nil input", func(*testing.T) error { return forward3(b.block.Forward(nil, nil)) }, []string{`block "blocks.0"`, "input is nil"}},
		{"Block/mask without bias", func(*testing.T) error { return forward3(b.block.Forward(x, b.noBias)) }, []string{`attention "blocks.0.attn"`, "bias is nil"}},
		{"Decoder/nil ids", func(*testing.T) error { return forwardModel(b.dec.Forward(nil, nil)) }, []string{`decoder "dec"`, "ids are nil"}},
		{"Decoder/zero-value ids", func(*testing.T) error { return forwardModel(b.dec.Forward(&graph.IDs{}, nil)) }, []string{`decoder "dec"`, "zero value"}},
		{"Decoder/padding mask without bias", func(*testing.T) error { return forwardModel(b.dec.Forward(b.ids, b.noBias)) }, []string{`decoder "dec"`, "padding mask", "bias is nil"}},
		{"Encoder/nil ids", func(*testing.T) error { return forwardModel(b.enc.Forward(nil, nil)) }, []string{`encoder "enc"`, "ids are nil"}},
		{"Encoder/zero-value mask", func(*testing.T) error { return forwardModel(b.enc.Forward(b.ids, &graph.MaskNode{})) }, []string{`encoder "enc"`, "padding mask", "bias is nil"}},

		// Forward on a nil or zero-value layer.
		{"Linear/nil layer", func(*testing.T) error { var l *Linear; return forward2(l.Forward(x)) }, []string{"linear", "NewLinear"}},
		{"Linear/zero layer", func(*testing.T) error { return forward2((&Linear{}).Forward(x)) }, []string{"linear", "NewLinear"}},
		{"Embedding/nil layer", func(*testing.T) error { var e *Embedding; return forward2(e.Forward(b.ids)) }, []string{"embedding", "NewEmbedding"}},
		{"Embedding/zero layer", func(*testing.T) error { return forward2((&Embedding{}).Forward(b.ids)) }, []string{"embedding", "NewEmbedding"}},
		{"Positions/nil layer", func(*testing.T) error { var p *Positions; return forward2(p.Forward(x)) }, []string{"positions", "NewPositions"}},
		{"Positions/zero layer", func(*testing.T) error { return forward2((&Positions{}).Forward(x)) }, []string{"positions", "NewPositions"}},
		{"Positions/learned without a table", func(*testing.T) error {
			return forward2((&Positions{cfg: PositionsConfig{Kind: PositionsLearned, MaxLen: 5, Dim: 8}}).Forward(x))
		}, []string{"positions", "NewPositions"}},
		{"LayerNorm/nil layer", func(*testing.T) error { var l *LayerNorm; return forward2(l.Forward(x)) }, []string{"layernorm", "NewLayerNorm"}},
		{"LayerNorm/zero layer", func(*testing.T) error { return forward2((&LayerNorm{}).Forward(x)) }, []string{"layernorm", "NewLayerNorm"}},
		{"FeedForward/nil layer", func(*testing.T) error { var f *FeedForward; return forward2(f.Forward(x)) }, []string{"feed-forward", "NewFeedForward"}},
		{"FeedForward/zero layer", func(*testing.T) error { return forward2((&FeedForward{}).Forward(x)) }, []string{"feed-forward", "NewFeedForward"}},
		{"MultiHeadAttention/nil layer", func(*testing.T) error { var a *MultiHeadAttention; return forward3(a.Forward(x, x, x, nil)) }, []string{"attention", "NewMultiHeadAttention"}},
		{"MultiHeadAttention/zero layer", func(*testing.T) error { return forward3((&MultiHeadAttention{}).Forward(x, x, x, nil)) }, []string{"attention", "NewMultiHeadAttention"}},
		{"MultiHeadAttention/scope but no projections", func(*testing.T) error {
			return forward3((&MultiHeadAttention{s: s.Sub("bare")}).Forward(x, x, x, nil))
		}, []string{`attention "bare"`, "no projections"}},
		{"Block/nil layer", func(*testing.T) error { var bl *Block; return forward3(bl.Forward(x, nil)) }, []string{"block", "NewBlock"}},
		{"Block/zero layer", func(*testing.T) error { return forward3((&Block{}).Forward(x, nil)) }, []string{"block", "NewBlock"}},
		{"Decoder/nil model", func(*testing.T) error { var d *Decoder; return forwardModel(d.Forward(b.ids, nil)) }, []string{"decoder", "NewDecoder"}},
		{"Decoder/zero model", func(*testing.T) error { return forwardModel((&Decoder{}).Forward(b.ids, nil)) }, []string{"decoder", "NewDecoder"}},
		{"Decoder/no head", func(*testing.T) error {
			headless := *b.dec.stack
			headless.head = nil
			return forwardModel((&Decoder{stack: &headless}).Forward(b.ids, nil))
		}, []string{"decoder", "no head"}},
		{"Encoder/nil model", func(*testing.T) error { var e *Encoder; return forwardModel(e.Forward(b.ids, nil)) }, []string{"encoder", "NewEncoder"}},
		{"Encoder/zero model", func(*testing.T) error { return forwardModel((&Encoder{}).Forward(b.ids, nil)) }, []string{"encoder", "NewEncoder"}},

		// Sizes whose element count overflows int or exceeds the cap: refused
		// before anything is allocated.
		{"NewLinear/In=Out=2^33", func(*testing.T) error {
			_, err := NewLinear(s.Sub("huge"), LinearConfig{In: big, Out: big})
			return err
		}, []string{`linear "huge"`, "(8589934592, 8589934592)", "overflows int"}},
		{"NewLinear/over the cap", func(*testing.T) error {
			_, err := NewLinear(s.Sub("huge"), LinearConfig{In: 1 << 16, Out: 1 << 16})
			return err
		}, []string{`linear "huge"`, "exceed graph.MaxElements"}},
		{"NewMultiHeadAttention/Dim 3037000499", func(*testing.T) error {
			_, err := NewMultiHeadAttention(s.Sub("huge"), AttentionConfig{Dim: 3037000499, Heads: 1})
			return err
		}, []string{`attention "huge"`, "wq", "exceed graph.MaxElements"}},
		{"NewMultiHeadAttention/KeyDim overflow", func(*testing.T) error {
			_, err := NewMultiHeadAttention(s.Sub("huge"), AttentionConfig{Dim: 8, Heads: 2, KeyDim: 1 << 62})
			return err
		}, []string{`attention "huge"`, "wk (KeyDim, KVHeads·dk)", "overflows int"}},
		{"NewEmbedding/overflow", func(*testing.T) error {
			_, err := NewEmbedding(s.Sub("huge"), EmbeddingConfig{Vocab: big, Dim: big})
			return err
		}, []string{`embedding "huge"`, "overflows int"}},
		{"NewPositions/sinusoidal over the cap", func(*testing.T) error {
			_, err := NewPositions(s.Sub("huge"), PositionsConfig{Kind: PositionsSinusoidal, MaxLen: 1 << 20, Dim: 1 << 12})
			return err
		}, []string{`positions "huge"`, "exceed"}},
		{"NewPositions/learned overflow", func(*testing.T) error {
			_, err := NewPositions(s.Sub("huge"), PositionsConfig{Kind: PositionsLearned, MaxLen: big, Dim: big})
			return err
		}, []string{`positions "huge"`, "overflows int"}},
		{"NewFeedForward/overflow", func(*testing.T) error {
			_, err := NewFeedForward(s.Sub("huge"), FeedForwardConfig{Dim: big, Hidden: big})
			return err
		}, []string{`feed-forward "huge"`, "overflows int"}},
		{"NewBlock/hidden over the cap", func(*testing.T) error {
			_, err := NewBlock(s.Sub("huge"), BlockConfig{Dim: 8, Heads: 2, Hidden: 1 << 29})
			return err
		}, []string{`feed-forward "huge.ff"`, "exceed"}},
		{"NewDecoder/2^40 layers", func(t *testing.T) error {
			cfg := withStack(func(c *StackConfig) { c.Layers = 1 << 40 })
			if cfg.Validate() == nil {
				// Building it would take all memory before failing.
				t.Fatal("Validate accepts 2^40 layers; not calling NewDecoder")
			}
			_, err := NewDecoder(s.Sub("huge"), cfg)
			return err
		}, []string{"decoder", "1099511627776 layers", "MaxElements"}},
		{"NewEncoder/vocab overflow", func(*testing.T) error {
			_, err := NewEncoder(s.Sub("huge"), withStack(func(c *StackConfig) { c.Vocab = big; c.Dim = big; c.Heads = 1 }))
			return err
		}, []string{`embedding "huge.tok_emb"`, "overflows int"}},
		{"Decoder/weights of a huge batch", func(*testing.T) error {
			// 2 sequences of 2^16 ids fit; their (B, H, S, S) weights do not.
			long := withStack(func(c *StackConfig) { c.MaxLen, c.Positions = 1<<16, PositionsNone })
			d, err := NewDecoder(s.Sub("long"), long)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := graph.NewIDs(s.Graph(), 2, 1<<16, 7, "long_ids")
			if err != nil {
				t.Fatal(err)
			}
			return forwardModel(d.Forward(ids, nil))
		}, []string{"weights", "exceed graph.MaxElements"}},

		// Non-finite and out-of-range settings.
		{"NewLayerNorm/NaN eps", func(*testing.T) error {
			_, err := NewLayerNorm(s.Sub("ln_nan"), LayerNormConfig{Dim: 4, Eps: math.NaN()})
			return err
		}, []string{`layernorm "ln_nan"`, "Eps", "NaN"}},
		{"NewBlock/NaN dropout", func(*testing.T) error {
			_, err := NewBlock(s.Sub("b_nan"), BlockConfig{Dim: 8, Heads: 2, Hidden: 16, BlockOptions: BlockOptions{Dropout: math.NaN()}})
			return err
		}, []string{`block "b_nan"`, "Dropout NaN"}},
		{"NewMultiHeadAttention/Inf dropout", func(*testing.T) error {
			_, err := NewMultiHeadAttention(s.Sub("a_inf"), AttentionConfig{Dim: 8, Heads: 2, Dropout: math.Inf(1)})
			return err
		}, []string{`attention "a_inf"`, "Dropout +Inf"}},
	}...)
	checkErrCases(t, cases)

	// Methods without an error result must not panic on nil receivers.
	noPanic(t, "nil receivers", func() error {
		if nilScope.Name("w") != "w" || nilScope.Graph() != nil || nilScope.Dtype() != (tensor.Dtype{}) {
			t.Error("nil Scope: Name, Graph or Dtype not the zero answer")
		}
		var (
			l  *Linear
			e  *Embedding
			p  *Positions
			ln *LayerNorm
			f  *FeedForward
			a  *MultiHeadAttention
			bl *Block
			d  *Decoder
			en *Encoder
		)
		n := len(l.Params()) + len(e.Params()) + len(p.Params()) + len(ln.Params()) + len(f.Params()) +
			len(a.Params()) + len(bl.Params()) + len(d.Params()) + len(en.Params()) + len((&Decoder{}).Params()) +
			len(a.Dropouts()) + len(bl.Dropouts()) + len(d.Dropouts()) + len(en.Dropouts()) + len((&Encoder{}).Dropouts())
		if n != 0 {
			t.Errorf("nil layers list %d params or dropouts", n)
		}
		return nil
	})
}
