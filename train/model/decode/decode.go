package decode

import (
	"errors"
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// Supported returns nil if the fast path runs cfg's model (resolved, as
// config.json holds it), or an error naming the first thing it does not
// run, for a caller to fall back to model.Cached with. It runs decoder-only
// models of softmax blocks, pre- or post-LN, with learned, sinusoidal or no
// positions added to the embeddings, LayerNorms with or without bias,
// projections with or without biases, ReLU or GELU (tanh), any attention
// scale, the head tied or not, in float32 or float64. It does not run an
// encoder–decoder, linear-attention blocks, RoPE or ALiBi, grouped-query
// attention, windows, global tokens, block-local attention, sinks,
// softcapping, QK-norm, head temperature or mask and score modifiers.
func Supported(cfg config.Config) error {
	m := cfg.Model
	unsupported := func(what string) error {
		return fmt.Errorf("decode: the fast path does not run %s (the graph path does)", what)
	}
	switch {
	case cfg.ArchOrDefault() != config.ArchDecoder:
		return unsupported("an encoder-decoder")
	case cfg.DType != config.Float32 && cfg.DType != config.Float64 && cfg.DType != "":
		return unsupported(fmt.Sprintf("dtype %q", cfg.DType))
	}
	switch m.Positions {
	case "", layers.PositionsLearned, layers.PositionsSinusoidal, layers.PositionsNone:
	default:
		return unsupported("positions " + string(m.Positions))
	}
	switch m.Activation {
	case "", layers.ActivationReLU, layers.ActivationGELU:
	default:
		return unsupported("activation " + string(m.Activation))
	}
	if f := m.AttnScale.Factor(m.Dim, m.Heads); math.IsNaN(f) {
		return unsupported(fmt.Sprintf("attention scale %q", m.AttnScale))
	}
	kinds, err := layers.ParseLayerKinds(m.LayerKinds)
	if err != nil {
		return err
	}
	for _, k := range kinds {
		if k.Linear {
			return unsupported("linear attention blocks")
		}
		if k.Window > 0 {
			return unsupported("windowed blocks")
		}
	}
	v := m.AttentionVariants
	switch {
	case v.KVHeads != 0 && v.KVHeads != m.Heads:
		return unsupported("grouped-query attention (kv_heads)")
	case v.Softcap != 0:
		return unsupported("softcapping")
	case v.Sinks:
		return unsupported("attention sinks")
	case v.QKNorm:
		return unsupported("QK-norm")
	case v.Window != 0:
		return unsupported("a sliding window")
	case v.GlobalTokens != 0:
		return unsupported("global tokens")
	case v.BlockLocal != 0:
		return unsupported("block-local attention")
	case v.HeadTemperature:
		return unsupported("head temperature")
	case v.Mask != nil || v.Score != nil:
		return unsupported("mask or score modifiers")
	}
	if m.Dim <= 0 || m.Heads <= 0 || m.Dim%m.Heads != 0 || m.Layers <= 0 || m.Hidden <= 0 || m.Vocab <= 0 || m.MaxLen <= 0 {
		return fmt.Errorf("decode: model sizes dim %d, heads %d, layers %d, hidden %d, vocab %d, max_len %d: want positive, heads dividing dim",
			m.Dim, m.Heads, m.Layers, m.Hidden, m.Vocab, m.MaxLen)
	}
	return nil
}

// Decoder extends Rows sequences at once, one token per row and step, on
// the fast path: the model's weights copied once into panels
// (float32 or float64, the model's dtype), every activation, key and value
// in buffers allocated by New, and each step a few loops over them (the
// products in assembly where the CPU has AVX-512): no graph, no allocation.
// The rows share the weights; each has its own cache and length. A
// Decoder is not safe for concurrent use.
//
// With GOMAXPROCS and the machine at two cores or more, a step of a large
// enough model (the nanoGPT preset's) runs on two: a helper goroutine of
// the Decoder's, started by the first such step, computes part of every
// product and of the attention, with logits bit for bit those of one
// core. The helper returns after a second without work, so a Decoder
// needs no Close. It stays on one core at GOMAXPROCS 1, for a small model
// (the hand-overs would cost more than the second core saves), and while
// the helper falls behind, its core busy with other work (team.go's
// back-off).
type Decoder struct {
	rows, ctx, vocab int
	dtype            config.DType
	lens             []int
	toks             []int // Prime's tokens, rows·ctx
	net              stepper
}

// stepper is the network of one dtype.
type stepper interface {
	// run feeds n tokens to every row: row r's toks[r·n : r·n+n] at
	// positions lens[r], lens[r]+1, …, and leaves in logits the logits
	// after each row's last.
	run(toks []int, n int, lens []int)
	logits(r int) []float64
	cacheBytes() int
	// setCores sets the cores a chunk's phases may be split between, the
	// fewest multiply-adds of a chunk that is, and whether a helper that
	// falls behind turns the split off for a while (team's back-off).
	setCores(cores, minMACs int, backOff bool)
}

// New returns the fast decoder of cfg's model (resolved; Supported(cfg)
// must be nil) for rows sequences, with the values of params, the
// parameters of a model of that configuration (model.Model.Params, or a
// checkpoint's): they are copied, so params may change afterwards without
// changing the decoder.
func New(cfg config.Config, rows int, params []graph.Param) (*Decoder, error) {
	if err := Supported(cfg); err != nil {
		return nil, err
	}
	if rows <= 0 {
		return nil, fmt.Errorf("decode: %d rows, want at least 1", rows)
	}
	vals := map[string]any{}
	for _, p := range params {
		if p.Node == nil || p.Node.Value() == nil {
			return nil, fmt.Errorf("decode: param %q has no value", p.Name)
		}
		vals[p.Name] = p.Node.Value().Data()
	}
	d := &Decoder{rows: rows, ctx: cfg.Model.MaxLen, vocab: cfg.Model.Vocab, dtype: cfg.DType, lens: make([]int, rows), toks: make([]int, 0, rows*cfg.Model.MaxLen)}
	var err error
	if cfg.DType == config.Float64 {
		d.net, err = newNet[float64](cfg.Model, rows, vals)
	} else {
		d.dtype = config.Float32
		d.net, err = newNet[float32](cfg.Model, rows, vals)
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Rows is the number of sequences the decoder extends at once.
func (d *Decoder) Rows() int { return d.rows }

// Context is the most positions a row holds, the model's MaxLen.
func (d *Decoder) Context() int { return d.ctx }

// Vocab is the number of logits of a row.
func (d *Decoder) Vocab() int { return d.vocab }

// DType is the dtype the decoder computes in, the model's.
func (d *Decoder) DType() config.DType { return d.dtype }

// Len returns the number of positions row r holds.
func (d *Decoder) Len(r int) int { return d.lens[r] }

// CacheBytes is the size of the key and value caches of all rows.
func (d *Decoder) CacheBytes() int { return d.net.cacheBytes() }

// Reset empties every row.
func (d *Decoder) Reset() { clear(d.lens) }

// Feed appends ids[r] to row r, for every row, and computes each row's
// logits of the token that follows (Logits). It allocates nothing. A row
// that holds Context positions already is an error: start it again with
// Prime.
func (d *Decoder) Feed(ids []int) error {
	if len(ids) != d.rows {
		return fmt.Errorf("decode: feed: %d tokens for %d rows", len(ids), d.rows)
	}
	for r, id := range ids {
		if id < 0 || id >= d.vocab {
			return fmt.Errorf("decode: feed: row %d: token id %d is outside [0, %d)", r, id, d.vocab)
		}
		if d.lens[r] >= d.ctx {
			return fmt.Errorf("decode: feed: row %d holds %d positions, the context: prime it again", r, d.lens[r])
		}
	}
	d.net.run(ids, 1, d.lens)
	for r := range d.lens {
		d.lens[r]++
	}
	return nil
}

// Prime empties every row and fills row r with seqs[r], all of one length
// from 1 to Context, computing all positions of all rows together (a
// block of tokens per product, not one step per token); the logits are
// then those after each row's last token, as Feeding the tokens one by one
// would leave them.
func (d *Decoder) Prime(seqs [][]int) error {
	if len(seqs) != d.rows {
		return fmt.Errorf("decode: prime: %d sequences for %d rows", len(seqs), d.rows)
	}
	n := len(seqs[0])
	if n == 0 || n > d.ctx {
		return fmt.Errorf("decode: prime: %d tokens, want 1 to the context of %d", n, d.ctx)
	}
	toks := d.toks[:0]
	for r, s := range seqs {
		if len(s) != n {
			return fmt.Errorf("decode: prime: sequence %d has %d tokens, sequence 0 %d: want one length", r, len(s), n)
		}
		for _, id := range s {
			if id < 0 || id >= d.vocab {
				return fmt.Errorf("decode: prime: sequence %d: token id %d is outside [0, %d)", r, id, d.vocab)
			}
		}
		toks = append(toks, s...)
	}
	d.Reset()
	d.net.run(toks, n, d.lens)
	for r := range d.lens {
		d.lens[r] = n
	}
	return nil
}

// Logits returns row r's logits after its last token, as float64 (the
// decoder's own buffer: valid until the next Feed or Prime).
func (d *Decoder) Logits(r int) []float64 { return d.net.logits(r) }

// errMissing names a parameter the decoder needs and params lack.
var errMissing = errors.New("decode: missing parameter")
