package optim

import (
	"errors"
	"fmt"
	"math"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/gemm/par"
	"github.com/qkv-dev/qkv/internal/vec"
	"github.com/qkv-dev/qkv/train/checkpoint"
)

// Kind names an optimizer, as config.json and --optimizer spell it.
type Kind string

// The optimizers of this package.
const (
	// Adam is Adam without weight decay.
	Adam Kind = "adam"
	// AdamW is Adam with decoupled weight decay (Loshchilov & Hutter),
	// applied to the parameters its DecayRule selects.
	AdamW Kind = "adamw"
)

// String returns the name.
func (k Kind) String() string { return string(k) }

// DecayRule says which parameters AdamW decays, as config.json and --decay
// spell it.
type DecayRule string

// The decay rules.
const (
	// DecayWeights decays the projection weights only (graph.RoleWeight):
	// minGPT's split.
	DecayWeights DecayRule = "weights"
	// DecayMatrices decays every parameter of two dimensions or more, the
	// embedding tables too: nanoGPT's configure_optimizers.
	DecayMatrices DecayRule = "matrices"
)

// String returns the name.
func (r DecayRule) String() string { return string(r) }

// PyTorch's Adam and AdamW defaults, for callers that want them (the
// command line's flag defaults, config.OptimizerFor for a configuration
// that leaves a field at zero). Config never fills them in by itself.
const (
	// DefaultBeta1 is the default decay rate of the first moment.
	DefaultBeta1 = 0.9
	// DefaultBeta2 is the default decay rate of the second moment.
	DefaultBeta2 = 0.999
	// DefaultEps is the default denominator term.
	DefaultEps = 1e-8
	// DefaultWeightDecay is PyTorch's default decay of AdamW (minGPT
	// trains with 0.1).
	DefaultWeightDecay = 0.01
)

// Names of the optimizer state tensors: "adam.m.<param>" and
// "adam.v.<param>". They share one prefix so that a checkpoint can tell
// optimizer state from parameters by name.
const (
	stateFirstMoment  = "adam.m."
	stateSecondMoment = "adam.v."
)

// Config is an optimizer's complete settings. Its fields are unexported so
// that a Config is whole or invalid: it comes from NewAdam or NewAdamW,
// which take every setting and reject zero where zero would have meant
// "default", or from config.OptimizerFor, which maps a training
// configuration's every optimizer field. The zero Config is invalid (New
// refuses it): a hand-built value cannot silently drop Beta1, Beta2 or the
// decay rule.
type Config struct {
	kind         Kind
	beta1, beta2 float64
	eps          float64
	weightDecay  float64
	decay        DecayRule
}

// NewAdam returns the settings of Adam without weight decay: beta1 and
// beta2 are the decay rates of the first and second moment estimates, in
// (0, 1), and eps, positive and finite, is added to the denominator
// (PyTorch's defaults are DefaultBeta1, DefaultBeta2 and DefaultEps).
func NewAdam(beta1, beta2, eps float64) (Config, error) {
	c := Config{kind: Adam, beta1: beta1, beta2: beta2, eps: eps}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// NewAdamW returns the settings of AdamW: beta1, beta2 and eps as for
// NewAdam, weightDecay the decoupled decay rate, positive and finite (for
// no decay use NewAdam), and decay the rule selecting the decayed
// parameters, DecayWeights or DecayMatrices.
func NewAdamW(beta1, beta2, eps, weightDecay float64, decay DecayRule) (Config, error) {
	c := Config{kind: AdamW, beta1: beta1, beta2: beta2, eps: eps, weightDecay: weightDecay, decay: decay}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Kind returns Adam or AdamW ("" for the invalid zero Config).
func (c Config) Kind() Kind { return c.kind }

// Beta1 returns the decay rate of the first moment estimate.
func (c Config) Beta1() float64 { return c.beta1 }

// Beta2 returns the decay rate of the second moment estimate.
func (c Config) Beta2() float64 { return c.beta2 }

// Eps returns the term added to the denominator.
func (c Config) Eps() float64 { return c.eps }

// WeightDecay returns AdamW's decoupled decay rate; 0 for Adam.
func (c Config) WeightDecay() float64 { return c.weightDecay }

// Decay returns the rule selecting the parameters AdamW decays; "" for
// Adam, which decays none.
func (c Config) Decay() DecayRule { return c.decay }

// String gives every setting, for logs, e.g. "adamw(beta1=0.9
// beta2=0.999 eps=1e-08 weight_decay=0.1 decay=weights)".
func (c Config) String() string {
	s := fmt.Sprintf("%s(beta1=%v beta2=%v eps=%v", c.kind, c.beta1, c.beta2, c.eps)
	if c.kind == AdamW {
		s += fmt.Sprintf(" weight_decay=%v decay=%s", c.weightDecay, c.decay)
	}
	return s + ")"
}

// Validate reports whether c describes a usable optimizer. The zero Config
// is not one: it names no kind.
func (c Config) Validate() error {
	switch c.kind {
	case Adam, AdamW:
	case "":
		return errors.New("optim: the optimizer config is empty: make it with NewAdam, NewAdamW or config.OptimizerFor")
	default:
		return fmt.Errorf("optim: unknown kind %q: want %q or %q", c.kind, Adam, AdamW)
	}
	if !(c.beta1 > 0 && c.beta1 < 1) {
		return fmt.Errorf("optim: beta1 %v is outside (0, 1)", c.beta1)
	}
	if !(c.beta2 > 0 && c.beta2 < 1) {
		return fmt.Errorf("optim: beta2 %v is outside (0, 1)", c.beta2)
	}
	if !(c.eps > 0) || math.IsInf(c.eps, 1) {
		return fmt.Errorf("optim: eps %v must be positive and finite", c.eps)
	}
	if c.kind == Adam {
		if c.weightDecay != 0 || c.decay != "" {
			return fmt.Errorf("optim: %q has no weight decay (weight decay %v, decay rule %q)", Adam, c.weightDecay, c.decay)
		}
		return nil
	}
	if !(c.weightDecay > 0) || math.IsInf(c.weightDecay, 1) {
		return fmt.Errorf("optim: weight decay %v of %q must be positive and finite (for no decay use %q)", c.weightDecay, AdamW, Adam)
	}
	switch c.decay {
	case DecayWeights, DecayMatrices:
	default:
		return fmt.Errorf("optim: unknown decay rule %q: want %q or %q", c.decay, DecayWeights, DecayMatrices)
	}
	return nil
}

// Optimizer is Adam or AdamW over a fixed list of parameters, written here
// because gorgonia v0.9.18's NewAdamW never changes the weights. The update
// is computed in float64 for float32 and float64 parameters alike, and the
// moments are kept in float64 so that State and Restore round-trip exactly.
type Optimizer struct {
	cfg    Config
	params []graph.Param
	shapes []tensor.Shape
	decay  []bool      // whether AdamW decays params[i]
	m, v   [][]float64 // first and second moment estimates
	step   int         // updates applied so far
	bufs   []stepBufs  // reused by Step
	job    stepJob     // Step's work, shared over the cores
}

// stepBufs are the backing slices of one parameter and its gradient, of
// which exactly one pair (32 or 64) is set.
type stepBufs struct {
	p32, g32 []float32
	p64, g64 []float64
}

// errNilOptimizer is the error of a method called on a nil *Optimizer.
var errNilOptimizer = errors.New("optim: nil optimizer")

// New returns an optimizer with the settings cfg (NewAdam, NewAdamW,
// config.OptimizerFor) for params, with zero moments and step count 0. Every parameter must have a unique non-empty name and a float32
// or float64 *tensor.Dense value. Gradients are read from p.Node.Grad() at
// each Step: G.Grad's gradient nodes after a run on a graph.Machine, or the
// dual values of a tape machine made with G.BindDualValues(params...).
func New(cfg Config, params []graph.Param) (*Optimizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, errors.New("optim: no parameters to optimize")
	}
	o := &Optimizer{
		cfg:    cfg,
		params: slices.Clone(params),
		shapes: make([]tensor.Shape, len(params)),
		decay:  make([]bool, len(params)),
		m:      make([][]float64, len(params)),
		v:      make([][]float64, len(params)),
		bufs:   make([]stepBufs, len(params)),
	}
	seen := make(map[string]bool, len(params))
	for i, p := range params {
		if p.Name == "" {
			return nil, fmt.Errorf("optim: parameter %d has no name", i)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("optim: parameter name %q is used twice", p.Name)
		}
		seen[p.Name] = true
		if p.Node == nil {
			return nil, fmt.Errorf("optim: parameter %q has no node", p.Name)
		}
		d, ok := p.Node.Value().(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("optim: parameter %q: value is %T, want a *tensor.Dense", p.Name, p.Node.Value())
		}
		if _, _, err := floatData(d); err != nil {
			return nil, fmt.Errorf("optim: parameter %q: %w", p.Name, err)
		}
		o.shapes[i] = d.Shape().Clone()
		o.decay[i] = o.cfg.kind == AdamW && decays(p, len(o.shapes[i]), o.cfg.decay)
		n := o.shapes[i].TotalSize()
		o.m[i] = make([]float64, n)
		o.v[i] = make([]float64, n)
		o.job.elements += n
		for lo := 0; lo < n; lo += stepChunk {
			o.job.chunks = append(o.job.chunks, chunk{param: i, lo: lo, hi: min(lo+stepChunk, n)})
		}
	}
	o.job.o = o
	o.job.bad = make([]int, len(o.job.chunks))
	return o, nil
}

// decays reports whether AdamW applies weight decay to a parameter of dims
// dimensions under rule. DecayWeights decays the
// projection weights (graph.RoleWeight) only, never biases, LayerNorm gains
// and biases, nor embeddings, whose rows are pulled to zero when their
// token is rare: minGPT's split, decided by the role the layers gave each
// parameter rather than by its name or rank; a parameter of one's own
// without a role (graph.RoleNone) is not decayed. DecayMatrices is
// nanoGPT's rule, every parameter of two dimensions or more: the weights
// and the embedding tables.
func decays(p graph.Param, dims int, rule DecayRule) bool {
	if rule == DecayMatrices {
		return dims >= 2
	}
	return p.Role == graph.RoleWeight
}

// Config returns the settings in use, for logs and checkpoint metadata.
func (o *Optimizer) Config() Config {
	if o == nil {
		return Config{}
	}
	return o.cfg
}

// Decayed returns the names of the parameters AdamW decays, in parameter
// order (none for Adam), so that a caller can see what its DecayRule
// selected.
func (o *Optimizer) Decayed() []string {
	if o == nil {
		return nil
	}
	var out []string
	for i, p := range o.params {
		if o.decay[i] {
			out = append(out, p.Name)
		}
	}
	return out
}

// StepCount returns the number of updates applied so far, which sets the bias
// correction of the next one; checkpoints store it next to State.
func (o *Optimizer) StepCount() int {
	if o == nil {
		return 0
	}
	return o.step
}

// Step applies one Adam or AdamW update with learning rate lr to every
// parameter, in place, from the gradients p.Node.Grad() hold now:
//
//	m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g²
//	p = p (1 - lr wd) - lr/(1-b1^t) · m / (sqrt(v)/sqrt(1-b2^t) + eps)
//
// as PyTorch's AdamW computes it (wd = 0 for Adam and for parameters that
// are not decayed).
//
// Step then zeroes the gradients, as gorgonia's own solvers do: a tape
// machine made with G.BindDualValues adds each run's gradients to the dual
// values instead of overwriting them, so without this every step would see
// the sum of all gradients so far.
//
// All gradients are checked first: a missing or non-finite gradient returns
// an error naming the parameter and changes nothing (parameters, gradients,
// moments, step count). To skip such a batch and go on, call ZeroGrads.
func (o *Optimizer) Step(lr float64) error { return o.update(lr, true) }

// StepAfterNorm is Step for a loop that has just taken the gradients'
// norm: norm is what GradNorm or ClipGradNorm returned for params. When
// params are the optimizer's own, the same nodes in the same order, and
// norm is finite, every gradient is finite (GradNorm: a NaN or an infinity
// makes the norm NaN or +Inf; clipping scales by a finite factor at most
// 1), so Step's check, a pass over every gradient, is skipped; otherwise it
// is Step. The update is Step's, bit for bit.
func (o *Optimizer) StepAfterNorm(lr float64, params []graph.Param, norm float64) error {
	finite := !math.IsNaN(norm) && !math.IsInf(norm, 0)
	return o.update(lr, o == nil || !finite || !sameParams(o.params, params))
}

// sameParams reports whether a and b are the same nodes in the same order.
func sameParams(a, b []graph.Param) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Node != b[i].Node {
			return false
		}
	}
	return true
}

// update is Step, checking the gradients first only with check.
func (o *Optimizer) update(lr float64, check bool) error {
	if o == nil {
		return errNilOptimizer
	}
	if !(lr >= 0) || math.IsInf(lr, 1) {
		return fmt.Errorf("optim: learning rate %v must be finite and non-negative", lr)
	}
	for i, p := range o.params {
		b, err := o.buffers(i)
		if err != nil {
			return fmt.Errorf("optim: parameter %q: %w", p.Name, err)
		}
		o.bufs[i] = b
	}
	defer clear(o.bufs) // drop references to the graph's buffers
	if check {
		if err := o.job.run(false); err != nil {
			return err
		}
	}
	o.step++
	t := float64(o.step)
	o.job.lr = lr
	o.job.coef = vec.AdamCoef{
		Beta1:    o.cfg.beta1,
		Beta2:    o.cfg.beta2,
		Eps:      o.cfg.eps,
		StepSize: lr / (1 - math.Pow(o.cfg.beta1, t)),
		SqrtBC2:  math.Sqrt(1 - math.Pow(o.cfg.beta2, t)),
	}
	return o.job.run(true)
}

// stepChunk is the number of elements an item of Step takes: parameters are
// cut into chunks of it so that the update of a large one is shared over
// the cores and many small ones are not an item each.
const stepChunk = 1 << 14

// chunk is the elements [lo, hi) of parameter param.
type chunk struct{ param, lo, hi int }

// stepJob is Step's work over the cores (par.Run), an item per chunk: first
// finding non-finite gradients, then the update, which is elementwise, so
// chunks change nothing in the result.
type stepJob struct {
	o        *Optimizer
	chunks   []chunk
	elements int   // in all parameters
	update   bool  // the update, else the check
	bad      []int // the check's result: a chunk's first non-finite index, or -1
	lr       float64
	coef     vec.AdamCoef
}

// run runs the check, or with update the update, over every chunk. The
// check's error names the first non-finite gradient element, in parameter
// order, whichever worker found it.
func (j *stepJob) run(update bool) error {
	j.update = update
	par.Run(len(j.chunks), par.WorkersFor(j.elements), j)
	if update {
		return nil
	}
	for i, at := range j.bad {
		if at >= 0 {
			c := j.chunks[i]
			b := j.o.bufs[c.param]
			x := 0.0
			if b.g64 != nil {
				x = b.g64[at]
			} else {
				x = float64(b.g32[at])
			}
			return fmt.Errorf("optim: gradient of %q is not finite: element %d is %v", j.o.params[c.param].Name, at, x)
		}
	}
	return nil
}

func (j *stepJob) Item(_, i int) {
	c := j.chunks[i]
	b := j.o.bufs[c.param]
	var g32 []float32
	var g64 []float64
	if b.g64 != nil {
		g64 = b.g64[c.lo:c.hi]
	} else {
		g32 = b.g32[c.lo:c.hi]
	}
	if !j.update {
		j.bad[i] = -1
		if at, _, ok := firstNonFinite(g32, g64); !ok {
			j.bad[i] = c.lo + at
		}
		return
	}
	coef := j.coef
	coef.Keep = 1
	if j.o.decay[c.param] {
		coef.Keep = 1 - j.lr*j.o.cfg.weightDecay
	}
	// In float64 whatever the parameters' dtype, on internal/vec's
	// four-lane kernel.
	m, v := j.o.m[c.param][c.lo:c.hi], j.o.v[c.param][c.lo:c.hi]
	if b.p64 != nil {
		vec.Adam(b.p64[c.lo:c.hi], g64, m, v, coef)
	} else {
		vec.Adam(b.p32[c.lo:c.hi], g32, m, v, coef)
	}
	clear(g32)
	clear(g64)
}

// buffers returns the current backing slices of parameter i and of its
// gradient. They are looked up at every step because the machine owns them.
func (o *Optimizer) buffers(i int) (stepBufs, error) {
	p := o.params[i]
	n := o.shapes[i].TotalSize()
	var b stepBufs
	var err error
	if b.p32, b.p64, err = floatData(p.Node.Value()); err != nil {
		return b, fmt.Errorf("value: %w", err)
	}
	if l := len(b.p32) + len(b.p64); l != n {
		return b, fmt.Errorf("value has %d elements, the optimizer was made for shape %v (%d)", l, o.shapes[i], n)
	}
	gv, err := p.Node.Grad()
	if err != nil || gv == nil {
		return b, errors.New("no gradient: differentiate the cost with G.Grad and run the graph (graph.NewMachine) before Step")
	}
	if b.g32, b.g64, err = floatData(gv); err != nil {
		return b, fmt.Errorf("gradient: %w", err)
	}
	if (b.p32 == nil) != (b.g32 == nil) {
		return b, fmt.Errorf("gradient dtype %v differs from the parameter's %v", gv.Dtype(), p.Node.Value().Dtype())
	}
	if l := len(b.g32) + len(b.g64); l != n {
		return b, fmt.Errorf("gradient has %d elements, want %d", l, n)
	}
	return b, nil
}

// State returns copies of the moment estimates, two tensors per parameter in
// parameter order: "adam.m.<name>" then "adam.v.<name>", each of the
// parameter's shape and DType tensor.Float64, so that a checkpoint stores
// them without rounding. Save StepCount with them.
func (o *Optimizer) State() []checkpoint.NamedTensor {
	if o == nil {
		return nil
	}
	out := make([]checkpoint.NamedTensor, 0, 2*len(o.params))
	for i, p := range o.params {
		out = append(out,
			checkpoint.NamedTensor{Name: stateFirstMoment + p.Name, Shape: slices.Clone([]int(o.shapes[i])), DType: tensor.Float64, Data: slices.Clone(o.m[i])},
			checkpoint.NamedTensor{Name: stateSecondMoment + p.Name, Shape: slices.Clone([]int(o.shapes[i])), DType: tensor.Float64, Data: slices.Clone(o.v[i])},
		)
	}
	return out
}

// Restore replaces the moments and the step count with a state saved by
// State and StepCount, so that training continues bit for bit as if it had
// never stopped (the parameters themselves are restored separately). state
// must hold exactly the tensors State returns, in any order. Nothing changes
// unless all of them are present, known, of the right shape and length, and
// finite (second moments non-negative): a mismatched checkpoint is an error
// naming the tensor, not a silently reset optimizer. DType is not checked;
// Data is float64 in any case.
func (o *Optimizer) Restore(step int, state []checkpoint.NamedTensor) error {
	if o == nil {
		return errNilOptimizer
	}
	if step < 0 {
		return fmt.Errorf("optim: restore: step count %d is negative", step)
	}
	type slot struct {
		param  int
		second bool
	}
	slots := make(map[string]slot, 2*len(o.params))
	for i, p := range o.params {
		slots[stateFirstMoment+p.Name] = slot{i, false}
		slots[stateSecondMoment+p.Name] = slot{i, true}
	}
	m := make([][]float64, len(o.params))
	v := make([][]float64, len(o.params))
	for _, nt := range state {
		s, ok := slots[nt.Name]
		if !ok {
			return fmt.Errorf("optim: restore: unknown state tensor %q", nt.Name)
		}
		dst := &m[s.param]
		if s.second {
			dst = &v[s.param]
		}
		if *dst != nil {
			return fmt.Errorf("optim: restore: state tensor %q appears twice", nt.Name)
		}
		want := o.shapes[s.param]
		if !slices.Equal(nt.Shape, []int(want)) {
			return fmt.Errorf("optim: restore: state tensor %q has shape %v, want %v", nt.Name, nt.Shape, want)
		}
		if len(nt.Data) != want.TotalSize() {
			return fmt.Errorf("optim: restore: state tensor %q has %d values, want %d for shape %v", nt.Name, len(nt.Data), want.TotalSize(), want)
		}
		for j, x := range nt.Data {
			if math.IsNaN(x) || math.IsInf(x, 0) || (s.second && x < 0) {
				return fmt.Errorf("optim: restore: state tensor %q: element %d is %v", nt.Name, j, x)
			}
		}
		*dst = slices.Clone(nt.Data)
	}
	for i, p := range o.params {
		if m[i] == nil {
			return fmt.Errorf("optim: restore: state tensor %q is missing", stateFirstMoment+p.Name)
		}
		if v[i] == nil {
			return fmt.Errorf("optim: restore: state tensor %q is missing", stateSecondMoment+p.Name)
		}
	}
	o.m, o.v, o.step = m, v, step
	return nil
}

// floatData returns the backing slice of a float32 or float64 dense value
// (exactly one of the two results is non-nil), without copying, so that
// parameters and gradients can be updated in place. Dense.Data would return
// a scalar for a 0-d tensor; the typed accessors always return the slice.
func floatData(v G.Value) ([]float32, []float64, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, nil, fmt.Errorf("value is %T, want a *tensor.Dense", v)
	}
	if d.IsView() {
		return nil, nil, errors.New("value is a view; its backing array is not the tensor")
	}
	switch d.Dtype() {
	case tensor.Float32:
		return nonNil(d.Float32s()), nil, nil
	case tensor.Float64:
		return nil, nonNil(d.Float64s()), nil
	default:
		return nil, nil, fmt.Errorf("dtype %v is not float32 or float64", d.Dtype())
	}
}

// nonNil keeps an empty slice distinguishable from "not this dtype".
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// firstNonFinite returns the index and value of the first NaN or infinite
// element of whichever slice is set, and ok = false if there is one.
//
// A sum of squares is finite when every element is, so one vector dot
// product (internal/vec) clears a chunk at the speed of memory; only a
// chunk whose sum is not finite (a NaN or an infinity in it, or squares
// that overflow) is searched element by element.
func firstNonFinite(f32 []float32, f64 []float64) (int, float64, bool) {
	if s := float64(vec.Dot(f32, f32)) + vec.Dot(f64, f64); !math.IsNaN(s) && !math.IsInf(s, 0) {
		return 0, 0, true
	}
	for j, x := range f32 {
		if y := float64(x); math.IsNaN(y) || math.IsInf(y, 0) {
			return j, y, false
		}
	}
	for j, x := range f64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return j, x, false
		}
	}
	return 0, 0, true
}
