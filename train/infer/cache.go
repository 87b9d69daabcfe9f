package infer

import (
	"errors"
	"fmt"

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

	*selfCache
	vm     G.VM
	params []graph.Param
}

// NewCached builds the cached decoder of cfg (resolved) for b rows and
// gives it the values of params, the parameters of a model of the same
// configuration (a Model's Params, or a training model's).
func NewCached(cfg config.Config, b int, params []graph.Param) (*Cached, error) {
	const what = "cached decoder"
	l, d := cfg.Model.MaxLen, cfg.Model.KVDim() // the caches hold KVHeads heads
	if err := checkCache(cfg, config.ArchDecoder, "NewCached", "NewCachedEncDec", what, b, l); err != nil {
		return nil, err
	}
	g, scope, err := newGraph(cfg)
	if err != nil {
		return nil, err
	}
	dec, err := layers.NewDecoder(scope, cfg.Model)
	if err != nil {
		return nil, err
	}
	self, err := newSelfCache(g, what, scope.Dtype(), b, l, d, cfg.Model.Vocab, cfg.Model.Layers)
	if err != nil {
		return nil, err
	}
	c := &Cached{B: b, L: l, selfCache: self}
	if c.logits, c.keys, c.values, err = dec.Step(c.tok, c.pos, c.cacheK, c.cacheV, c.slot, c.seen); err != nil {
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

// checkCache checks what NewCached and NewCachedEncDec (fn, the other
// being other) check before building anything: cfg's architecture, at
// least one row of b, and the memory estimate of b rows of l positions.
func checkCache(cfg config.Config, arch config.Arch, fn, other, what string, b, l int) error {
	if err := checkArch(cfg, arch, fn, other); err != nil {
		return err
	}
	if b <= 0 {
		return fmt.Errorf("infer: %s: %d rows, want at least 1", what, b)
	}
	return config.CheckMemory(cfg, b, l, false)
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
		switch {
		case !ok1 || !ok2 || src[i].Name != p.Name || !from.Shape().Eq(to.Shape()):
			return fmt.Errorf("infer: params: param %d is %q, want %q of shape %v", i, src[i].Name, p.Name, to.Shape())
		case from.Dtype() != to.Dtype():
			return fmt.Errorf("infer: params: param %q is %v, the model's is %v: build both models with the same dtype (values are not converted)", p.Name, from.Dtype(), to.Dtype())
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
		if err := c.decode(c.vm, seqs[start:end], steps[start:end], tokens[start:end], logits[start:end]); err != nil {
			return nil, nil, err
		}
	}
	return tokens, logits, nil
}
