package model

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// Cached decodes a model of either architecture with a key/value cache: a
// decoder compiled to take one new token per row and step
// (layers.Decoder.Step, layers.EncoderDecoder.Step), keeping every earlier
// position's keys and values in a cache instead of recomputing the prefix.
// A step costs O(L·D) in attention for a context of L positions, where
// running the whole prefix again costs O(p²·D) at position p.
//
// An encoder–decoder's decoder also reads a cross-attention memory: per
// batch of sources its encoder runs once and every decoder block's
// cross-attention keys and values are projected once
// (layers.EncoderDecoder.Encode), which each step then reads. A
// decoder-only model has no memory: it is given no sources.
type Cached struct {
	// B is the number of rows decoded at once; L the context, the most
	// positions a row's sequence may reach; SourceLen the longest source of
	// an encoder–decoder (0 for a decoder-only model).
	B, L, SourceLen int

	// what names the decoder in errors.
	what string
	// dim is the width of the caches; the logits are over vocab.
	dim, vocab int
	dt         tensor.Dtype

	// The step: one token per row, its position, the slot its key and value
	// are written into, the positions it may see, and a key and value cache
	// per block, with the step's outputs.
	stepVM         G.VM
	stepParams     []graph.Param
	tok, pos       *graph.IDs
	slot           *G.Node         // (B, L, 1): 1 at the position each row writes
	seen           *graph.MaskNode // (B, 1, L): the positions each row may see
	cacheK, cacheV []*G.Node       // inputs, per block: keys and values (B, L, D), or a linear block's state
	keys, values   []*G.Node       // the same with the step's row written in
	logits         *G.Node         // (B, 1, Vocab)
	// bufK and bufV hold the caches between steps, in the model's dtype,
	// bound to cacheK and cacheV: a step copies its keys and values back
	// into them, with no conversion and nothing allocated.
	bufK, bufV       []*tensor.Dense
	slotBuf          *tensor.Dense
	posIDs, seenLens []int // a step's positions and visible lengths

	// The memory of an encoder–decoder (encVM nil otherwise): the encoder's
	// machine, its inputs and outputs (Encode's keys, then values, per
	// block), and the step's inputs bound to them.
	encVM          G.VM
	encParams      []graph.Param
	src            *graph.IDs
	srcPad         *graph.MaskNode
	memOut         []*G.Node
	memory         [][]float64 // memOut's values for the sources being decoded
	crossMask      *graph.MaskNode
	crossK, crossV []*G.Node
}

// NewCached builds the cached decoder of cfg (resolved), of either
// architecture, for b rows and gives it the values of params, the
// parameters of a model of the same configuration (a Model's Params, a
// training model's included). It checks the memory estimate of b rows of
// the configuration's longest input first.
func NewCached(cfg config.Config, b int, params []graph.Param) (*Cached, error) {
	if err := checkArch(cfg); err != nil {
		return nil, err
	}
	encdec := cfg.ArchOrDefault() == config.ArchEncDec
	what := "cached decoder"
	if encdec {
		what = "cached encoder-decoder"
	}
	if b <= 0 {
		return nil, fmt.Errorf("model: %s: %d rows, want at least 1", what, b)
	}
	if err := config.CheckMemory(cfg, b, cfg.Model.MaxLen, false); err != nil {
		return nil, err
	}
	if encdec {
		return newCachedMemory(cfg, what, b, params)
	}
	l, d := cfg.Model.MaxLen, cfg.Model.KVDim() // the caches hold KVHeads heads
	g, scope, err := newGraph(cfg)
	if err != nil {
		return nil, err
	}
	dec, err := layers.NewDecoder(scope, cfg.Model)
	if err != nil {
		return nil, err
	}
	ks, vs := dec.StepShapes(b, l)
	c, err := newCached(g, what, scope.Dtype(), b, l, d, cfg.Model.Vocab, ks, vs)
	if err != nil {
		return nil, err
	}
	if c.logits, c.keys, c.values, err = dec.Step(c.tok, c.pos, c.cacheK, c.cacheV, c.slot, c.seen); err != nil {
		return nil, err
	}
	c.stepParams = dec.Params()
	if err := copyParams(c.stepParams, params); err != nil {
		return nil, err
	}
	if c.stepVM, err = graph.NewMachine(g); err != nil {
		return nil, fmt.Errorf("model: %s: machine: %w", what, err)
	}
	return c, nil
}

// newCachedMemory is NewCached of an encoder–decoder: the encoder's graph,
// run once per batch of sources, and the step's, which reads its memory.
func newCachedMemory(cfg config.Config, what string, b int, params []graph.Param) (*Cached, error) {
	ec := cfg.EncDec()
	dt, err := cfg.DType.Tensor()
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", what, err)
	}
	newNet := func() (*G.ExprGraph, *layers.EncoderDecoder, error) {
		g, s, err := newGraph(cfg)
		if err != nil {
			return nil, nil, err
		}
		m, err := layers.NewEncoderDecoder(s, ec)
		return g, m, err
	}

	// The encoder, once per batch of sources.
	eg, em, err := newNet()
	if err != nil {
		return nil, err
	}
	ss := ec.SrcMaxLen
	src, err := graph.NewIDs(eg, b, ss, ec.SrcVocab, "src")
	if err != nil {
		return nil, err
	}
	srcPad, err := graph.NewMaskInput(eg, dt, b, ss, ss, "src_pad")
	if err != nil {
		return nil, err
	}
	ck, cv, err := em.Encode(src, srcPad)
	if err != nil {
		return nil, err
	}

	// The decoder, one token per step.
	sg, sm, err := newNet()
	if err != nil {
		return nil, err
	}
	ks, vs := sm.StepShapes(b, ec.TgtMaxLen)
	c, err := newCached(sg, what, dt, b, ec.TgtMaxLen, ec.KVDim(), ec.TgtVocab, ks, vs)
	if err != nil {
		return nil, err
	}
	c.SourceLen, c.src, c.srcPad, c.memOut, c.encParams = ss, src, srcPad, append(ck, cv...), em.Params()
	if c.crossMask, err = graph.NewMaskInput(sg, dt, b, 1, ss, "cross"); err != nil {
		return nil, err
	}
	for i := 0; i < ec.DecLayers; i++ {
		c.crossK = append(c.crossK, G.NewTensor(sg, dt, 3, G.WithShape(b, ss, ec.KVDim()), G.WithName(fmt.Sprintf("cross.%d.k", i))))
		c.crossV = append(c.crossV, G.NewTensor(sg, dt, 3, G.WithShape(b, ss, ec.KVDim()), G.WithName(fmt.Sprintf("cross.%d.v", i))))
	}
	if c.logits, c.keys, c.values, err = sm.Step(c.tok, c.pos, c.cacheK, c.cacheV, c.slot, c.seen, c.crossK, c.crossV, c.crossMask); err != nil {
		return nil, err
	}
	c.stepParams = sm.Params()
	if err := c.SetParams(params); err != nil {
		return nil, err
	}
	if c.encVM, err = graph.NewMachine(eg); err != nil {
		return nil, fmt.Errorf("model: %s: encoder machine: %w", what, err)
	}
	if c.stepVM, err = graph.NewMachine(sg); err != nil {
		c.encVM.Close()
		return nil, fmt.Errorf("model: %s: machine: %w", what, err)
	}
	return c, nil
}

// newCached adds the inputs of a cached step to g, b rows of l positions
// whose keys and values are dim wide, with one key and one value cache per
// block of the shapes ks and vs (the network's StepShapes: a linear block
// keeps its state there). The caller sets keys, values and logits from the
// network's Step.
func newCached(g *G.ExprGraph, what string, dt tensor.Dtype, b, l, dim, vocab int, ks, vs []tensor.Shape) (*Cached, error) {
	c := &Cached{B: b, L: l, what: what, dim: dim, vocab: vocab, dt: dt,
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
	for i := range ks {
		c.cacheK = append(c.cacheK, G.NewTensor(g, dt, len(ks[i]), G.WithShape(ks[i]...), G.WithName(fmt.Sprintf("cache.%d.k", i))))
		c.cacheV = append(c.cacheV, G.NewTensor(g, dt, len(vs[i]), G.WithShape(vs[i]...), G.WithName(fmt.Sprintf("cache.%d.v", i))))
		c.bufK = append(c.bufK, tensor.New(tensor.Of(dt), tensor.WithShape(ks[i]...)))
		c.bufV = append(c.bufV, tensor.New(tensor.Of(dt), tensor.WithShape(vs[i]...)))
	}
	return c, nil
}

// check reports a nil Cached, or one NewCached did not make.
func (c *Cached) check() error {
	if c == nil || c.stepVM == nil {
		return errors.New("model: nil cached decoder: make it with NewCached or Model.Cached")
	}
	return nil
}

// SetParams gives the cached decoder (and an encoder–decoder's encoder) the
// current values of params, the parameters of a model of its
// configuration.
func (c *Cached) SetParams(params []graph.Param) error {
	if c == nil || c.stepParams == nil {
		return errors.New("model: nil cached decoder: make it with NewCached or Model.Cached")
	}
	if c.encParams != nil {
		if err := copyParams(c.encParams, params); err != nil {
			return err
		}
	}
	return copyParams(c.stepParams, params)
}

// Close releases the machines.
func (c *Cached) Close() error {
	if err := c.check(); err != nil {
		return err
	}
	var err error
	if c.encVM != nil {
		err = c.encVM.Close()
	}
	if err2 := c.stepVM.Close(); err == nil {
		err = err2
	}
	if err != nil {
		return fmt.Errorf("model: %s: close: %w", c.what, err)
	}
	return nil
}

// CacheBytes is the size of what the self-attentions keep between steps,
// in the model's dtype: a key and a value tensor (B, L, KVDim) per softmax
// block, the state S (B, H·dφ, dk) and z (B, 1, H·dφ) per linear block,
// whatever the position. A grouped-query model's KVDim is KVHeads·dk, so
// its caches are KVHeads/Heads of those of a multi-head model of the same
// width. An encoder–decoder's cross-attention memory is not counted.
func (c *Cached) CacheBytes() int {
	if c == nil {
		return 0
	}
	n := 0
	for i := range c.bufK {
		n += c.bufK[i].Size() + c.bufV[i].Size()
	}
	return n * int(c.dt.Size())
}

// Generate extends each sequence prefixes[i] greedily by steps[i] tokens,
// feeding one token per row and step, reading sources[i] through the
// cross-attention memory of an encoder–decoder (sources nil for a
// decoder-only model). It returns the new tokens only.
func (c *Cached) Generate(sources, prefixes [][]int, steps []int) ([][]int, error) {
	out, _, err := c.Decode(sources, prefixes, steps)
	return out, err
}

// Decode is Generate that also returns, for each generated token, the
// logits it was chosen from.
func (c *Cached) Decode(sources, prefixes [][]int, steps []int) ([][]int, [][][]float64, error) {
	if err := c.check(); err != nil {
		return nil, nil, err
	}
	if len(steps) != len(prefixes) {
		return nil, nil, fmt.Errorf("model: %s: generate: %d step counts for %d sequences", c.what, len(steps), len(prefixes))
	}
	if err := c.checkSources(sources, len(prefixes)); err != nil {
		return nil, nil, err
	}
	for i, s := range prefixes {
		switch {
		case len(s) == 0:
			return nil, nil, fmt.Errorf("model: %s: generate: sequence %d is empty", c.what, i)
		case steps[i] < 0:
			return nil, nil, fmt.Errorf("model: %s: generate: sequence %d: negative step count %d", c.what, i, steps[i])
		case len(s)+steps[i]-1 > c.L:
			return nil, nil, fmt.Errorf("model: %s: generate: sequence %d: %d tokens and %d to generate exceed the context of %d positions", c.what, i, len(s), steps[i], c.L)
		}
		for _, id := range s {
			if id < 0 || id >= c.vocab {
				return nil, nil, fmt.Errorf("model: %s: generate: sequence %d: token id %d is outside [0, %d)", c.what, i, id, c.vocab)
			}
		}
	}
	tokens := make([][]int, len(prefixes))
	logits := make([][][]float64, len(prefixes))
	for start := 0; start < len(prefixes); start += c.B {
		end := min(start+c.B, len(prefixes))
		var srcs [][]int
		if sources != nil {
			srcs = sources[start:end]
		}
		if err := c.start(srcs); err != nil {
			return nil, nil, err
		}
		if err := c.decode(prefixes[start:end], steps[start:end], tokens[start:end], logits[start:end]); err != nil {
			return nil, nil, err
		}
	}
	return tokens, logits, nil
}

// checkSources checks that an encoder–decoder is given n sources, each of
// 1 to SourceLen tokens, and a decoder-only model none.
func (c *Cached) checkSources(sources [][]int, n int) error {
	if c.encVM == nil {
		if sources != nil {
			return fmt.Errorf("model: %s: sources given to a decoder-only model, which has no encoder", c.what)
		}
		return nil
	}
	if len(sources) != n {
		return fmt.Errorf("model: %s: %d sources for %d sequences: an encoder-decoder reads one source per sequence", c.what, len(sources), n)
	}
	for i, s := range sources {
		if len(s) == 0 || len(s) > c.SourceLen {
			return fmt.Errorf("model: %s: source %d has %d tokens, want 1 to %d", c.what, i, len(s), c.SourceLen)
		}
	}
	return nil
}

// Start empties the caches for new rows and, for an encoder–decoder, runs
// the encoder on sources (up to B, one per row; rows they do not fill read
// one padding token) into the cross-attention memory every step reads
// until the next Start. A decoder-only model is given no sources. Feed
// then extends the rows one position at a time; Decode starts its own.
func (c *Cached) Start(sources [][]int) error {
	if err := c.check(); err != nil {
		return err
	}
	if c.encVM != nil && len(sources) > c.B {
		return fmt.Errorf("model: %s: %d sources, want at most %d", c.what, len(sources), c.B)
	}
	if err := c.checkSources(sources, len(sources)); err != nil {
		return err
	}
	if c.encVM != nil && len(sources) == 0 {
		return fmt.Errorf("model: %s: no sources: an encoder-decoder decodes from a source", c.what)
	}
	return c.start(sources)
}

// start empties the caches and encodes sources, checked.
func (c *Cached) start(sources [][]int) error {
	c.reset()
	if c.encVM == nil {
		return nil
	}
	ss := c.SourceLen
	src, srcLen := make([]int, c.B*ss), make([]int, c.B)
	for i := range srcLen {
		srcLen[i] = 1 // rows no source fills
	}
	for i, s := range sources {
		copy(src[i*ss:], s)
		srcLen[i] = len(s)
	}
	if err := c.src.Set(src); err != nil {
		return fmt.Errorf("model: %s: encoder: %w", c.what, err)
	}
	if err := c.srcPad.SetKeyLengths(srcLen); err != nil {
		return fmt.Errorf("model: %s: encoder: %w", c.what, err)
	}
	c.memory = c.memory[:0]
	err := run(c.encVM, c.what+": encoder", func() error {
		for _, n := range c.memOut {
			v, err := graph.Float64s(n.Value())
			if err != nil {
				return err
			}
			c.memory = append(c.memory, slices.Clone(v))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := c.crossMask.SetKeyLengths(srcLen); err != nil {
		return fmt.Errorf("model: %s: memory: %w", c.what, err)
	}
	shape := tensor.Shape{c.B, ss, c.dim}
	for i := range c.crossK {
		if err := G.Let(c.crossK[i], graph.NewDense(c.dt, shape, c.memory[i])); err != nil {
			return fmt.Errorf("model: %s: memory: %w", c.what, err)
		}
		if err := G.Let(c.crossV[i], graph.NewDense(c.dt, shape, c.memory[len(c.crossK)+i])); err != nil {
			return fmt.Errorf("model: %s: memory: %w", c.what, err)
		}
	}
	return nil
}

// decode extends up to B prefixes by steps[i] tokens each, greedily, one
// position per step for every row at once; it writes the new tokens and
// the logits each was chosen from. The caches are empty and the memory,
// if any, bound (start).
func (c *Cached) decode(prefixes [][]int, steps []int, tokens [][]int, logits [][][]float64) error {
	full := make([][]int, len(prefixes))
	last := 0 // the last position any row feeds
	for i, p := range prefixes {
		full[i] = slices.Clone(p)
		tokens[i] = []int{}
		last = max(last, len(p)+steps[i]-2)
	}
	ids := make([]int, c.B)
	for t := 0; t <= last; t++ {
		clear(ids)
		for i := range prefixes {
			if t < len(full[i]) {
				ids[i] = full[i][t]
			}
		}
		rows, err := c.feed(ids, t)
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
func (c *Cached) reset() {
	for i := range c.bufK {
		c.bufK[i].Zero()
		c.bufV[i].Zero()
	}
}

// Feed runs one step: row i's token ids[i] (B of them) at position pos,
// its key and value written into the caches, reading the memory Start
// bound. It returns every row's logits of the token that follows. Rows
// feed the positions 0, 1, 2, … in turn after Start.
func (c *Cached) Feed(ids []int, pos int) ([][]float64, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if len(ids) != c.B || pos < 0 || pos >= c.L {
		return nil, fmt.Errorf("model: %s: feed: %d tokens at position %d, want %d at a position in [0, %d)", c.what, len(ids), pos, c.B, c.L)
	}
	return c.feed(ids, pos)
}

// feed runs one step: row i's token ids[i] at position t (rows that are
// done, or absent, idle at the last position once t passes it), its key
// and value written into the caches. It returns every row's logits of the
// token that follows.
func (c *Cached) feed(ids []int, t int) ([][]float64, error) {
	p := min(t, c.L-1)
	c.slotBuf.Zero()
	for i := range c.B {
		c.posIDs[i], c.seenLens[i] = p, p+1
		if err := c.slotBuf.SetAt(oneOf(c.dt), i, p, 0); err != nil {
			return nil, fmt.Errorf("model: %s: %w", c.what, err)
		}
	}
	if err := c.bind(ids); err != nil {
		return nil, err
	}
	rows := make([][]float64, c.B)
	err := run(c.stepVM, c.what, func() error {
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
func (c *Cached) bind(ids []int) error {
	if err := c.tok.Set(ids); err != nil {
		return fmt.Errorf("model: %s: %w", c.what, err)
	}
	if err := c.pos.Set(c.posIDs); err != nil {
		return fmt.Errorf("model: %s: %w", c.what, err)
	}
	if err := c.seen.SetKeyLengths(c.seenLens); err != nil {
		return fmt.Errorf("model: %s: %w", c.what, err)
	}
	if err := graph.LetOnce(c.slot, c.slotBuf); err != nil {
		return fmt.Errorf("model: %s: %w", c.what, err)
	}
	for i := range c.cacheK {
		if err := cmp.Or(graph.LetOnce(c.cacheK[i], c.bufK[i]), graph.LetOnce(c.cacheV[i], c.bufV[i])); err != nil {
			return fmt.Errorf("model: %s: %w", c.what, err)
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
func (c *Cached) readCaches() error {
	for i := range c.keys {
		if err := cmp.Or(copyDense(c.bufK[i], c.keys[i].Value()), copyDense(c.bufV[i], c.values[i].Value())); err != nil {
			return fmt.Errorf("model: %s: %w", c.what, err)
		}
	}
	return nil
}

// copyDense copies src, a dense tensor of dst's dtype and size, into dst.
func copyDense(dst *tensor.Dense, src G.Value) error {
	d, ok := src.(*tensor.Dense)
	if !ok || d.Dtype() != dst.Dtype() || d.Size() != dst.Size() {
		return fmt.Errorf("cache: got %T, want a dense %v of %d elements", src, dst.Dtype(), dst.Size())
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

// argmax returns the index of the largest of xs, the lowest among ties.
func argmax(xs []float64) int {
	best := 0
	for i, x := range xs {
		if x > xs[best] {
			best = i
		}
	}
	return best
}
