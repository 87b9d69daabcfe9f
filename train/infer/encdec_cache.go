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

	encVM     G.VM
	src       *graph.IDs
	srcPad    *graph.MaskNode
	crossOut  []*G.Node // Encode's keys then values, per block
	encParams []graph.Param
	cross     [][]float64 // Encode's outputs for the prompts being decoded

	stepVM         G.VM
	*selfCache     // the target's tokens and self-attention caches
	crossMask      *graph.MaskNode
	crossK, crossV []*G.Node // inputs bound to Encode's outputs
	stepParams     []graph.Param
}

// NewCachedEncDec builds the cached encoder–decoder of cfg (resolved, Arch
// ArchEncDec) for b prompts, with the values of params (an EncDecModel's).
func NewCachedEncDec(cfg config.Config, b int, params []graph.Param) (*CachedEncDec, error) {
	const what = "cached encoder-decoder"
	ec := cfg.EncDec()
	if err := checkCache(cfg, config.ArchEncDec, "NewCachedEncDec", "NewCached", what, b, ec.TgtMaxLen); err != nil {
		return nil, err
	}
	dt, err := cfg.DType.Tensor()
	if err != nil {
		return nil, err
	}
	c := &CachedEncDec{B: b, Ss: ec.SrcMaxLen, St: ec.TgtMaxLen}
	newModel := func() (*G.ExprGraph, *layers.EncoderDecoder, error) {
		g, s, err := newGraph(cfg)
		if err != nil {
			return nil, nil, err
		}
		m, err := layers.NewEncoderDecoder(s, ec)
		return g, m, err
	}

	// The encoder, once per prompt.
	eg, em, err := newModel()
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
	sg, sm, err := newModel()
	if err != nil {
		return nil, err
	}
	if c.selfCache, err = newSelfCache(sg, what, dt, b, c.St, ec.KVDim(), ec.TgtVocab, ec.DecLayers); err != nil {
		return nil, err
	}
	if c.crossMask, err = graph.NewMaskInput(sg, dt, b, 1, c.Ss, "cross"); err != nil {
		return nil, err
	}
	for i := 0; i < ec.DecLayers; i++ {
		c.crossK = append(c.crossK, G.NewTensor(sg, dt, 3, G.WithShape(b, c.Ss, ec.KVDim()), G.WithName(fmt.Sprintf("cross.%d.k", i))))
		c.crossV = append(c.crossV, G.NewTensor(sg, dt, 3, G.WithShape(b, c.Ss, ec.KVDim()), G.WithName(fmt.Sprintf("cross.%d.v", i))))
	}
	if c.logits, c.keys, c.values, err = sm.Step(c.tok, c.pos, c.cacheK, c.cacheV, c.slot, c.seen, c.crossK, c.crossV, c.crossMask); err != nil {
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
	err = run(c.encVM, "cached encoder-decoder: encoder", func() error {
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
	for i := range c.crossK {
		if err := G.Let(c.crossK[i], graph.NewDense(c.dt, crossShape, c.cross[i])); err != nil {
			return fmt.Errorf("infer: cached encoder-decoder: %w", err)
		}
		if err := G.Let(c.crossV[i], graph.NewDense(c.dt, crossShape, c.cross[len(c.crossK)+i])); err != nil {
			return fmt.Errorf("infer: cached encoder-decoder: %w", err)
		}
	}
	return c.decode(c.stepVM, prefixes, steps, tokens, logits)
}
