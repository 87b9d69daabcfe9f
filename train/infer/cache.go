package infer

import (
	"errors"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// Cached decodes with a key/value cache: a decoder compiled to take one new
// token per row and step (layers.Decoder.Step), keeping every earlier
// position's keys and values in a cache instead of recomputing the prefix.
// A step costs O(L·D) in attention for a context of L positions, where
// running the whole prefix again costs O(p²·D) at position p.
type Cached struct {
	// B is the number of rows decoded at once; L the context, the most
	// positions a sequence may reach.
	B, L int

	dt             tensor.Dtype
	dim, vocab     int
	tok, pos       *graph.IDs
	slot           *G.Node
	mask           *graph.MaskNode
	cacheK, cacheV []*G.Node // inputs, one (B, L, D) per block
	keys, values   []*G.Node // the same with the step's row written in
	logits         *G.Node   // (B, 1, Vocab)
	vm             G.VM
	bufK, bufV     [][]float64 // the caches' contents between steps
	params         []graph.Param
}

// NewCached builds the cached decoder of cfg (resolved) for b rows and
// gives it the values of params, the parameters of a model of the same
// configuration (a Model's Params, or a training model's).
func NewCached(cfg config.Config, b int, params []graph.Param) (*Cached, error) {
	dt, err := cfg.DType.Tensor()
	if err != nil {
		return nil, err
	}
	if b <= 0 {
		return nil, fmt.Errorf("infer: cached decoder: %d rows, want at least 1", b)
	}
	l, d := cfg.Model.MaxLen, cfg.Model.Dim
	if err := config.CheckMemory(cfg, b, l, false); err != nil {
		return nil, err
	}
	g := G.NewGraph()
	scope, err := layers.NewScope(g, dt, cfg.Seed)
	if err != nil {
		return nil, err
	}
	dec, err := layers.NewDecoder(scope, cfg.Model)
	if err != nil {
		return nil, err
	}
	c := &Cached{B: b, L: l, dt: dt, dim: d, vocab: cfg.Model.Vocab}
	if c.tok, err = graph.NewIDs(g, b, 1, cfg.Model.Vocab, "tok"); err != nil {
		return nil, err
	}
	if c.pos, err = graph.NewIDs(g, b, 1, l, "pos"); err != nil {
		return nil, err
	}
	if c.mask, err = graph.NewMaskInput(g, dt, b, 1, l, "seen"); err != nil {
		return nil, err
	}
	c.slot = G.NewTensor(g, dt, 3, G.WithShape(b, l, 1), G.WithName("slot"))
	for i := 0; i < cfg.Model.Layers; i++ {
		c.cacheK = append(c.cacheK, G.NewTensor(g, dt, 3, G.WithShape(b, l, d), G.WithName(fmt.Sprintf("cache.%d.k", i))))
		c.cacheV = append(c.cacheV, G.NewTensor(g, dt, 3, G.WithShape(b, l, d), G.WithName(fmt.Sprintf("cache.%d.v", i))))
		c.bufK = append(c.bufK, make([]float64, b*l*d))
		c.bufV = append(c.bufV, make([]float64, b*l*d))
	}
	if c.logits, c.keys, c.values, err = dec.Step(c.tok, c.pos, c.cacheK, c.cacheV, c.slot, c.mask); err != nil {
		return nil, err
	}
	c.params = dec.Params()
	if err := copyParams(c.params, params); err != nil {
		return nil, err
	}
	if c.vm, err = graph.NewMachine(g); err != nil {
		return nil, err
	}
	return c, nil
}

// copyParams copies the value of every param of src into the param of dst
// of the same name and shape.
func copyParams(dst, src []graph.Param) error {
	if len(dst) != len(src) {
		return fmt.Errorf("infer: params: %d given, the model has %d", len(src), len(dst))
	}
	for i, p := range dst {
		if err := graph.CheckNode(src[i].Node, "param "+src[i].Name); err != nil {
			return fmt.Errorf("infer: params: %w", err)
		}
		from, ok1 := src[i].Node.Value().(*tensor.Dense)
		to, ok2 := p.Node.Value().(*tensor.Dense)
		if !ok1 || !ok2 || src[i].Name != p.Name || !from.Shape().Eq(to.Shape()) || from.Dtype() != to.Dtype() {
			return fmt.Errorf("infer: params: param %d is %q, want %q of shape %v", i, src[i].Name, p.Name, to.Shape())
		}
		if err := tensor.Copy(to, from); err != nil {
			return fmt.Errorf("infer: params: param %q: %w", p.Name, err)
		}
	}
	return nil
}

// SetParams gives the cached decoder the current values of params, the
// parameters of a model of its configuration.
func (c *Cached) SetParams(params []graph.Param) error {
	if c == nil || c.vm == nil {
		return errors.New("infer: nil cached decoder: make it with NewCached")
	}
	return copyParams(c.params, params)
}

// Close releases the machine.
func (c *Cached) Close() error {
	if c == nil || c.vm == nil {
		return errors.New("infer: nil cached decoder: make it with NewCached")
	}
	return c.vm.Close()
}

// Generate extends each sequence greedily by steps[i] tokens, as Generate
// does with a Model, feeding one token per row and step.
func (c *Cached) Generate(seqs [][]int, steps []int) ([][]int, error) {
	out, _, err := c.Decode(seqs, steps)
	return out, err
}

// Decode is Generate that also returns, for each generated token, the
// logits it was chosen from.
func (c *Cached) Decode(seqs [][]int, steps []int) ([][]int, [][][]float64, error) {
	if c == nil || c.vm == nil {
		return nil, nil, errors.New("infer: nil cached decoder: make it with NewCached")
	}
	if len(steps) != len(seqs) {
		return nil, nil, fmt.Errorf("infer: generate: %d step counts for %d sequences", len(steps), len(seqs))
	}
	for i, s := range seqs {
		switch {
		case len(s) == 0:
			return nil, nil, fmt.Errorf("infer: generate: sequence %d is empty", i)
		case steps[i] < 0:
			return nil, nil, fmt.Errorf("infer: generate: sequence %d: negative step count %d", i, steps[i])
		case len(s)+steps[i]-1 > c.L:
			return nil, nil, fmt.Errorf("infer: generate: sequence %d: %d tokens and %d to generate exceed the context of %d positions", i, len(s), steps[i], c.L)
		}
		for _, id := range s {
			if id < 0 || id >= c.vocab {
				return nil, nil, fmt.Errorf("infer: generate: sequence %d: token id %d is outside [0, %d)", i, id, c.vocab)
			}
		}
	}
	tokens := make([][]int, len(seqs))
	logits := make([][][]float64, len(seqs))
	for start := 0; start < len(seqs); start += c.B {
		end := min(start+c.B, len(seqs))
		if err := c.decodeChunk(seqs[start:end], steps[start:end], tokens[start:end], logits[start:end]); err != nil {
			return nil, nil, err
		}
	}
	return tokens, logits, nil
}

// decodeChunk decodes up to B sequences, one position per step for every
// row at once, writing their new tokens and logits.
func (c *Cached) decodeChunk(seqs [][]int, steps []int, tokens [][]int, logits [][][]float64) error {
	for i := range c.bufK {
		clear(c.bufK[i])
		clear(c.bufV[i])
	}
	full := make([][]int, len(seqs))
	last := 0 // the last position any row feeds
	for i, s := range seqs {
		full[i] = slices.Clone(s)
		tokens[i] = []int{}
		last = max(last, len(s)+steps[i]-2)
	}
	ids, pos, seen := make([]int, c.B), make([]int, c.B), make([]int, c.B)
	slot := make([]float64, c.B*c.L)
	for t := 0; t <= last; t++ {
		clear(ids)
		clear(slot)
		for i := range c.B {
			p := min(t, c.L-1) // rows that are done, or absent, idle here
			if i < len(seqs) && t < len(full[i]) {
				ids[i] = full[i][t]
			}
			pos[i], seen[i] = p, p+1
			slot[i*c.L+p] = 1
		}
		mask, err := graph.KeyPadding(seen, 1, c.L)
		if err != nil {
			return err
		}
		if err := c.bind(ids, pos, slot, mask); err != nil {
			return err
		}
		var rows [][]float64
		err = c.run(func() error {
			vals, err := graph.Float64s(c.logits.Value()) // (B, 1, Vocab)
			if err != nil {
				return err
			}
			for i := range seqs {
				rows = append(rows, slices.Clone(vals[i*c.vocab:(i+1)*c.vocab]))
			}
			return c.readCaches()
		})
		if err != nil {
			return err
		}
		for i, s := range seqs {
			// The logits after position t choose token t+1 once the
			// sequence is fed and until its steps are done.
			if t >= len(s)-1 && len(tokens[i]) < steps[i] && t == len(full[i])-1 {
				next := argmax(rows[i])
				tokens[i] = append(tokens[i], next)
				logits[i] = append(logits[i], rows[i])
				full[i] = append(full[i], next)
			}
		}
	}
	return nil
}

// bind sets the step's inputs and the caches.
func (c *Cached) bind(ids, pos []int, slot []float64, mask graph.Mask) error {
	if err := c.tok.Set(ids); err != nil {
		return err
	}
	if err := c.pos.Set(pos); err != nil {
		return err
	}
	if err := c.mask.Set(mask); err != nil {
		return err
	}
	if err := G.Let(c.slot, graph.NewDense(c.dt, tensor.Shape{c.B, c.L, 1}, slot)); err != nil {
		return fmt.Errorf("infer: cached decoder: %w", err)
	}
	shape := tensor.Shape{c.B, c.L, c.dim}
	for i := range c.cacheK {
		if err := G.Let(c.cacheK[i], graph.NewDense(c.dt, shape, c.bufK[i])); err != nil {
			return fmt.Errorf("infer: cached decoder: %w", err)
		}
		if err := G.Let(c.cacheV[i], graph.NewDense(c.dt, shape, c.bufV[i])); err != nil {
			return fmt.Errorf("infer: cached decoder: %w", err)
		}
	}
	return nil
}

// readCaches copies the caches with the step's row written in back into
// the buffers the next step binds.
func (c *Cached) readCaches() error {
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

// run executes the machine once, reading before it is reset.
func (c *Cached) run(read func() error) error {
	defer c.vm.Reset()
	if err := c.vm.RunAll(); err != nil {
		return fmt.Errorf("infer: cached decoder: run: %w", err)
	}
	return read()
}
