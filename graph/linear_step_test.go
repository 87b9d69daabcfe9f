package graph

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestLinearStepMatchesAttend runs LinearStep position by position, binding
// each step's state and z at the next, and compares every output with
// LinearAttend's causal output at that position (fused and composed), in
// both dtypes, normalized and not.
func TestLinearStepMatchesAttend(t *testing.T) {
	for _, norm := range []bool{true, false} {
		c := linCase{b: 2, sq: 9, sk: 9, heads: 2, f: 3, e: 4, causal: true, norm: norm, chunk: 4}
		in := newLinInputs(c, 23)
		for _, dt := range floatTypes {
			tol := 1e-12
			if dt == tensor.Float32 {
				tol = 1e-5
			}
			want := runLinearCase(t, c, in, dt, Fused).out
			composed := runLinearCase(t, c, in, dt, Composed).out
			hf, he := c.heads*c.f, c.heads*c.e
			g := G.NewGraph()
			q := input(g, dt, tensor.Shape{c.b, 1, hf}, "phiQ")
			k := input(g, dt, tensor.Shape{c.b, 1, hf}, "phiK")
			v := input(g, dt, tensor.Shape{c.b, 1, he}, "v")
			state := input(g, dt, tensor.Shape{c.b, hf, c.e}, "state")
			z := input(g, dt, tensor.Shape{c.b, 1, hf}, "z")
			out, newState, newZ, err := LinearStep(q, k, v, state, z, LinearSpec{Heads: c.heads, Causal: true, Normalize: norm})
			if err != nil {
				t.Fatal(err)
			}
			vm, err := NewMachine(g)
			if err != nil {
				t.Fatal(err)
			}
			// row returns position i of every sequence of x (B, n, w) as (B, 1, w).
			row := func(x []float64, i, n, w int) []float64 {
				var r []float64
				for b := range c.b {
					r = append(r, x[(b*n+i)*w:][:w]...)
				}
				return roundTo(dt, r)
			}
			st, zs := make([]float64, c.b*hf*c.e), make([]float64, c.b*hf)
			for i := range c.sq {
				lets := map[*G.Node][]float64{q: row(in.q, i, c.sq, hf), k: row(in.k, i, c.sk, hf), v: row(in.v, i, c.sk, he), state: st, z: zs}
				for n, vals := range lets {
					if err := G.Let(n, NewDense(dt, n.Shape().Clone(), vals)); err != nil {
						t.Fatal(err)
					}
				}
				if err := vm.RunAll(); err != nil {
					t.Fatal(err)
				}
				got := must(Float64s(out.Value()))
				st, zs = must(Float64s(newState.Value())), must(Float64s(newZ.Value()))
				vm.Reset()
				name := fmt.Sprintf("norm=%v %v position %d", norm, dt, i)
				checkClose(t, name+" vs fused", got, row(want, i, c.sq, he), tol)
				checkClose(t, name+" vs composed", got, row(composed, i, c.sq, he), tol)
			}
			vm.Close()
		}
	}
}

// TestLinearStepErrors: bad input is a clear error, never a panic.
func TestLinearStepErrors(t *testing.T) {
	g := G.NewGraph()
	x := func(dt tensor.Dtype, shape ...int) *G.Node {
		return input(g, dt, shape, fmt.Sprintf("x%v%v", dt, shape))
	}
	f64 := tensor.Float64
	// 2 sequences, 2 heads of dφ = 3 and dv = 2.
	q, k, v, st, z := x(f64, 2, 1, 6), x(f64, 2, 1, 6), x(f64, 2, 1, 4), x(f64, 2, 6, 2), x(f64, 2, 1, 6)
	spec := LinearSpec{Heads: 2, Normalize: true}
	for _, c := range []struct {
		name           string
		q, k, v, st, z *G.Node
		s              LinearSpec
		want           string
		shape          bool
	}{
		{"nil state", q, k, v, nil, z, spec, "state is nil", false},
		{"two positions", x(f64, 2, 2, 6), x(f64, 2, 2, 6), x(f64, 2, 2, 4), st, z, spec, "a step takes one position", true},
		{"state shape", q, k, v, x(f64, 2, 6, 3), z, spec, "want (B, H*dφ, dv) = (2, 6, 2)", true},
		{"z shape", q, k, v, st, x(f64, 2, 6), spec, "want (B, 1, H*dφ) = (2, 1, 6)", true},
		{"state dtype", q, k, v, x(tensor.Float32, 2, 6, 2), z, spec, "phiQ is float64", false},
		{"heads", q, k, v, st, z, LinearSpec{Heads: 4}, "4 heads do not divide", true},
		{"key lengths", q, k, v, st, z, LinearSpec{Heads: 2, KeyLengths: []int{1, 1}}, "KeyLengths must be nil", false},
		{"impl", q, k, v, st, z, LinearSpec{Heads: 2, Impl: "fast"}, "unknown LinearSpec.Impl", false},
		{"chunk", q, k, v, st, z, LinearSpec{Heads: 2, Chunk: -3}, "Chunk -3", false},
	} {
		err := noPanic(t, c.name, func() error { _, _, _, err := LinearStep(c.q, c.k, c.v, c.st, c.z, c.s); return err })
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "linear attention step") {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
			continue
		}
		if c.shape != errors.Is(err, ErrShape) {
			t.Errorf("%s: errors.Is(%v, ErrShape) = %v", c.name, err, !c.shape)
		}
	}
}
