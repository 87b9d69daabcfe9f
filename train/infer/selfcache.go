package infer

import (
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
	bufK, bufV     [][]float64     // the caches' contents between steps
}

// newSelfCache adds the inputs of a cached step with blocks blocks to g.
// The caller sets keys, values and logits from the decoder's Step.
func newSelfCache(g *G.ExprGraph, what string, dt tensor.Dtype, b, l, dim, vocab, blocks int) (*selfCache, error) {
	c := &selfCache{what: what, b: b, l: l, dim: dim, vocab: vocab, dt: dt}
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
		c.bufK = append(c.bufK, make([]float64, b*l*dim))
		c.bufV = append(c.bufV, make([]float64, b*l*dim))
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
		clear(c.bufK[i])
		clear(c.bufV[i])
	}
}

// feed runs one step on vm: row i's token ids[i] at position t (rows that
// are done, or absent, idle at the last position once t passes it), its key
// and value written into the caches. It returns every row's logits of the
// token that follows.
func (c *selfCache) feed(vm G.VM, ids []int, t int) ([][]float64, error) {
	p := min(t, c.l-1)
	pos, seen := make([]int, c.b), make([]int, c.b)
	slot := make([]float64, c.b*c.l)
	for i := range c.b {
		pos[i], seen[i] = p, p+1
		slot[i*c.l+p] = 1
	}
	if err := c.bind(ids, pos, seen, slot); err != nil {
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

// bind sets one step's tokens, positions, mask and slot, and the caches.
func (c *selfCache) bind(ids, pos, seen []int, slot []float64) error {
	if err := c.tok.Set(ids); err != nil {
		return err
	}
	if err := c.pos.Set(pos); err != nil {
		return err
	}
	mask, err := graph.KeyPadding(seen, 1, c.l)
	if err != nil {
		return err
	}
	if err := c.seen.Set(mask); err != nil {
		return err
	}
	if err := G.Let(c.slot, graph.NewDense(c.dt, tensor.Shape{c.b, c.l, 1}, slot)); err != nil {
		return fmt.Errorf("infer: %s: %w", c.what, err)
	}
	shape := tensor.Shape{c.b, c.l, c.dim}
	for i := range c.cacheK {
		if err := G.Let(c.cacheK[i], graph.NewDense(c.dt, shape, c.bufK[i])); err != nil {
			return fmt.Errorf("infer: %s: %w", c.what, err)
		}
		if err := G.Let(c.cacheV[i], graph.NewDense(c.dt, shape, c.bufV[i])); err != nil {
			return fmt.Errorf("infer: %s: %w", c.what, err)
		}
	}
	return nil
}

// readCaches copies the caches with the step's row written in back into
// the buffers the next step binds.
func (c *selfCache) readCaches() error {
	for i := range c.keys {
		k, err := graph.Float64s(c.keys[i].Value())
		if err != nil {
			return err
		}
		v, err := graph.Float64s(c.values[i].Value())
		if err != nil {
			return err
		}
		copy(c.bufK[i], k)
		copy(c.bufV[i], v)
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
