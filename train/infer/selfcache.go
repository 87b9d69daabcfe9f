package infer

import (
	"cmp"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
)

// selfCache is what a cached decoder grows by one position per step: the
// inputs of one step (a token and its position per row, the slot its key
// and value are written into, the positions it may see) and a key and value
// cache per block, with the step's outputs. Cached and CachedEncDec share
// it; the encoder-decoder adds what its cross-attention reads.
type selfCache struct {
	// what names the decoder in errors.
	what string
	// b rows of l positions of width dim; logits over vocab.
	b, l, dim, vocab int
	dt               tensor.Dtype

	tok, pos       *graph.IDs
	slot           *G.Node         // (B, L, 1): 1 at the position each row writes
	seen           *graph.MaskNode // (B, 1, L): the positions each row may see
	cacheK, cacheV []*G.Node       // inputs, one (B, L, D) per block
	keys, values   []*G.Node       // the same with the step's row written in
	logits         *G.Node         // (B, 1, Vocab)
	// bufK and bufV hold the caches between steps, in the model's dtype,
	// bound to cacheK and cacheV: a step copies its keys and values back
	// into them, with no conversion and nothing allocated.
	bufK, bufV       []*tensor.Dense
	slotBuf          *tensor.Dense
	posIDs, seenLens []int // a step's positions and visible lengths
}

// newSelfCache adds the inputs of a cached step with blocks blocks to g.
// The caller sets keys, values and logits from the decoder's Step.
func newSelfCache(g *G.ExprGraph, what string, dt tensor.Dtype, b, l, dim, vocab, blocks int) (*selfCache, error) {
	c := &selfCache{what: what, b: b, l: l, dim: dim, vocab: vocab, dt: dt,
		slotBuf: tensor.New(tensor.Of(dt), tensor.WithShape(b, l, 1)), posIDs: make([]int, b), seenLens: make([]int, b)}
	var err error
	if c.tok, err = graph.NewIDs(g, b, 1, vocab, "tok"); err != nil {
		return nil, err
	}
	if c.pos, err = graph.NewIDs(g, b, 1, l, "pos"); err != nil {
		return nil, err
	}
	if c.seen, err = graph.NewMaskInput(g, dt, b, 1, l, "seen"); err != nil {
		return nil, err
	}
	c.slot = G.NewTensor(g, dt, 3, G.WithShape(b, l, 1), G.WithName("slot"))
	for i := 0; i < blocks; i++ {
		c.cacheK = append(c.cacheK, G.NewTensor(g, dt, 3, G.WithShape(b, l, dim), G.WithName(fmt.Sprintf("cache.%d.k", i))))
		c.cacheV = append(c.cacheV, G.NewTensor(g, dt, 3, G.WithShape(b, l, dim), G.WithName(fmt.Sprintf("cache.%d.v", i))))
		c.bufK = append(c.bufK, tensor.New(tensor.Of(dt), tensor.WithShape(b, l, dim)))
		c.bufV = append(c.bufV, tensor.New(tensor.Of(dt), tensor.WithShape(b, l, dim)))
	}
	return c, nil
}

// decode extends up to B prefixes by steps[i] tokens each, greedily, one
// position per step for every row at once on vm, the machine of the step's
// graph; it writes the new tokens and the logits each was chosen from.
func (c *selfCache) decode(vm G.VM, prefixes [][]int, steps []int, tokens [][]int, logits [][][]float64) error {
	c.reset()
	full := make([][]int, len(prefixes))
	last := 0 // the last position any row feeds
	for i, p := range prefixes {
		full[i] = slices.Clone(p)
		tokens[i] = []int{}
		last = max(last, len(p)+steps[i]-2)
	}
	ids := make([]int, c.b)
	for t := 0; t <= last; t++ {
		clear(ids)
		for i := range prefixes {
			if t < len(full[i]) {
				ids[i] = full[i][t]
			}
		}
		rows, err := c.feed(vm, ids, t)
		if err != nil {
			return err
		}
		for i := range prefixes {
			// The logits after position t choose token t+1 once the
			// prefix is fed and until its steps are done.
			if len(tokens[i]) < steps[i] && t == len(full[i])-1 {
				next := argmax(rows[i])
				tokens[i] = append(tokens[i], next)
				logits[i] = append(logits[i], rows[i])
				full[i] = append(full[i], next)
			}
		}
	}
	return nil
}

// reset empties the caches, for a new batch of sequences.
func (c *selfCache) reset() {
	for i := range c.bufK {
		c.bufK[i].Zero()
		c.bufV[i].Zero()
	}
}

// feed runs one step on vm: row i's token ids[i] at position t (rows that
// are done, or absent, idle at the last position once t passes it), its key
// and value written into the caches. It returns every row's logits of the
// token that follows.
func (c *selfCache) feed(vm G.VM, ids []int, t int) ([][]float64, error) {
	p := min(t, c.l-1)
	c.slotBuf.Zero()
	for i := range c.b {
		c.posIDs[i], c.seenLens[i] = p, p+1
		if err := c.slotBuf.SetAt(oneOf(c.dt), i, p, 0); err != nil {
			return nil, fmt.Errorf("infer: %s: %w", c.what, err)
		}
	}
	if err := c.bind(ids); err != nil {
		return nil, err
	}
	rows := make([][]float64, c.b)
	err := run(vm, c.what, func() error {
		vals, err := graph.Float64s(c.logits.Value()) // (B, 1, Vocab)
		if err != nil {
			return err
		}
		for i := range rows {
			rows[i] = slices.Clone(vals[i*c.vocab : (i+1)*c.vocab])
		}
		return c.readCaches()
	})
	return rows, err
}

// bind sets one step's tokens, and its positions, mask, slot and caches
// from c.
func (c *selfCache) bind(ids []int) error {
	if err := c.tok.Set(ids); err != nil {
		return err
	}
	if err := c.pos.Set(c.posIDs); err != nil {
		return err
	}
	mask, err := graph.KeyPadding(c.seenLens, 1, c.l)
	if err != nil {
		return err
	}
	if err := c.seen.Set(mask); err != nil {
		return err
	}
	if err := graph.LetOnce(c.slot, c.slotBuf); err != nil {
		return fmt.Errorf("infer: %s: %w", c.what, err)
	}
	for i := range c.cacheK {
		if err := cmp.Or(graph.LetOnce(c.cacheK[i], c.bufK[i]), graph.LetOnce(c.cacheV[i], c.bufV[i])); err != nil {
			return fmt.Errorf("infer: %s: %w", c.what, err)
		}
	}
	return nil
}

// oneOf returns 1 in dtype dt, as SetAt wants it.
func oneOf(dt tensor.Dtype) any {
	if dt == tensor.Float32 {
		return float32(1)
	}
	return 1.0
}

// readCaches copies the caches with the step's row written in back into
// the buffers the next step binds.
func (c *selfCache) readCaches() error {
	for i := range c.keys {
		if err := cmp.Or(copyDense(c.bufK[i], c.keys[i].Value()), copyDense(c.bufV[i], c.values[i].Value())); err != nil {
			return fmt.Errorf("infer: %s: %w", c.what, err)
		}
	}
	return nil
}

// copyDense copies src, a dense tensor of dst's dtype and size, into dst.
func copyDense(dst *tensor.Dense, src G.Value) error {
	d, ok := src.(*tensor.Dense)
	if !ok || d.Dtype() != dst.Dtype() || d.Size() != dst.Size() {
		return fmt.Errorf("cache: got %T %v %v, want a dense %v of %d elements", src, src.Dtype(), src.Shape(), dst.Dtype(), dst.Size())
	}
	switch dst.Dtype() {
	case tensor.Float32:
		copy(dst.Float32s(), d.Float32s())
	case tensor.Float64:
		copy(dst.Float64s(), d.Float64s())
	default:
		return fmt.Errorf("cache: dtype %v is not supported", dst.Dtype())
	}
	return nil
}

// run executes vm once and calls read, if not nil, before vm is reset,
// since values may alias buffers the next run reuses; what names the model
// in errors ("" for a Model or EncDecModel).
func run(vm G.VM, what string, read func() error) error {
	defer vm.Reset()
	if err := vm.RunAll(); err != nil {
		if what == "" {
			return fmt.Errorf("infer: run: %w", err)
		}
		return fmt.Errorf("infer: %s: run: %w", what, err)
	}
	if read == nil {
		return nil
	}
	return read()
}

// CacheBytes is the size of the self-attention key/value caches a step
// reads: a key and a value tensor (B, L, KVDim) per block in the model's
// dtype. A grouped-query model's KVDim is KVHeads·dk, so its caches are
// KVHeads/Heads of those of a multi-head model of the same width.
func (c *selfCache) CacheBytes() int {
	return 2 * len(c.cacheK) * c.b * c.l * c.dim * int(c.dt.Size())
}
