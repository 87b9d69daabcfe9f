package model

import (
	"errors"
	"fmt"
	"runtime"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// Model is a model of either architecture compiled once for batches of B
// rows: its decoder reads S positions of every row, and an encoder–decoder's
// encoder SourceLen positions of the row's source besides. Every batch
// re-binds the inputs (SetBatch) and runs the same machine.
//
// Built for inference, its machine never computes or accumulates
// gradients. Built with Options.Train, it also has the targets, the
// weighted cross-entropy cost and the gradient of every parameter, which
// p.Node.Grad() returns after a run and Step hands to the optimizer.
type Model struct {
	// Arch is the architecture: config.ArchDecoder or config.ArchEncDec.
	Arch config.Arch
	// B is the rows of a batch, S the decoder's positions per row and
	// SourceLen the encoder's (0 for a decoder-only model).
	B, S, SourceLen int
	// DType is the dtype of the parameters and activations.
	DType tensor.Dtype
	// Params are the model's parameters, in the order of its checkpoints.
	Params []graph.Param

	// IDs are the decoder's token ids, (B, S).
	IDs *graph.IDs
	// Pad is the decoder's key-padding mask.
	Pad *graph.MaskNode
	// SourceIDs are an encoder–decoder's source token ids (B, SourceLen);
	// nil for a decoder-only model, as are SourcePad and CrossPad.
	SourceIDs *graph.IDs
	// SourcePad is the encoder's key-padding mask.
	SourcePad *graph.MaskNode
	// CrossPad is the cross-attention's mask, which hides the source's
	// padding from every decoder position.
	CrossPad *graph.MaskNode

	// Logits are the decoder's logits, (B, S, Vocab).
	Logits *G.Node
	// Weights are every attention layer's weights.
	Weights Weights

	// Targets are the targets and weights of a model built or assembled
	// with Options.Train; nil otherwise.
	Targets *graph.Targets
	// Cost is the weighted cross-entropy of the logits against Targets (the
	// mean over every weighted position of the batch), with Options.Train;
	// nil otherwise.
	Cost *G.Node

	// Graph holds the nodes.
	Graph *G.ExprGraph
	// VM runs Graph; nil for a model Assemble built and nothing compiled.
	VM G.VM

	cfg config.Config
	// dec is a decoder-only model's network, net an encoder–decoder's and
	// in its inputs; exactly one of dec and net is set.
	dec    *layers.Decoder
	net    *layers.EncoderDecoder
	in     *layers.EncDecInputs
	cached *Cached // built by the first Cached, closed with the model
}

// Weights are a model's attention weights, one node per layer, each
// (B, H, queries, keys); a layer computed by flash attention forms none
// (its node is nil).
type Weights struct {
	// Self is the decoder's causal self-attention, (B, H, S, S) per layer.
	Self []*G.Node
	// Encoder is an encoder–decoder's encoder self-attention,
	// (B, H, SourceLen, SourceLen) per layer; nil for a decoder-only model.
	Encoder []*G.Node
	// Cross is an encoder–decoder's cross-attention from the decoder's
	// positions to the source's, (B, H, S, SourceLen) per layer; nil for a
	// decoder-only model.
	Cross []*G.Node
}

// Options say what Build and Assemble build besides the forward pass.
type Options struct {
	// Train builds the model for training: the targets and the weighted
	// cross-entropy cost, and in Build the gradient of every parameter,
	// with a machine that runs forward and backward. The memory check then
	// counts gradients and optimizer moments.
	Train bool
}

// Build builds and compiles the model of cfg (resolved), of cfg's
// architecture, for batches of b rows of s decoder positions (s is
// normally cfg.Model.MaxLen; an encoder–decoder's encoder reads
// cfg.Model.MaxLen positions).
//
// Before allocating anything it estimates the memory the model needs
// (config.EstimateMemory) and returns a *config.MemoryError if that exceeds
// config.MemoryLimit, instead of letting the runtime die of an
// out-of-memory fatal error.
func Build(cfg config.Config, b, s int, opts Options) (*Model, error) {
	if err := checkArch(cfg); err != nil {
		return nil, err
	}
	if err := config.CheckMemory(cfg, b, s, opts.Train); err != nil {
		return nil, err
	}
	m, err := Assemble(cfg, b, s, opts)
	if err != nil {
		return nil, err
	}
	if opts.Train {
		m.VM, err = compile(m.Graph, m.Cost, m.Params)
	} else if m.VM, err = graph.NewMachine(m.Graph); err != nil {
		err = fmt.Errorf("model: machine: %w", err)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Assemble builds the graph Build compiles, without compiling it: token
// ids and masks in, logits and every layer's attention weights out, and
// with opts.Train the targets and the cost (but no gradients). A caller
// that differentiates or runs the graph itself (a gradient check) starts
// here.
func Assemble(cfg config.Config, b, s int, opts Options) (*Model, error) {
	if err := checkArch(cfg); err != nil {
		return nil, err
	}
	g, scope, err := newGraph(cfg)
	if err != nil {
		return nil, err
	}
	dt := scope.Dtype()
	m := &Model{Arch: cfg.ArchOrDefault(), B: b, S: s, DType: dt, Graph: g, cfg: cfg}
	if m.Arch == config.ArchEncDec {
		ec := cfg.EncDec()
		if m.net, err = layers.NewEncoderDecoder(scope, ec); err != nil {
			return nil, err
		}
		m.Params, m.SourceLen = m.net.Params(), ec.SrcMaxLen
		if m.in, err = layers.NewEncDecInputs(scope, ec, b, m.SourceLen, s); err != nil {
			return nil, err
		}
		in := m.in
		m.IDs, m.Pad, m.SourceIDs, m.SourcePad, m.CrossPad = in.Tgt, in.TgtPad, in.Src, in.SrcPad, in.CrossPad
		var w layers.EncDecWeights
		if m.Logits, w, err = m.net.Forward(in.Src, in.SrcPad, in.Tgt, in.TgtPad, in.CrossPad); err != nil {
			return nil, err
		}
		m.Weights = Weights{Self: w.DecoderSelf, Encoder: w.Encoder, Cross: w.Cross}
	} else {
		if m.dec, err = layers.NewDecoder(scope, cfg.Model); err != nil {
			return nil, err
		}
		m.Params = m.dec.Params()
		if m.IDs, err = graph.NewIDs(g, b, s, cfg.Model.Vocab, "ids"); err != nil {
			return nil, err
		}
		if m.Pad, err = graph.NewMaskInput(g, dt, b, s, s, "pad"); err != nil {
			return nil, err
		}
		if m.Logits, m.Weights.Self, err = m.dec.Forward(m.IDs, m.Pad); err != nil {
			return nil, err
		}
	}
	if opts.Train {
		if m.Targets, err = graph.NewTargets(g, dt, b*s, cfg.Model.Vocab, "targets"); err != nil {
			return nil, err
		}
		if m.Cost, err = graph.CrossEntropy(m.Logits, m.Targets); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// checkArch refuses an architecture the package does not build.
func checkArch(cfg config.Config) error {
	switch a := cfg.ArchOrDefault(); a {
	case config.ArchDecoder, config.ArchEncDec:
		return nil
	default:
		return fmt.Errorf("model: unknown architecture %q: want %q or %q", a, config.ArchDecoder, config.ArchEncDec)
	}
}

// compile differentiates cost with respect to params and compiles g: each
// parameter's gradient is then the value of its gradient node, where
// p.Node.Grad() and the optimizer read it.
func compile(g *G.ExprGraph, cost *G.Node, params []graph.Param) (G.VM, error) {
	if _, err := G.Grad(cost, graph.Nodes(params)...); err != nil {
		return nil, fmt.Errorf("model: gradient: %w", err)
	}
	m, err := graph.NewMachine(g)
	if err != nil {
		return nil, fmt.Errorf("model: machine: %w", err)
	}
	// Backward has independent ops throughout (every projection's input
	// and weight gradients): both cores run them.
	m.RunConcurrently(runtime.GOMAXPROCS(0))
	return m, nil
}

// newGraph returns a new graph and the root scope of cfg's model in it,
// of cfg's dtype and seed: where every builder of this package starts, so
// that a model built twice has the same parameters.
func newGraph(cfg config.Config) (*G.ExprGraph, *layers.Scope, error) {
	dt, err := cfg.DType.Tensor()
	if err != nil {
		return nil, nil, fmt.Errorf("model: %w", err)
	}
	g := G.NewGraph()
	scope, err := layers.NewScope(g, dt, cfg.Seed)
	if err != nil {
		return nil, nil, err
	}
	return g, scope, nil
}

// Config returns the configuration the model was built from.
func (m *Model) Config() config.Config {
	if m == nil {
		return config.Config{}
	}
	return m.cfg
}

// Dropouts returns the model's dropout sites, which Step resamples.
func (m *Model) Dropouts() []*graph.Dropout {
	switch {
	case m == nil:
		return nil
	case m.net != nil:
		return m.net.Dropouts()
	case m.dec != nil:
		return m.dec.Dropouts()
	}
	return nil
}

// Run executes the machine once and calls read, if not nil, before the
// machine is reset, since values may alias buffers the next run reuses. A
// model built with Options.Train runs forward and backward.
func (m *Model) Run(read func() error) error {
	if err := m.check(); err != nil {
		return err
	}
	return run(m.VM, "", read)
}

// CopyParamsFrom copies every parameter value of src into m: the evaluation
// model reads the training model's current weights this way. Both must be
// of the same configuration, dtype included: a float64 model's weights are
// not converted into a float32 one (that would round them without a word),
// the error names both dtypes.
func (m *Model) CopyParamsFrom(src *Model) error {
	if err := m.check(); err != nil {
		return err
	}
	if err := src.check(); err != nil {
		return fmt.Errorf("model: copy params from: %w", err)
	}
	return copyParams(m.Params, src.Params)
}

// SetParams copies the values of params, those of a model of the same
// configuration (a training model's), into m's.
func (m *Model) SetParams(params []graph.Param) error {
	if err := m.check(); err != nil {
		return err
	}
	return copyParams(m.Params, params)
}

// Cached returns the model's cached decoder (see Cached) for B rows, built
// on first use and given the model's current parameter values on every
// call, so that a model whose weights change (an evaluation model during
// training) decodes with the weights it has now. Close closes it with the
// model.
func (m *Model) Cached() (*Cached, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if m.cached == nil {
		c, err := NewCached(m.cfg, m.B, m.Params)
		if err != nil {
			return nil, err
		}
		m.cached = c
		return c, nil
	}
	return m.cached, m.cached.SetParams(m.Params)
}

// Close releases the machine, and the cached decoder's if Cached built one.
func (m *Model) Close() error {
	if err := m.check(); err != nil {
		return err
	}
	var err error
	if m.cached != nil {
		err = m.cached.Close()
		m.cached = nil
	}
	if cerr := m.VM.Close(); cerr != nil {
		return fmt.Errorf("model: close: %w", cerr)
	}
	return err
}

// NumParams returns the number of scalar parameters.
func (m *Model) NumParams() int {
	if m == nil {
		return 0
	}
	return numParams(m.Params)
}

// check reports a nil Model, or one no builder compiled.
func (m *Model) check() error {
	switch {
	case m == nil:
		return errors.New("model: nil model")
	case m.VM == nil || m.IDs == nil || m.Pad == nil:
		return errors.New("model: model has no machine: build it with Build or Load")
	}
	return nil
}

// numParams returns the number of scalar values of params.
func numParams(params []graph.Param) int {
	n := 0
	for _, p := range params {
		n += p.Node.Shape().TotalSize()
	}
	return n
}

// copyParams copies the value of every param of src into the param of dst
// of the same name and shape.
func copyParams(dst, src []graph.Param) error {
	if len(dst) != len(src) {
		return fmt.Errorf("model: params: %d given, the model has %d", len(src), len(dst))
	}
	for i, p := range dst {
		if err := graph.CheckNode(src[i].Node, "param "+src[i].Name); err != nil {
			return fmt.Errorf("model: params: %w", err)
		}
		from, ok1 := src[i].Node.Value().(*tensor.Dense)
		to, ok2 := p.Node.Value().(*tensor.Dense)
		switch {
		case !ok1 || !ok2 || src[i].Name != p.Name || !from.Shape().Eq(to.Shape()):
			return fmt.Errorf("model: params: param %d is %q, want %q of shape %v", i, src[i].Name, p.Name, p.Node.Shape())
		case from.Dtype() != to.Dtype():
			return fmt.Errorf("model: params: param %q is %v, the model's is %v: build both models with the same dtype (values are not converted)", p.Name, from.Dtype(), to.Dtype())
		}
		if err := tensor.Copy(to, from); err != nil {
			return fmt.Errorf("model: params: param %q: %w", p.Name, err)
		}
	}
	return nil
}

// run executes vm once and calls read, if not nil, before vm is reset,
// since values may alias buffers the next run reuses; what names the
// machine in errors ("" for a Model's own).
func run(vm G.VM, what string, read func() error) error {
	defer vm.Reset()
	if err := vm.RunAll(); err != nil {
		if what == "" {
			return fmt.Errorf("model: run: %w", err)
		}
		return fmt.Errorf("model: %s: run: %w", what, err)
	}
	if read == nil {
		return nil
	}
	return read()
}
