package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/optim"
)

// Arch is the architecture a run trains, as config.json and --arch spell
// it.
type Arch string

// The architectures.
const (
	// ArchDecoder is the decoder-only model (the default for ""): prompt,
	// SEP and answer form one sequence, the answer predicted token by token.
	ArchDecoder Arch = "decoder"
	// ArchEncDec is the encoder–decoder: the prompt goes to the encoder, the
	// answer, after SEP, to the decoder, which cross-attends to the
	// encoder's output.
	ArchEncDec Arch = "encdec"
)

// String returns the name.
func (a Arch) String() string { return string(a) }

// OptimizerKind names an optimizer, as config.json and --optimizer spell
// it: optim.Kind.
type OptimizerKind = optim.Kind

// The optimizers train has.
const (
	// OptimizerAdam is Adam without weight decay.
	OptimizerAdam = optim.Adam
	// OptimizerAdamW is Adam with decoupled weight decay (Loshchilov &
	// Hutter), applied to the parameters Decay selects.
	OptimizerAdamW = optim.AdamW
)

// ParseOptimizerKind returns the OptimizerKind named s.
func ParseOptimizerKind(s string) (OptimizerKind, error) {
	switch k := OptimizerKind(s); k {
	case OptimizerAdam, OptimizerAdamW:
		return k, nil
	}
	return "", fmt.Errorf("config: unknown optimizer %q: want %q or %q: %w", s, OptimizerAdam, OptimizerAdamW, ErrInvalid)
}

// DecayRule says which parameters AdamW decays, as config.json and
// --decay spell it: optim.DecayRule.
type DecayRule = optim.DecayRule

// The decay rules.
const (
	// DecayWeights (the default for "") decays the projection weights
	// only: minGPT's split.
	DecayWeights = optim.DecayWeights
	// DecayMatrices decays every parameter of two dimensions or more, the
	// embedding tables too: nanoGPT's configure_optimizers.
	DecayMatrices = optim.DecayMatrices
)

// Config is everything a training run depends on. It is saved as config.json
// in the run directory, so that eval, predict, attend and --resume rebuild the
// same model and task from the checkpoint alone. Its fields' tags, and those
// of the model's (layers.StackConfig), are the one schema of a run: json the
// key, flag and help the command-line flag, zero what a zero value stands
// for.
type Config struct {
	Task TaskSpec `json:"task"`
	// Arch is ArchDecoder (the default for "") or ArchEncDec.
	Arch Arch `json:"arch,omitempty" flag:"arch" group:"model" help:"architecture: decoder (decoder-only, the default) or encdec (the prompt to an encoder, the answer to a decoder that cross-attends to it)"`
	// Model is the decoder's configuration; Vocab and MaxLen are filled in
	// from the task.
	Model layers.StackConfig `json:"model"`
	// DType is the dtype of weights and activations: Float32 (the default,
	// also when empty) or Float64.
	DType DType `json:"dtype" flag:"dtype" group:"run" help:"float32 or float64"`
	// Matmul is how the float32 projections (every Linear layer: attention's
	// Q, K, V and output, the feed-forward, the head) multiply while
	// training: MatmulFloat32 (the default, also when empty, and then absent
	// from config.json) or MatmulBF16. It changes no weight's dtype.
	Matmul Matmul `json:"matmul,omitempty" flag:"matmul" group:"run" zero:"float32" help:"how the projections' matrix products multiply: float32, or bf16 (operands rounded to bf16, float32 sums, on AMX; needs a CPU with AMX-BF16 and --dtype float32)"`
	// Seed fixes initial weights, data and dropout: the same seed gives the
	// same losses, bit for bit.
	Seed uint64 `json:"seed" flag:"seed" group:"run" help:"seed of weights, data and dropout"`

	Batch int `json:"batch" flag:"batch" group:"run" help:"sequences per step"`
	Steps int `json:"steps" flag:"steps" group:"run" help:"training steps at most; with --resume, the run's new total, at least the checkpoint's step (the cosine decay is re-stretched to end there, so only the run's own --steps continues bit for bit)"`
	// LR is the peak learning rate, reached after Warmup steps and decayed
	// along a cosine to MinLR at Steps.
	LR        float64       `json:"lr" flag:"lr" group:"optimizer" help:"peak learning rate"`
	MinLR     float64       `json:"min_lr" flag:"min-lr" group:"optimizer" help:"learning rate at the end of the cosine decay"`
	Warmup    int           `json:"warmup" flag:"warmup" group:"optimizer" help:"linear warm-up steps, at most --steps; when not given, a tenth of --steps up to the task's own (50; chars 100), so that a short run needs no --warmup"`
	Optimizer OptimizerKind `json:"optimizer" flag:"optimizer" group:"optimizer" help:"adam or adamw"`
	// WeightDecay applies to AdamW only, where it must be positive.
	WeightDecay float64 `json:"weight_decay" flag:"weight-decay" group:"optimizer" help:"AdamW weight decay"`
	// Decay is which parameters AdamW decays: DecayWeights (the default
	// for "", and then absent from config.json) or DecayMatrices.
	Decay DecayRule `json:"decay,omitempty" flag:"decay" group:"optimizer" zero:"weights" help:"which parameters AdamW decays: weights (the projection weights, minGPT's rule) or matrices (every parameter of 2+ dimensions, the embeddings too: nanoGPT's)"`
	// Beta1 and Beta2 are Adam's decay rates of the first and second moment
	// estimates, in (0, 1); 0 means the defaults 0.9 and 0.999, and the
	// field is then absent from config.json (nanoGPT uses 0.99 for Beta2).
	Beta1 float64 `json:"beta1,omitempty" flag:"beta1" group:"optimizer" zero:"0.9" help:"Adam's decay rate of the first moment"`
	Beta2 float64 `json:"beta2,omitempty" flag:"beta2" group:"optimizer" zero:"0.999" help:"Adam's decay rate of the second moment (nanoGPT uses 0.99)"`
	// ClipNorm is the global gradient norm above which gradients are scaled
	// down; 0 disables clipping.
	ClipNorm float64 `json:"clip_norm" flag:"clip" group:"optimizer" help:"global gradient-norm clip (0: off)"`

	// EvalEvery is how often (in steps) the held-out set is decoded.
	EvalEvery int `json:"eval_every" flag:"eval-every" group:"run" help:"steps between held-out evaluations"`
	// TestSize is the number of held-out examples, never seen in training.
	TestSize int `json:"test_size" flag:"test-size" group:"run" help:"held-out examples, never trained on"`
	// TargetExact stops training early once exact match on the held-out set
	// reaches it; 0 never stops early.
	TargetExact float64 `json:"target_exact" flag:"target-exact" group:"run" help:"stop once held-out exact match reaches this (0: never)"`
	// CheckpointEvery is how often a checkpoint is written; the last step
	// always writes one.
	CheckpointEvery int `json:"checkpoint_every" flag:"checkpoint-every" group:"run" help:"steps between checkpoints"`
}

// TaskSpec names a data task and its parameters.
type TaskSpec struct {
	Name   string          `json:"name"`
	Params data.TaskConfig `json:"params"`
}

// Default is what `qkv train` runs without flags: a small pre-LN
// decoder on minGPT's sort demo (6 symbols over an alphabet of 3).
func Default() Config {
	return Config{
		Task: TaskSpec{Name: "sort", Params: data.DefaultConfig("sort")},
		Model: layers.StackConfig{
			Dim: 48, Heads: 4, Layers: 2, Hidden: 192,
			BlockOptions: layers.BlockOptions{Activation: layers.ActivationGELU, Positions: layers.PositionsLearned, Bias: true},
		},
		DType:           Float32,
		Seed:            1,
		Batch:           64,
		Steps:           2000,
		LR:              3e-3,
		MinLR:           3e-4,
		Warmup:          50,
		Optimizer:       "adamw",
		WeightDecay:     0.01,
		ClipNorm:        1,
		EvalEvery:       25,
		TestSize:        200,
		TargetExact:     1,
		CheckpointEvery: 500,
	}
}

// Matmul names how the projections multiply, as config.json and --matmul
// spell it.
type Matmul string

// The matrix products a run may train with.
const (
	// MatmulFloat32 (the default for "") multiplies float32 operands.
	MatmulFloat32 Matmul = "float32"
	// MatmulBF16 rounds the operands to bf16 and sums their products in
	// float32, on AMX (graph.UseBF16Linear).
	MatmulBF16 Matmul = "bf16"
)

// String returns the name as config.json spells it.
func (m Matmul) String() string { return string(m) }

// DType names a float dtype, as config.json and --dtype spell it.
type DType string

// The dtypes a model may have.
const (
	Float32 DType = "float32"
	Float64 DType = "float64"
)

// String returns the name.
func (d DType) String() string { return string(d) }

// Tensor returns the tensor dtype d names; empty means Float32.
func (d DType) Tensor() (tensor.Dtype, error) {
	switch d {
	case Float32, "":
		return tensor.Float32, nil
	case Float64:
		return tensor.Float64, nil
	}
	return tensor.Dtype{}, fmt.Errorf("config: dtype %q: want %s or %s: %w", string(d), Float32, Float64, ErrInvalid)
}

// ParseDType returns the DType named s.
func ParseDType(s string) (DType, error) {
	d := DType(s)
	if _, err := d.Tensor(); err != nil || s == "" {
		return "", fmt.Errorf("config: dtype %q: want %s or %s: %w", s, Float32, Float64, ErrInvalid)
	}
	return d, nil
}

// MaxLayers, MaxTestSize, MaxEvalBatch and MaxEvalTokens bound
// configurations: more blocks than MaxLayers would take long to build
// whatever their width, a held-out set beyond MaxTestSize long to draw and
// decode, and evaluation runs batches of at most MaxEvalBatch held-out
// prompts and MaxEvalTokens positions (EvalBatch).
const (
	MaxLayers     = 1024
	MaxTestSize   = 100000
	MaxEvalBatch  = 128
	MaxEvalTokens = 1 << 13
)

// EvalBatch is the number of held-out examples evaluated at once for c
// (resolved): all of them up to MaxEvalBatch, and fewer for long sequences,
// so that the evaluation model's activations stay within MaxEvalTokens
// positions: 128 rows at 64 positions, 31 at a context of 256 (whose 128
// rows took 3.4 GB of peak RSS in a training run), at least one.
func (c Config) EvalBatch() int {
	return max(1, min(c.TestSize, MaxEvalBatch, MaxEvalTokens/max(c.Model.MaxLen, 1)))
}

// ErrInvalid is matched, with errors.Is, by every *Error: a configuration
// that Validate or Resolve refuses. It is this package's own sentinel rather
// than layers.ErrConfig because most fields (lr, steps, task) are not a
// layer's; an *Error about the model (Field "model") matches
// layers.ErrConfig too, through the layers error it carries.
var ErrInvalid = errors.New("config: invalid configuration")

// Error is a Config value that is invalid, naming it by its JSON path
// ("lr", "model.dim", "task.params.min_length"), so that a command line can
// name the flag that set it. Every error of Validate and of Resolve's checks
// is a *Error; find it with errors.As, or test for one with
// errors.Is(err, ErrInvalid).
type Error struct {
	// Field is the JSON path of the offending value.
	Field string
	// With lists other fields the problem involves, e.g. the other side of
	// a conflict or a bound, by JSON path.
	With []string
	// Problem says what is wrong, e.g. "must be a finite number > 0, got
	// NaN"; Error writes it after the field.
	Problem string
	// cause is the error Problem was taken from, if any (the layers' error
	// of a model the layers refuse), for errors.Is and errors.As.
	cause error
}

// Is reports whether target is ErrInvalid, so that errors.Is(err,
// ErrInvalid) holds for every *Error.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the error the problem was taken from, or nil.
func (e *Error) Unwrap() error { return e.cause }

// Error reads "config: <field> (with <others>) <problem>".
func (e *Error) Error() string {
	s := "config: " + e.Field
	if len(e.With) > 0 {
		s += " (with " + strings.Join(e.With, ", ") + ")"
	}
	return s + " " + e.Problem
}

func cfgErr(field, format string, args ...any) *Error {
	return &Error{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// checkFloat checks that v is a finite number within [lo, hi] (hi excluded when
// openHi), described as the bounds' text in the error.
func checkFloat(field string, v, lo, hi float64, openHi bool, bounds string) error {
	ok := !math.IsNaN(v) && !math.IsInf(v, 0) && v >= lo && (v < hi || (!openHi && v == hi))
	if !ok {
		return cfgErr(field, "must be a finite number %s, got %v", bounds, v)
	}
	return nil
}

func checkInt(field string, v, lo, hi int) error {
	if v < lo || v > hi {
		if hi == math.MaxInt {
			if lo == 1 {
				return cfgErr(field, "must be positive, got %d", v)
			}
			return cfgErr(field, "must be an integer >= %d, got %d", lo, v)
		}
		return cfgErr(field, "must be an integer in [%d, %d], got %d", lo, hi, v)
	}
	return nil
}

// Validate checks every field of c that can be checked without building
// the task: sizes, rates and names, and that every float is finite (so that
// config.json can hold it). Its errors are *Error. Resolve calls it.
func (c Config) Validate() error {
	if !slices.Contains(data.Names(), c.Task.Name) {
		return cfgErr("task.name", "unknown task %q (known tasks: %s)", c.Task.Name, strings.Join(data.Names(), ", "))
	}
	p := c.Task.Params
	for _, f := range []struct {
		name string
		v    int
	}{{"length", p.Length}, {"min_length", p.MinLength}, {"max_length", p.MaxLength}, {"alphabet", p.Alphabet},
		{"digits", p.Digits}, {"pairs", p.Pairs}, {"min_pairs", p.MinPairs}, {"max_pairs", p.MaxPairs},
		{"keys", p.Keys}, {"values", p.Values}, {"context", p.Context}, {"chars", p.Chars}, {"unknown", p.Unknown}} {
		if f.v < 0 {
			return cfgErr("task.params."+f.name, "must not be negative, got %d", f.v)
		}
	}
	if c.Task.Name == "chars" {
		if err := checkFloat("task.params.val_fraction", p.ValFraction, 0, 1, true, "in (0, 1)"); err != nil || p.ValFraction == 0 {
			return cfgErr("task.params.val_fraction", "must be a finite number in (0, 1), got %v", p.ValFraction)
		}
		if c.Arch == ArchEncDec {
			return &Error{Field: "arch", With: []string{"task.name"},
				Problem: fmt.Sprintf("must be %q for task chars, got %q: a language model reads one text, with no prompt for an encoder", ArchDecoder, c.Arch)}
		}
		if c.TargetExact != 0 {
			return &Error{Field: "target_exact", With: []string{"task.name"},
				Problem: fmt.Sprintf("must be 0 for task chars, got %v: a language model is scored by its validation loss, not by exact answers", c.TargetExact)}
		}
	}
	if _, err := c.DType.Tensor(); err != nil {
		return cfgErr("dtype", "must be float32 or float64, got %q", c.DType)
	}
	switch c.Matmul {
	case "", MatmulFloat32:
	case MatmulBF16:
		if c.DType == Float64 {
			return &Error{Field: "matmul", With: []string{"dtype"},
				Problem: fmt.Sprintf("must be %q for dtype %q, got %q: bf16 products are for float32 weights", MatmulFloat32, Float64, c.Matmul)}
		}
	default:
		return cfgErr("matmul", "must be %s or %s, got %q", MatmulFloat32, MatmulBF16, c.Matmul)
	}
	m := c.Model
	if err := checkInt("model.layers", m.Layers, 1, MaxLayers); err != nil {
		return err
	}
	switch c.Arch {
	case "", ArchDecoder, ArchEncDec:
	default:
		return cfgErr("arch", "unknown architecture %q: want %q or %q", c.Arch, ArchDecoder, ArchEncDec)
	}
	if m.CausalEncoder && c.Arch != ArchEncDec {
		return &Error{Field: "model.causal_encoder", With: []string{"arch"},
			Problem: fmt.Sprintf("is for arch %q, got arch %q: a decoder-only model has no encoder, and its attention is causal already", ArchEncDec, c.ArchOrDefault())}
	}
	if m.TieEmbeddings && c.Arch == ArchEncDec {
		return &Error{Field: "model.tie_embeddings", With: []string{"arch"},
			Problem: fmt.Sprintf("is for a decoder-only model, got arch %q: the encoder-decoder's head is not tied to its target embedding", ArchEncDec)}
	}
	// The rest of the model is the layers' to judge: they say which key is
	// wrong (layers.FieldError), and the vocabulary and longest sequence,
	// which Resolve takes from the task, stand in at 1 until then.
	if m.Vocab == 0 {
		m.Vocab = 1
	}
	if m.MaxLen == 0 {
		m.MaxLen = 1
	}
	if err := m.Validate(); err != nil {
		return modelError(err)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"batch", c.Batch}, {"steps", c.Steps}, {"eval_every", c.EvalEvery}, {"checkpoint_every", c.CheckpointEvery}} {
		if err := checkInt(f.name, f.v, 1, math.MaxInt); err != nil {
			return err
		}
	}
	if err := checkInt("test_size", c.TestSize, 1, MaxTestSize); err != nil {
		return err
	}
	if c.Warmup < 0 || c.Warmup > c.Steps {
		return &Error{Field: "warmup", With: []string{"steps"},
			Problem: fmt.Sprintf("must be an integer in [0, steps=%d], got %d", c.Steps, c.Warmup)}
	}
	if err := checkFloat("lr", c.LR, math.SmallestNonzeroFloat64, math.MaxFloat64, false, "> 0"); err != nil {
		return err
	}
	if err := checkFloat("min_lr", c.MinLR, 0, math.MaxFloat64, false, ">= 0"); err != nil {
		return err
	}
	if c.MinLR > c.LR {
		return &Error{Field: "min_lr", With: []string{"lr"},
			Problem: fmt.Sprintf("must not exceed lr %v, got %v", c.LR, c.MinLR)}
	}
	switch c.Optimizer {
	case OptimizerAdam, OptimizerAdamW:
	default:
		return cfgErr("optimizer", "unknown optimizer %q: want %q or %q", c.Optimizer, OptimizerAdam, OptimizerAdamW)
	}
	if err := checkFloat("weight_decay", c.WeightDecay, 0, math.MaxFloat64, false, ">= 0"); err != nil {
		return err
	}
	switch c.Decay {
	case "", DecayWeights, DecayMatrices:
	default:
		return cfgErr("decay", "unknown decay rule %q: want %q (projection weights, the default) or %q (every parameter of 2+ dimensions, nanoGPT's)", c.Decay, DecayWeights, DecayMatrices)
	}
	// The optimizer reads a zero decay as its default: refuse it rather than
	// train with a decay config.json does not show.
	if c.Optimizer == OptimizerAdamW && c.WeightDecay == 0 {
		return &Error{Field: "weight_decay", With: []string{"optimizer"},
			Problem: fmt.Sprintf("must be > 0 with %q, got 0 (for no decay use %q)", OptimizerAdamW, OptimizerAdam)}
	}
	for _, b := range []struct {
		field string
		v     float64
	}{{"beta1", c.Beta1}, {"beta2", c.Beta2}} {
		if err := checkFloat(b.field, b.v, 0, 1, true, "in [0, 1) (0: the default)"); err != nil {
			return err
		}
	}
	if err := checkFloat("clip_norm", c.ClipNorm, 0, math.MaxFloat64, false, ">= 0 (0: off)"); err != nil {
		return err
	}
	if err := checkFloat("target_exact", c.TargetExact, 0, 1, false, "in [0, 1] (0: never stop early)"); err != nil {
		return err
	}
	return nil
}

// taskFields matches the names of data.TaskConfig's fields in the data
// package's error messages, which name the parameter at fault first.
var taskFields = regexp.MustCompile(`\b(min_length|max_length|length|alphabet|digits|min_pairs|max_pairs|pairs|keys|values|queries|data|context|val_fraction|sha256)\b`)

// taskError turns an error of data.New into a *Error naming the first
// task parameter its message mentions (and the others it mentions in With).
func taskError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "data: ")
	names := taskFields.FindAllString(msg, -1)
	e := &Error{Field: "task.params", Problem: msg}
	for _, n := range names {
		f := "task.params." + n
		switch {
		case e.Field == "task.params":
			e.Field = f
		case f != e.Field && !slices.Contains(e.With, f):
			e.With = append(e.With, f)
		}
	}
	return e
}

// New builds the task t names, with its parameters checked: its error is
// an *Error naming the parameter at fault first and the others its problem
// mentions in With.
func (t TaskSpec) New() (data.Task, error) {
	task, err := data.New(t.Name, t.Params)
	if err != nil {
		return nil, taskError(err)
	}
	return task, nil
}

// Resolve validates c, builds its task and fills the model's Vocab and MaxLen
// from it. Besides Validate's checks it checks the task's parameters, that
// the held-out set leaves prompts to train on, and that the model is one
// the layers can build (without building it: memory is checked where models
// are built, by model.Build). Its errors are *Error.
func (c *Config) Resolve() (data.Task, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	task, err := c.Task.New()
	if err != nil {
		return nil, err
	}
	c.Task.Params = task.Params()
	if c.Arch == "" {
		c.Arch = ArchDecoder // named, so that --arch decoder equals it
	}
	c.Model.Vocab = task.Vocab().Size()
	c.Model.MaxLen = task.MaxLen() - 1
	if data.IsLanguageModel(task) {
		// The held-out set is the end of the text, which the task checked
		// can hold a window; any number of windows can be taken from it,
		// and the text is not read until they are (a checkpoint's model
		// needs its recorded vocabulary alone).
		if c.TestSize > data.MaxTestSize {
			return nil, cfgErr("test_size", "must be at most %d validation windows, got %d", data.MaxTestSize, c.TestSize)
		}
		if err := validateModel(*c); err != nil {
			return nil, err
		}
		return task, nil
	}
	if space := task.NumPrompts(); float64(c.TestSize) >= space {
		return nil, &Error{Field: "test_size", With: []string{"task.params"},
			Problem: fmt.Sprintf("a held-out set of %d prompts leaves none to train on: task %s (%v) has only %.0f distinct prompts", c.TestSize, c.Task.Name, c.Task.Params, space)}
	}
	// Drawing the held-out set is the one complete check that it can be
	// drawn (some prompts may never be held out); it costs test_size draws.
	if _, err := data.NewStream(task, c.Seed, c.TestSize); err != nil {
		return nil, &Error{Field: "test_size", With: []string{"task.params"}, Problem: strings.TrimPrefix(err.Error(), "data: ")}
	}
	if err := validateModel(*c); err != nil {
		return nil, err
	}
	return task, nil
}

// validateModel asks the layers whether c.Model (resolved) is a model they
// can build: layers.StackConfig.Validate is the one statement of what a
// model configuration may be, and it allocates nothing.
func validateModel(c Config) error {
	if err := c.Model.Validate(); err != nil {
		return modelError(err)
	}
	if c.Arch == ArchEncDec {
		return modelError(c.EncDec().Validate())
	}
	return nil
}

// modelError is the *Error of a model the layers refuse, nil for nil: at
// the key of the "model" object their layers.FieldError names, or at
// "model" for the model as a whole. An encoder–decoder's src_/tgt_ sizes
// and enc_/dec_ depths are the model's vocab, max_len and layers, from
// which EncDec derives them.
func modelError(err error) error {
	if err == nil {
		return nil
	}
	e := &Error{Field: "model", Problem: err.Error(), cause: err}
	var fe *layers.FieldError
	if !errors.As(err, &fe) || fe.Field == "" {
		return e
	}
	key := func(k string) string {
		for _, p := range []string{"src_", "tgt_", "enc_", "dec_"} {
			k = strings.TrimPrefix(k, p)
		}
		return "model." + k
	}
	e.Field, e.Problem = key(fe.Field), fe.Error() // the key says where: the layer's own words say what
	for _, w := range fe.With {
		e.With = append(e.With, key(w))
	}
	return e
}

// EncDec returns the encoder–decoder configuration of c (resolved): the
// model's width, heads, feed-forward and options for both halves, Layers
// blocks in each, the task's vocabulary for source and target, and its
// longest input (MaxLen) as the longest source and target.
func (c Config) EncDec() layers.EncDecConfig {
	m := c.Model
	return layers.EncDecConfig{
		SrcVocab: m.Vocab, SrcMaxLen: m.MaxLen, TgtVocab: m.Vocab, TgtMaxLen: m.MaxLen,
		Dim: m.Dim, Heads: m.Heads, Hidden: m.Hidden, EncLayers: m.Layers, DecLayers: m.Layers,
		BlockOptions:  m.BlockOptions,
		LayerKinds:    m.LayerKinds,
		CausalEncoder: m.CausalEncoder,
		Init:          m.Init,
	}
}

// ArchOrDefault returns c's architecture, ArchDecoder for "".
func (c Config) ArchOrDefault() Arch {
	if c.Arch == "" {
		return ArchDecoder
	}
	return c.Arch
}

// RequireArch returns an error unless c's architecture is want, the one
// the function fn builds; other names the function that builds c's. A
// builder checks it because it would otherwise build its own architecture
// from c without a word.
func (c Config) RequireArch(want Arch, fn, other string) error {
	if got := c.ArchOrDefault(); got != want {
		return fmt.Errorf("%s: the configuration's arch is %q, and %s builds %q: use %s", fn, got, fn, want, other)
	}
	return nil
}

// Marshal returns c as indented JSON, the content of config.json.
func Marshal(c Config) ([]byte, error) { return json.MarshalIndent(c, "", "  ") }

// Unmarshal parses config.json. It checks the JSON only; Config.Resolve
// checks the values.
func Unmarshal(b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("config: config.json: %w", err)
	}
	return c, nil
}
