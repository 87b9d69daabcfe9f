package graph

import (
	"errors"
	"fmt"
	"math"
	"strings"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// GradCheckConfig tunes GradCheck. The zero value uses the defaults; a
// negative, NaN or infinite field is an error (a NaN step used to come back
// as a report of NaNs and no error, which reads as "checked").
type GradCheckConfig struct {
	// Eps is the step of the central differences (f(x+eps)-f(x-eps))/(2 eps).
	// Default 1e-5: in float64 it balances rounding noise (~1e-16/eps) against
	// the truncation error (~eps^2) of the central difference.
	Eps float64
	// Floor is the smallest norm the relative error divides by. A parameter
	// whose true gradient is zero (the key bias of attention, by softmax's
	// shift invariance) is then judged by its absolute error instead of by
	// finite-difference noise over nothing. Default 1e-3.
	Floor float64
	// Progress, if set, is called after each weight's finite difference
	// with the parameter's name, the weights done so far and the total of
	// all parameters: two runs of the model per weight make a check of a
	// large model take minutes, which a caller can show.
	Progress func(param string, done, total int)
}

// GradError is the comparison of one parameter's symbolic and numerical
// gradients.
type GradError struct {
	Name string
	Size int
	// MaxAbs is max_i |symbolic_i - numerical_i|.
	MaxAbs float64
	// Rel is ||symbolic - numerical|| / max(||symbolic||, ||numerical||, Floor),
	// with Euclidean norms over the whole parameter.
	Rel float64
	// Norm is ||numerical||, to tell a zero gradient from a checked one.
	Norm float64
}

// GradReport holds one GradError per parameter, in the order they were given.
type GradReport []GradError

// Worst returns the entry with the largest relative error.
func (r GradReport) Worst() GradError {
	var w GradError
	for _, e := range r {
		if e.Rel >= w.Rel {
			w = e
		}
	}
	return w
}

// String formats the report as an aligned table, one parameter a line.
func (r GradReport) String() string {
	var b strings.Builder
	width := len("param")
	for _, e := range r {
		width = max(width, len(e.Name))
	}
	fmt.Fprintf(&b, "%-*s %6s %10s %10s %10s\n", width, "param", "size", "grad norm", "max abs", "rel")
	for _, e := range r {
		fmt.Fprintf(&b, "%-*s %6d %10.3e %10.3e %10.3e\n", width, e.Name, e.Size, e.Norm, e.MaxAbs, e.Rel)
	}
	return b.String()
}

// GradCheck compares gorgonia's symbolic gradient of the scalar cost with
// respect to every param with central finite differences, in float64.
//
// inputs are bound with G.Let before every run (nil if the inputs were bound
// already, for instance through IDs.Set or MaskNode.Set). GradCheck calls
// G.Grad on cost itself, so the graph must not be running in another machine.
// It evaluates the graph 2 times per scalar parameter: keep models small.
func GradCheck(cost *G.Node, params []Param, inputs map[*G.Node]G.Value, cfg GradCheckConfig) (report GradReport, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-5
	}
	if cfg.Floor == 0 {
		cfg.Floor = 1e-3
	}
	if err := CheckNode(cost, "cost"); err != nil {
		return nil, fmt.Errorf("graph: gradcheck: %w", err)
	}
	if cost.Graph() == nil {
		return nil, fmt.Errorf("graph: gradcheck: cost %q is in no graph", cost.Name())
	}
	if !cost.IsScalar() || cost.Dtype() != tensor.Float64 {
		return nil, fmt.Errorf("graph: gradcheck: cost must be a float64 scalar, got %v of shape %v", cost.Dtype(), cost.Shape())
	}
	if len(params) == 0 {
		return nil, errors.New("graph: gradcheck: no parameters to check")
	}
	for i, p := range params {
		if err := CheckNode(p.Node, fmt.Sprintf("node of parameter %d %q", i, p.Name)); err != nil {
			return nil, fmt.Errorf("graph: gradcheck: %w", err)
		}
		if p.Node.Dtype() != tensor.Float64 {
			return nil, fmt.Errorf("graph: gradcheck: parameter %q is %v; finite differences need float64", p.Name, p.Node.Dtype())
		}
		if p.Node.Value() == nil {
			return nil, fmt.Errorf("graph: gradcheck: parameter %q has no value", p.Name)
		}
	}
	for n, v := range inputs {
		if err := CheckNode(n, "an input node"); err != nil {
			return nil, fmt.Errorf("graph: gradcheck: %w", err)
		}
		if d, ok := v.(*tensor.Dense); v == nil || (ok && d == nil) {
			return nil, fmt.Errorf("graph: gradcheck: input %q has a nil value", n.Name())
		}
	}
	grads, err := G.Grad(cost, Nodes(params)...)
	if err != nil {
		return nil, fmt.Errorf("graph: gradcheck: symbolic gradient: %w", err)
	}
	vm, err := NewMachine(cost.Graph())
	if err != nil {
		return nil, fmt.Errorf("graph: gradcheck: %w", err)
	}
	defer vm.Close()

	run := func() (float64, error) {
		for n, v := range inputs {
			if err := G.Let(n, v); err != nil {
				return 0, err
			}
		}
		defer vm.Reset()
		if err := vm.RunAll(); err != nil {
			return 0, err
		}
		f, ok := cost.Value().Data().(float64)
		if !ok {
			return 0, fmt.Errorf("cost value is %T", cost.Value().Data())
		}
		return f, nil
	}

	// Symbolic gradients, copied before Reset lets the machine reuse buffers.
	symbolic := make([][]float64, len(params))
	for n, v := range inputs {
		if err := G.Let(n, v); err != nil {
			return nil, fmt.Errorf("graph: gradcheck: bind input %q: %w", n.Name(), err)
		}
	}
	if err := vm.RunAll(); err != nil {
		return nil, fmt.Errorf("graph: gradcheck: run: %w", err)
	}
	for i, g := range grads {
		if symbolic[i], err = Float64s(g.Value()); err != nil {
			return nil, fmt.Errorf("graph: gradcheck: gradient of %q: %w", params[i].Name, err)
		}
	}
	vm.Reset()

	total, done := 0, 0
	for _, p := range params {
		total += p.Node.Shape().TotalSize()
	}
	for i, p := range params {
		data, ok := p.Node.Value().Data().([]float64)
		if !ok {
			return nil, fmt.Errorf("graph: gradcheck: parameter %q is not a float64 tensor", p.Name)
		}
		numerical := make([]float64, len(data))
		for j := range data {
			orig := data[j]
			data[j] = orig + cfg.Eps
			fPlus, err := run()
			if err != nil {
				data[j] = orig
				return nil, fmt.Errorf("graph: gradcheck: run with %q[%d] + eps: %w", p.Name, j, err)
			}
			data[j] = orig - cfg.Eps
			fMinus, err := run()
			data[j] = orig
			if err != nil {
				return nil, fmt.Errorf("graph: gradcheck: run with %q[%d] - eps: %w", p.Name, j, err)
			}
			numerical[j] = (fPlus - fMinus) / (2 * cfg.Eps)
			if done++; cfg.Progress != nil {
				cfg.Progress(p.Name, done, total)
			}
			// A NaN would slip through the report: Worst compares with >=,
			// which NaN never satisfies.
			if math.IsNaN(numerical[j]) || math.IsInf(numerical[j], 0) {
				return nil, fmt.Errorf("graph: gradcheck: the finite difference of %q[%d] is %v (cost %v at +eps, %v at -eps): use a smaller Eps or a finite cost", p.Name, j, numerical[j], fPlus, fMinus)
			}
		}
		for j, v := range symbolic[i] {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("graph: gradcheck: the symbolic gradient of %q[%d] is %v", p.Name, j, v)
			}
		}
		if len(symbolic[i]) != len(numerical) {
			return nil, fmt.Errorf("graph: gradcheck: gradient of %q has %d values, the parameter %d", p.Name, len(symbolic[i]), len(numerical))
		}
		report = append(report, compareGrads(p.Name, symbolic[i], numerical, cfg.Floor))
	}
	return report, nil
}

// Validate returns an error unless every field is 0 (the default) or a
// positive finite number: a NaN or infinite step makes every difference NaN,
// a negative or NaN Floor makes every relative error meaningless.
func (c GradCheckConfig) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"Eps", c.Eps}, {"Floor", c.Floor}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("graph: gradcheck: %s must be 0 (the default) or positive and finite, got %v", f.name, f.v)
		}
	}
	return nil
}

func compareGrads(name string, symbolic, numerical []float64, floor float64) GradError {
	var diff, ns, nn, maxAbs float64
	for i := range symbolic {
		d := symbolic[i] - numerical[i]
		diff += d * d
		ns += symbolic[i] * symbolic[i]
		nn += numerical[i] * numerical[i]
		maxAbs = math.Max(maxAbs, math.Abs(d))
	}
	denom := math.Max(math.Max(math.Sqrt(ns), math.Sqrt(nn)), floor)
	return GradError{Name: name, Size: len(symbolic), MaxAbs: maxAbs, Rel: math.Sqrt(diff) / denom, Norm: math.Sqrt(nn)}
}
