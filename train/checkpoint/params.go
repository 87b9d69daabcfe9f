package checkpoint

import (
	"errors"
	"fmt"
	"slices"

	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
)

// ParamTensors snapshots the values of params, which must be float32 or
// float64 *tensor.Dense, into NamedTensors named after the params, in the
// same order. The data is copied.
func ParamTensors(params []graph.Param) ([]NamedTensor, error) {
	out := make([]NamedTensor, 0, len(params))
	seen := make(map[string]bool, len(params))
	for _, p := range params {
		if seen[p.Name] {
			return nil, fmt.Errorf("checkpoint: param %q: duplicate name", p.Name)
		}
		seen[p.Name] = true
		d, err := paramDense(p)
		if err != nil {
			return nil, err
		}
		if d.IsMaterializable() {
			m, ok := d.Materialize().(*tensor.Dense)
			if !ok {
				return nil, fmt.Errorf("checkpoint: param %q: cannot materialize its view", p.Name)
			}
			d = m
		}
		t := NamedTensor{Name: p.Name, Shape: append([]int{}, d.Shape()...), DType: d.Dtype()}
		switch d.Dtype() {
		case tensor.Float32:
			src := d.Float32s()
			t.Data = make([]float64, len(src))
			for i, v := range src {
				t.Data[i] = float64(v)
			}
		case tensor.Float64:
			t.Data = append([]float64(nil), d.Float64s()...)
		}
		if n := d.Shape().TotalSize(); n != len(t.Data) {
			return nil, fmt.Errorf("checkpoint: param %q: %d values for shape %v", p.Name, len(t.Data), t.Shape)
		}
		out = append(out, t)
	}
	return out, nil
}

// paramDense returns the float32 or float64 *tensor.Dense value of p.
func paramDense(p graph.Param) (*tensor.Dense, error) {
	if p.Node == nil {
		return nil, fmt.Errorf("checkpoint: param %q: nil node", p.Name)
	}
	v := p.Node.Value()
	if v == nil {
		return nil, fmt.Errorf("checkpoint: param %q: no value", p.Name)
	}
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("checkpoint: param %q: value of type %T, want *tensor.Dense", p.Name, v)
	}
	if err := graph.CheckFloat(d.Dtype()); err != nil {
		return nil, fmt.Errorf("checkpoint: param %q: %w", p.Name, err)
	}
	return d, nil
}

// maxLoadErrors bounds how many problems LoadParams reports.
const maxLoadErrors = 10

// LoadParams copies tensors into the values of params in place. file names
// where the tensors come from, for the errors.
//
// Every param must have a tensor of the same name, with the same shape and
// dtype, and every tensor must belong to a param. Otherwise LoadParams
// returns an error listing the mismatches, each naming file and tensor and
// stating what was found and what was wanted, and modifies nothing.
func LoadParams(params []graph.Param, tensors []NamedTensor, file string) error {
	byName := make(map[string]*NamedTensor, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		if _, dup := byName[t.Name]; dup {
			return fmt.Errorf("checkpoint: %s: tensor %q: duplicate name", file, t.Name)
		}
		byName[t.Name] = t
	}
	var errs []error
	report := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("checkpoint: %s: "+format, append([]any{file}, args...)...))
	}
	dense := make([]*tensor.Dense, len(params))
	used := make(map[string]bool, len(params))
	for i, p := range params {
		if used[p.Name] {
			return fmt.Errorf("checkpoint: param %q: duplicate name", p.Name)
		}
		used[p.Name] = true
		d, err := paramDense(p)
		if err != nil {
			return err
		}
		if d.IsMaterializable() {
			return fmt.Errorf("checkpoint: param %q: value is a view; cannot load into it in place", p.Name)
		}
		dense[i] = d
		t, ok := byName[p.Name]
		if !ok {
			report("tensor %q: missing, want shape %v %v", p.Name, []int(d.Shape()), d.Dtype())
			continue
		}
		if !slices.Equal(t.Shape, []int(d.Shape())) {
			report("tensor %q: shape %v, want %v", p.Name, t.Shape, []int(d.Shape()))
			continue
		}
		if t.DType != d.Dtype() {
			report("tensor %q: dtype %v, want %v", p.Name, t.DType, d.Dtype())
			continue
		}
		if n := d.Shape().TotalSize(); len(t.Data) != n {
			report("tensor %q: %d values, want %d for shape %v", p.Name, len(t.Data), n, t.Shape)
			continue
		}
		var have int
		if d.Dtype() == tensor.Float32 {
			have = len(d.Float32s())
		} else {
			have = len(d.Float64s())
		}
		if have != len(t.Data) {
			return fmt.Errorf("checkpoint: param %q: %d values for shape %v", p.Name, have, []int(d.Shape()))
		}
	}
	var extra []string
	for name := range byName {
		if !used[name] {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		t := byName[name]
		report("tensor %q: unknown to the model (shape %v %v)", name, t.Shape, t.DType)
	}
	if len(errs) > 0 {
		if len(errs) > maxLoadErrors {
			more := len(errs) - maxLoadErrors
			errs = append(errs[:maxLoadErrors], fmt.Errorf("checkpoint: %s: and %d more mismatched tensors", file, more))
		}
		return errors.Join(errs...)
	}
	for i, p := range params {
		src := byName[p.Name].Data
		switch d := dense[i]; d.Dtype() {
		case tensor.Float32:
			dst := d.Float32s()
			for j, v := range src {
				dst[j] = float32(v)
			}
		case tensor.Float64:
			copy(d.Float64s(), src)
		}
	}
	return nil
}
