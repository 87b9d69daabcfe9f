package graph

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// dropoutRun builds x ⊙ keep for a dropout of rate p and seed, draws the mask
// of each step in steps (or evaluates when steps is nil) and returns the
// outputs, one graph run per step.
func dropoutRun(t *testing.T, dt tensor.Dtype, shape tensor.Shape, xs []float64, p float64, seed uint64, steps []uint64) [][]float64 {
	t.Helper()
	g := G.NewGraph()
	x := input(g, dt, shape, "x")
	d, err := NewDropout(g, dt, shape, p, seed, "drop")
	if err != nil {
		t.Fatal(err)
	}
	if d.P != p || d.Seed != seed {
		t.Errorf("dropout P, Seed = %v, %v; want %v, %v", d.P, d.Seed, p, seed)
	}
	y, err := d.Apply(x)
	if err != nil {
		t.Fatal(err)
	}
	var v G.Value
	G.Read(y, &v)
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	run := func() []float64 {
		if err := G.Let(x, NewDense(dt, shape, xs)); err != nil {
			t.Fatal(err)
		}
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		defer vm.Reset()
		out, err := Float64s(v)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if steps == nil {
		return [][]float64{run()}
	}
	var outs [][]float64
	for _, s := range steps {
		if err := d.Resample(s); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, run())
	}
	return outs
}

func TestDropout(t *testing.T) {
	shape := tensor.Shape{20, 50}
	n := shape.TotalSize()
	xs := uniform(newRand(51), n, 0.5, 1.5) // non-zero: a zero output means dropped
	for _, dt := range floatTypes {
		x := roundTo(dt, xs)
		for _, p := range []float64{0, 0.1, 0.5, 0.9} {
			outs := dropoutRun(t, dt, shape, x, p, 42, []uint64{0, 1, 0})
			for k, out := range outs {
				dropped := 0
				for i, v := range out {
					if v == 0 {
						dropped++
						continue
					}
					if want := x[i] / (1 - p); !closeTo(v, want, tolFor(dt)) {
						t.Fatalf("%v p=%v run %d: kept entry %d = %v, want x/(1-p) = %v", dt, p, k, i, v, want)
					}
				}
				// The number dropped is Binomial(n, p): allow 5 standard deviations.
				if sd := math.Sqrt(float64(n) * p * (1 - p)); math.Abs(float64(dropped)-float64(n)*p) > 5*sd+0.5 {
					t.Errorf("%v p=%v run %d: dropped %d of %d, want about %v", dt, p, k, dropped, n, float64(n)*p)
				}
			}
			// Step 0 twice gives the same mask, step 1 another one.
			same, differ := true, false
			for i := range outs[0] {
				same = same && outs[0][i] == outs[2][i]
				differ = differ || outs[0][i] != outs[1][i]
			}
			if !same {
				t.Errorf("%v p=%v: Resample(0) twice drew different masks", dt, p)
			}
			if p > 0 && !differ {
				t.Errorf("%v p=%v: Resample(0) and Resample(1) drew the same mask", dt, p)
			}
		}
	}
}

// The mask depends on (seed, step) only: two separately built dropouts repeat
// each other, as a resumed run must, and another seed draws another mask.
func TestDropoutReproducible(t *testing.T) {
	shape := tensor.Shape{4, 25}
	xs := uniform(newRand(52), shape.TotalSize(), 1, 2)
	a := dropoutRun(t, tensor.Float64, shape, xs, 0.3, 7, []uint64{5, 6})
	b := dropoutRun(t, tensor.Float64, shape, xs, 0.3, 7, []uint64{6, 5})
	c := dropoutRun(t, tensor.Float64, shape, xs, 0.3, 8, []uint64{5})
	f32 := dropoutRun(t, tensor.Float32, shape, roundTo(tensor.Float32, xs), 0.3, 7, []uint64{5})
	differ := false
	for i := range a[0] {
		if a[0][i] != b[1][i] || a[1][i] != b[0][i] {
			t.Fatalf("same (seed, step) drew different masks at %d", i)
		}
		if (a[0][i] == 0) != (f32[0][i] == 0) {
			t.Fatalf("float32 and float64 dropouts of the same (seed, step) differ at %d", i)
		}
		differ = differ || (a[0][i] == 0) != (c[0][i] == 0)
	}
	if !differ {
		t.Error("seeds 7 and 8 drew the same mask")
	}
}

func TestDropoutEval(t *testing.T) {
	shape := tensor.Shape{3, 4}
	xs := uniform(newRand(53), shape.TotalSize(), -1, 1)
	// A new dropout keeps everything, unscaled, until Resample.
	out := dropoutRun(t, tensor.Float64, shape, xs, 0.5, 1, nil)[0]
	checkClose(t, "new dropout", out, xs, 0)

	// Eval after Resample switches it off again.
	g := G.NewGraph()
	x := input(g, tensor.Float64, shape, "x")
	d, err := NewDropout(g, tensor.Float64, shape, 0.5, 1, "drop")
	if err != nil {
		t.Fatal(err)
	}
	y, err := d.Apply(x)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Resample(3); err != nil {
		t.Fatal(err)
	}
	if err := d.Eval(); err != nil {
		t.Fatal(err)
	}
	got := eval(t, map[*G.Node]G.Value{x: NewDense(tensor.Float64, shape, xs)}, y)[0]
	checkClose(t, "dropout after Eval", got, xs, 0)
}

func TestDropoutErrors(t *testing.T) {
	g := G.NewGraph()
	shape := tensor.Shape{2, 3}
	for _, test := range []struct {
		dt tensor.Dtype
		p  float64
	}{
		{tensor.Float64, -0.1},
		{tensor.Float64, 1},
		{tensor.Float32, 1.5},
		{tensor.Float64, math.NaN()},
		{tensor.Int, 0.5},
	} {
		if _, err := NewDropout(g, test.dt, shape, test.p, 1, "bad"); err == nil {
			t.Errorf("NewDropout(%v, p=%v): no error", test.dt, test.p)
		}
	}
	d, err := NewDropout(g, tensor.Float64, shape, 0.5, 1, "drop")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []tensor.Shape{{3, 2}, {2, 3, 1}, {6}} {
		x := input(g, tensor.Float64, s, "x")
		err := noPanic(t, "Apply", func() error { _, err := d.Apply(x); return err })
		if err == nil {
			t.Errorf("Apply to shape %v of a (2, 3) dropout: no error", s)
		}
	}
}
