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

// CachedEncDec decodes an encoder–decoder with a key/value cache: per
// prompt the encoder runs once and each decoder block's cross-attention
// keys and values are projected once (EncoderDecoder.Encode); then every
// step feeds one target token per row (EncoderDecoder.Step), reading those
// and the self-attention cache.
type CachedEncDec struct {
	// B is the number of prompts decoded at once; Ss and St the longest
	// source and target.
	B, Ss, St int

	dt                 tensor.Dtype
	dim, vocab, blocks int

	encVM          G.VM
	src            *graph.IDs
	srcPad         *graph.MaskNode
	crossOut       []*G.Node // Encode's keys then values, per block
	encParams      []graph.Param
	stepVM         G.VM
	tok, pos       *graph.IDs
	slot           *G.Node
	selfMask       *graph.MaskNode
	crossMask      *graph.MaskNode
	cacheK, cacheV []*G.Node
	crossK, crossV []*G.Node // inputs bound to Encode's outputs
	keys, values   []*G.Node
	logits         *G.Node
	stepParams     []graph.Param
	bufK, bufV     [][]float64
	cross          [][]float64
}

// NewCachedEncDec builds the cached encoder–decoder of cfg (resolved, Arch
// ArchEncDec) for b prompts, with the values of params (an EncDecModel's).
func NewCachedEncDec(cfg config.Config, b int, params []graph.Param) (*CachedEncDec, error) {
	dt, err := cfg.DType.Tensor()
	if err != nil {
		return nil, err
	}
	if b <= 0 {
		return nil, fmt.Errorf("infer: cached encoder-decoder: %d rows, want at least 1", b)
	}
	ec := cfg.EncDec()
	if err := config.CheckMemory(cfg, b, ec.TgtMaxLen, false); err != nil {
		return nil, err
	}
	c := &CachedEncDec{B: b, Ss: ec.SrcMaxLen, St: ec.TgtMaxLen, dt: dt, dim: ec.Dim, vocab: ec.TgtVocab, blocks: ec.DecLayers}
	newModel := func() (*G.ExprGraph, *layers.Scope, *layers.EncoderDecoder, error) {
		g := G.NewGraph()
		s, err := layers.NewScope(g, dt, cfg.Seed)
		if err != nil {
			return nil, nil, nil, err
		}
		m, err := layers.NewEncoderDecoder(s, ec)
		return g, s, m, err
	}

	// The encoder, once per prompt.
	eg, _, em, err := newModel()
	if err != nil {
		return nil, err
	}
	if c.src, err = graph.NewIDs(eg, b, c.Ss, ec.SrcVocab, "src"); err != nil {
		return nil, err
	}
	if c.srcPad, err = graph.NewMaskInput(eg, dt, b, c.Ss, c.Ss, "src_pad"); err != nil {
		return nil, err
	}
	ck, cv, err := em.Encode(c.src, c.srcPad)
	if err != nil {
		return nil, err
	}
	c.crossOut = append(ck, cv...)
	c.encParams = em.Params()

	// The decoder, one token per step.
	sg, _, sm, err := newModel()
	if err != nil {
		return nil, err
	}
	if c.tok, err = graph.NewIDs(sg, b, 1, ec.TgtVocab, "tok"); err != nil {
		return nil, err
	}
	if c.pos, err = graph.NewIDs(sg, b, 1, c.St, "pos"); err != nil {
		return nil, err
	}
	if c.selfMask, err = graph.NewMaskInput(sg, dt, b, 1, c.St, "seen"); err != nil {
		return nil, err
	}
	if c.crossMask, err = graph.NewMaskInput(sg, dt, b, 1, c.Ss, "cross"); err != nil {
		return nil, err
	}
	c.slot = G.NewTensor(sg, dt, 3, G.WithShape(b, c.St, 1), G.WithName("slot"))
	for i := 0; i < c.blocks; i++ {
		c.cacheK = append(c.cacheK, G.NewTensor(sg, dt, 3, G.WithShape(b, c.St, c.dim), G.WithName(fmt.Sprintf("cache.%d.k", i))))
		c.cacheV = append(c.cacheV, G.NewTensor(sg, dt, 3, G.WithShape(b, c.St, c.dim), G.WithName(fmt.Sprintf("cache.%d.v", i))))
		c.crossK = append(c.crossK, G.NewTensor(sg, dt, 3, G.WithShape(b, c.Ss, c.dim), G.WithName(fmt.Sprintf("cross.%d.k", i))))
		c.crossV = append(c.crossV, G.NewTensor(sg, dt, 3, G.WithShape(b, c.Ss, c.dim), G.WithName(fmt.Sprintf("cross.%d.v", i))))
		c.bufK = append(c.bufK, make([]float64, b*c.St*c.dim))
		c.bufV = append(c.bufV, make([]float64, b*c.St*c.dim))
	}
	if c.logits, c.keys, c.values, err = sm.Step(c.tok, c.pos, c.cacheK, c.cacheV, c.slot, c.selfMask, c.crossK, c.crossV, c.crossMask); err != nil {
		return nil, err
	}
	c.stepParams = sm.Params()
	if err := c.SetParams(params); err != nil {
		return nil, err
	}
	if c.encVM, err = graph.NewMachine(eg); err != nil {
		return nil, err
	}
	if c.stepVM, err = graph.NewMachine(sg); err != nil {
		c.encVM.Close()
		return nil, err
	}
	return c, nil
}

// SetParams gives both graphs the current values of params.
func (c *CachedEncDec) SetParams(params []graph.Param) error {
	if c == nil {
		return errors.New("infer: nil cached encoder-decoder: make it with NewCachedEncDec")
	}
	if err := copyParams(c.encParams, params); err != nil {
		return err
	}
	return copyParams(c.stepParams, params)
}

// Close releases both machines.
func (c *CachedEncDec) Close() error {
	if c == nil || c.encVM == nil || c.stepVM == nil {
		return errors.New("infer: nil cached encoder-decoder: make it with NewCachedEncDec")
	}
	err := c.encVM.Close()
	if err2 := c.stepVM.Close(); err == nil {
		err = err2
	}
	return err
}

// Decode generates steps[i] target tokens after each target prefix
// prefixes[i] (typically just SEP) for the source srcs[i], greedily, and
// returns them with the logits each was chosen from.
func (c *CachedEncDec) Decode(srcs, prefixes [][]int, steps []int) ([][]int, [][][]float64, error) {
	if c == nil || c.encVM == nil {
		return nil, nil, errors.New("infer: nil cached encoder-decoder: make it with NewCachedEncDec")
	}
	if len(prefixes) != len(srcs) || len(steps) != len(srcs) {
		return nil, nil, fmt.Errorf("infer: generate: %d sources, %d prefixes and %d step counts", len(srcs), len(prefixes), len(steps))
	}
	for i := range srcs {
		switch {
		case len(srcs[i]) == 0 || len(srcs[i]) > c.Ss:
			return nil, nil, fmt.Errorf("infer: generate: source %d has %d tokens, want 1 to %d", i, len(srcs[i]), c.Ss)
		case len(prefixes[i]) == 0:
			return nil, nil, fmt.Errorf("infer: generate: target %d has no first token (SEP)", i)
		case steps[i] < 0 || len(prefixes[i])+steps[i]-1 > c.St:
			return nil, nil, fmt.Errorf("infer: generate: target %d: %d tokens and %d to generate exceed the decoder's %d positions", i, len(prefixes[i]), steps[i], c.St)
		}
	}
	tokens := make([][]int, len(srcs))
	logits := make([][][]float64, len(srcs))
	for start := 0; start < len(srcs); start += c.B {
		end := min(start+c.B, len(srcs))
		if err := c.decodeChunk(srcs[start:end], prefixes[start:end], steps[start:end], tokens[start:end], logits[start:end]); err != nil {
			return nil, nil, err
		}
	}
	return tokens, logits, nil
}

// decodeChunk encodes up to B sources once, then decodes their targets one
// position per step.
func (c *CachedEncDec) decodeChunk(srcs, prefixes [][]int, steps []int, tokens [][]int, logits [][][]float64) error {
	src, srcLen := make([]int, c.B*c.Ss), make([]int, c.B)
	for i := range srcLen {
		srcLen[i] = 1 // rows no source fills
	}
	for i, s := range srcs {
		copy(src[i*c.Ss:], s)
		srcLen[i] = len(s)
	}
	if err := c.src.Set(src); err != nil {
		return err
	}
	pad, err := graph.KeyPadding(srcLen, c.Ss, c.Ss)
	if err != nil {
		return err
	}
	if err := c.srcPad.Set(pad); err != nil {
		return err
	}
	c.cross = c.cross[:0]
	err = run(c.encVM, func() error {
		for _, n := range c.crossOut {
			v, err := graph.Float64s(n.Value())
			if err != nil {
				return err
			}
			c.cross = append(c.cross, slices.Clone(v))
		}
		return nil
	})
	if err != nil {
		return err
	}
	crossMask, err := graph.KeyPadding(srcLen, 1, c.Ss)
	if err != nil {
		return err
	}
	if err := c.crossMask.Set(crossMask); err != nil {
		return err
	}
	crossShape := tensor.Shape{c.B, c.Ss, c.dim}
	for i := 0; i < c.blocks; i++ {
		if err := G.Let(c.crossK[i], graph.NewDense(c.dt, crossShape, c.cross[i])); err != nil {
			return fmt.Errorf("infer: cached encoder-decoder: %w", err)
		}
		if err := G.Let(c.crossV[i], graph.NewDense(c.dt, crossShape, c.cross[c.blocks+i])); err != nil {
			return fmt.Errorf("infer: cached encoder-decoder: %w", err)
		}
	}

	for i := range c.bufK {
		clear(c.bufK[i])
		clear(c.bufV[i])
	}
	full := make([][]int, len(srcs))
	last := 0
	for i, p := range prefixes {
		full[i] = slices.Clone(p)
		tokens[i] = []int{}
		last = max(last, len(p)+steps[i]-2)
	}
	ids, pos, seen := make([]int, c.B), make([]int, c.B), make([]int, c.B)
	slot := make([]float64, c.B*c.St)
	for t := 0; t <= last; t++ {
		clear(ids)
		clear(slot)
		for i := range c.B {
			p := min(t, c.St-1)
			if i < len(srcs) && t < len(full[i]) {
				ids[i] = full[i][t]
			}
			pos[i], seen[i] = p, p+1
			slot[i*c.St+p] = 1
		}
		if err := c.bindStep(ids, pos, seen, slot); err != nil {
			return err
		}
		var rows [][]float64
		err := run(c.stepVM, func() error {
			vals, err := graph.Float64s(c.logits.Value()) // (B, 1, V)
			if err != nil {
				return err
			}
			for i := range srcs {
				rows = append(rows, slices.Clone(vals[i*c.vocab:(i+1)*c.vocab]))
			}
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
		})
		if err != nil {
			return err
		}
		for i := range srcs {
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

// bindStep binds one step's tokens, positions, masks, slot and caches.
func (c *CachedEncDec) bindStep(ids, pos, seen []int, slot []float64) error {
	if err := c.tok.Set(ids); err != nil {
		return err
	}
	if err := c.pos.Set(pos); err != nil {
		return err
	}
	mask, err := graph.KeyPadding(seen, 1, c.St)
	if err != nil {
		return err
	}
	if err := c.selfMask.Set(mask); err != nil {
		return err
	}
	if err := G.Let(c.slot, graph.NewDense(c.dt, tensor.Shape{c.B, c.St, 1}, slot)); err != nil {
		return fmt.Errorf("infer: cached encoder-decoder: %w", err)
	}
	shape := tensor.Shape{c.B, c.St, c.dim}
	for i := range c.cacheK {
		if err := G.Let(c.cacheK[i], graph.NewDense(c.dt, shape, c.bufK[i])); err != nil {
			return fmt.Errorf("infer: cached encoder-decoder: %w", err)
		}
		if err := G.Let(c.cacheV[i], graph.NewDense(c.dt, shape, c.bufV[i])); err != nil {
			return fmt.Errorf("infer: cached encoder-decoder: %w", err)
		}
	}
	return nil
}

// run executes vm once, reading before it is reset.
func run(vm G.VM, read func() error) error {
	defer vm.Reset()
	if err := vm.RunAll(); err != nil {
		return fmt.Errorf("infer: run: %w", err)
	}
	return read()
}
