package infer

import (
	"errors"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// EncDecModel is an encoder–decoder (config.ArchEncDec) compiled once for
// batches of B prompts of up to Ss tokens, the source, and B targets of up
// to St tokens: SEP and the answer but its last token, which the decoder
// reads to predict the answer token by token.
type EncDecModel struct {
	B, Ss, St int
	DType     tensor.Dtype
	Model     *layers.EncoderDecoder
	Params    []graph.Param
	Inputs    *layers.EncDecInputs
	Logits    *G.Node // (B, St, Vocab)
	Weights   layers.EncDecWeights
	// Graph holds the nodes; a training model adds its cost before
	// compiling.
	Graph *G.ExprGraph
	VM    G.VM

	cfg    config.Config // what AssembleEncDec built, for the cache
	cached *CachedEncDec // built by the first Greedy, closed with the model
}

// AssembleEncDec builds the encoder–decoder of cfg (resolved, Arch
// ArchEncDec) for batches of b prompts as an uncompiled graph, sources and
// targets of up to cfg.Model.MaxLen tokens: the one encoder–decoder builder,
// which BuildEncDec compiles for inference and train.BuildEncDec for
// training.
func AssembleEncDec(cfg config.Config, b int) (*EncDecModel, error) {
	if err := checkArch(cfg, config.ArchEncDec, "AssembleEncDec", "Assemble"); err != nil {
		return nil, err
	}
	g, scope, err := newGraph(cfg)
	if err != nil {
		return nil, err
	}
	dt := scope.Dtype()
	ec := cfg.EncDec()
	model, err := layers.NewEncoderDecoder(scope, ec)
	if err != nil {
		return nil, err
	}
	m := &EncDecModel{B: b, Ss: ec.SrcMaxLen, St: ec.TgtMaxLen, DType: dt, Model: model, Params: model.Params(), Graph: g, cfg: cfg}
	if m.Inputs, err = layers.NewEncDecInputs(scope, ec, b, m.Ss, m.St); err != nil {
		return nil, err
	}
	in := m.Inputs
	if m.Logits, m.Weights, err = model.Forward(in.Src, in.SrcPad, in.Tgt, in.TgtPad, in.CrossPad); err != nil {
		return nil, err
	}
	return m, nil
}

// BuildEncDec builds and compiles the encoder–decoder of cfg (resolved)
// for inference on batches of b prompts, after checking its memory
// estimate as Build does. A decoder-only configuration is refused: Build
// builds it.
func BuildEncDec(cfg config.Config, b int) (*EncDecModel, error) {
	if err := checkArch(cfg, config.ArchEncDec, "BuildEncDec", "Build"); err != nil {
		return nil, err
	}
	if err := config.CheckMemory(cfg, b, cfg.Model.MaxLen, false); err != nil {
		return nil, err
	}
	m, err := AssembleEncDec(cfg, b)
	if err != nil {
		return nil, err
	}
	if m.VM, err = graph.NewMachine(m.Graph); err != nil {
		return nil, err
	}
	return m, nil
}

// LoadEncDec is LoadWith for an encoder–decoder checkpoint.
func LoadEncDec(dir string, b int, opts LoadOptions) (*EncDecModel, config.Config, data.Task, error) {
	ck, cfg, task, err := readCheckpoint(dir, config.ArchEncDec, b, opts)
	if err != nil {
		return nil, config.Config{}, nil, err
	}
	m, err := BuildEncDec(cfg, b)
	if err != nil {
		return nil, config.Config{}, nil, err
	}
	if err := checkpoint.LoadParams(m.Params, ck.Weights, checkpoint.File(dir, checkpoint.ModelFile)); err != nil {
		m.Close()
		return nil, config.Config{}, nil, err
	}
	return m, cfg, task, nil
}

// SetBatch binds sources and targets (row-major, B×Ss and B×St ids) with
// their lengths for the next run.
func (m *EncDecModel) SetBatch(src, srcLengths, tgt, tgtLengths []int) error {
	if err := m.check(); err != nil {
		return err
	}
	return m.Inputs.Set(src, srcLengths, tgt, tgtLengths)
}

// Run executes the machine once and calls read before it is reset.
func (m *EncDecModel) Run(read func() error) error {
	if err := m.check(); err != nil {
		return err
	}
	return run(m.VM, "", read)
}

// SetParams copies the values of params, those of a model of the same
// configuration, into m's.
func (m *EncDecModel) SetParams(params []graph.Param) error {
	if err := m.check(); err != nil {
		return err
	}
	return copyParams(m.Params, params)
}

// Close releases the machine.
func (m *EncDecModel) Close() error {
	if err := m.check(); err != nil {
		return err
	}
	if m.cached != nil {
		m.cached.Close()
	}
	return m.VM.Close()
}

// Cached returns the model's cached decoder (see CachedEncDec), built on
// first use and given the model's current parameters on every call.
func (m *EncDecModel) Cached() (*CachedEncDec, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if m.cached == nil {
		c, err := NewCachedEncDec(m.cfg, m.B, m.Params)
		if err != nil {
			return nil, err
		}
		m.cached = c
		return c, nil
	}
	return m.cached, m.cached.SetParams(m.Params)
}

// NumParams returns the number of scalar parameters.
func (m *EncDecModel) NumParams() int {
	if m == nil {
		return 0
	}
	return numParams(m.Params)
}

// check reports a nil EncDecModel, or one no builder compiled.
func (m *EncDecModel) check() error {
	if m == nil || m.VM == nil || m.Inputs == nil {
		return errors.New("infer: encoder-decoder has no machine: build it with BuildEncDec or LoadEncDec")
	}
	return nil
}

// Greedy decodes the answer of every prompt: the frame's prompt
// (task.Frame) goes to the encoder and the decoder starts from SEP, then
// reads each given answer token as it is and appends its most likely token
// at each target, with the key/value cache (Cached), which gives the tokens
// running the whole model again (NextLogits) gives. It returns whole
// answers, given tokens included.
func (m *EncDecModel) Greedy(task data.Task, prompts [][]int) ([][]int, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if task == nil {
		return nil, errors.New("infer: nil task")
	}
	frames, err := framesOf(task, prompts)
	if err != nil {
		return nil, err
	}
	srcs := make([][]int, len(frames))
	prefixes := make([][]int, len(frames))
	for i, f := range frames {
		srcs[i], prefixes[i] = f.Prompt, []int{task.Vocab().SEP()}
	}
	c, err := m.Cached()
	if err != nil {
		return nil, err
	}
	return fill(frames, prefixes, func(prefixes [][]int, steps []int) ([][]int, error) {
		out, _, err := c.Decode(srcs, prefixes, steps)
		return out, err
	})
}

// NextLogits runs the whole model on sources and target prefixes, any
// number of them, B at a time, and returns for each the logits after the
// target's last token: generation without the cache, the reference the
// cache is tested against.
func (m *EncDecModel) NextLogits(srcs, tgts [][]int) ([][]float64, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if len(srcs) != len(tgts) {
		return nil, fmt.Errorf("infer: %d sources and %d targets", len(srcs), len(tgts))
	}
	for i := range srcs {
		if len(srcs[i]) == 0 || len(srcs[i]) > m.Ss || len(tgts[i]) == 0 || len(tgts[i]) > m.St {
			return nil, fmt.Errorf("infer: source %d has %d tokens and target %d, want 1 to %d and 1 to %d", i, len(srcs[i]), len(tgts[i]), m.Ss, m.St)
		}
	}
	var out [][]float64
	for start := 0; start < len(srcs); start += m.B {
		end := min(start+m.B, len(srcs))
		rows, err := m.nextLogits(srcs[start:end], tgts[start:end])
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// nextLogits runs up to B sources and targets and returns, for each, the
// logits after the target's last token.
func (m *EncDecModel) nextLogits(srcs, tgts [][]int) ([][]float64, error) {
	src, tgt := make([]int, m.B*m.Ss), make([]int, m.B*m.St)
	srcLen, tgtLen := make([]int, m.B), make([]int, m.B)
	for i := range srcs {
		copy(src[i*m.Ss:], srcs[i])
		copy(tgt[i*m.St:], tgts[i])
		srcLen[i], tgtLen[i] = len(srcs[i]), len(tgts[i])
	}
	for i := len(srcs); i < m.B; i++ { // rows no prompt fills: one token each
		srcLen[i], tgtLen[i] = 1, 1
	}
	if err := m.SetBatch(src, srcLen, tgt, tgtLen); err != nil {
		return nil, err
	}
	v := m.Logits.Shape()[2]
	var out [][]float64
	err := m.Run(func() error {
		vals, err := graph.Float64s(m.Logits.Value()) // (B, St, V)
		if err != nil {
			return err
		}
		for i := range srcs {
			at := (i*m.St + len(tgts[i]) - 1) * v
			out = append(out, slices.Clone(vals[at:at+v]))
		}
		return nil
	})
	return out, err
}

// Evaluate decodes every example's prompt greedily and scores the answers,
// as Evaluate does: an example whose answer is not of the task's length is
// refused.
func (m *EncDecModel) Evaluate(task data.Task, examples []data.Example) (EvalResult, error) {
	if err := m.check(); err != nil {
		return EvalResult{}, err
	}
	if err := checkExamples(task, examples); err != nil {
		return EvalResult{}, err
	}
	got, err := m.Greedy(task, shown(examples))
	if err != nil {
		return EvalResult{}, err
	}
	return score(examples, got), nil
}
