package graph

import (
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// crossEntropyRef is sum_i w_i * -log softmax(logits_i)[t_i] / sum_i w_i.
func crossEntropyRef(logits []float64, classes int, targets []int, weights []float64) float64 {
	logp := logSoftmaxRef(logits, classes)
	var loss, total float64
	for i, w := range weights {
		if w == 0 {
			continue
		}
		loss -= w * logp[i*classes+targets[i]]
		total += w
	}
	return loss / total
}

func TestCrossEntropy(t *testing.T) {
	for i, test := range []struct {
		shape   tensor.Shape
		scale   float64
		targets []int
		weights []float64
	}{
		{shape: tensor.Shape{4, 5}, scale: 2, targets: []int{0, 4, 2, 2}, weights: []float64{1, 1, 1, 1}},
		// Weight-0 positions are ignored, whatever their target.
		{shape: tensor.Shape{4, 5}, scale: 2, targets: []int{1, -7, 3, 99}, weights: []float64{1, 0, 2.5, 0}},
		{shape: tensor.Shape{2, 3, 4}, scale: 5, targets: []int{0, 1, 2, 3, 3, 0}, weights: []float64{0.5, 1, 0, 2, 1, 1}},
		{shape: tensor.Shape{3, 2, 3}, scale: 30, targets: []int{2, 2, 1, 0, 1, 2}, weights: []float64{1, 1, 1, 1, 1, 0}},
	} {
		for _, dt := range floatTypes {
			classes := test.shape[len(test.shape)-1]
			n := test.shape.TotalSize() / classes
			xs := roundTo(dt, uniform(newRand(uint64(300+i)), test.shape.TotalSize(), -test.scale, test.scale))
			g := G.NewGraph()
			logits := input(g, dt, test.shape, "logits")
			tg, err := NewTargets(g, dt, n, classes, "targets")
			if err != nil {
				t.Fatal(err)
			}
			if err := tg.Set(test.targets, test.weights); err != nil {
				t.Fatalf("test %d: Set: %v", i, err)
			}
			loss, err := CrossEntropy(logits, tg)
			if err != nil {
				t.Fatalf("test %d: %v", i, err)
			}
			if !loss.IsScalar() || loss.Dtype() != dt {
				t.Fatalf("test %d: loss is %v of shape %v, want a %v scalar", i, loss.Dtype(), loss.Shape(), dt)
			}
			got := eval(t, map[*G.Node]G.Value{logits: NewDense(dt, test.shape, xs)}, loss)[0][0]
			want := crossEntropyRef(xs, classes, test.targets, test.weights)
			if !closeTo(got, want, tolFor(dt)*10) {
				t.Errorf("test %d %v: loss = %v, want %v", i, dt, got, want)
			}
		}
	}
}

// The loss must not move when the logits of a weight-0 position change.
func TestCrossEntropyIgnoresWeightZero(t *testing.T) {
	shape := tensor.Shape{3, 4}
	targets, weights := []int{1, 2, 3}, []float64{1, 0, 1}
	g := G.NewGraph()
	logits := input(g, tensor.Float64, shape, "logits")
	tg, err := NewTargets(g, tensor.Float64, 3, 4, "targets")
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Set(targets, weights); err != nil {
		t.Fatal(err)
	}
	loss, err := CrossEntropy(logits, tg)
	if err != nil {
		t.Fatal(err)
	}
	var v G.Value
	G.Read(loss, &v)
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	xs := uniform(newRand(31), 12, -1, 1)
	var losses []float64
	for _, shift := range []float64{0, 7, -40} {
		ys := append([]float64(nil), xs...)
		for j := 4; j < 8; j++ { // row 1, weight 0
			ys[j] += shift * float64(j)
		}
		if err := G.Let(logits, NewDense(tensor.Float64, shape, ys)); err != nil {
			t.Fatal(err)
		}
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		losses = append(losses, v.Data().(float64))
		vm.Reset()
	}
	want := crossEntropyRef(xs, 4, targets, weights)
	for i, l := range losses {
		if !closeTo(l, want, 1e-12) {
			t.Errorf("run %d: loss = %v, want %v", i, l, want)
		}
	}
}

func TestCrossEntropyLargeFloat32(t *testing.T) {
	shape := tensor.Shape{3, 4}
	xs := []float64{
		1000, 999, 1002, 998,
		0, 100, -50, 95,
		-1000, 1000, 0, 999.5,
	}
	targets, weights := []int{3, 2, 0}, []float64{1, 1, 1}
	g := G.NewGraph()
	logits := input(g, tensor.Float32, shape, "logits")
	tg, err := NewTargets(g, tensor.Float32, 3, 4, "targets")
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Set(targets, weights); err != nil {
		t.Fatal(err)
	}
	loss, err := CrossEntropy(logits, tg)
	if err != nil {
		t.Fatal(err)
	}
	got := eval(t, map[*G.Node]G.Value{logits: NewDense(tensor.Float32, shape, xs)}, loss)[0][0]
	want := crossEntropyRef(xs, 4, targets, weights)
	if math.IsNaN(got) || math.IsInf(got, 0) || !closeTo(got, want, 1e-5) {
		t.Errorf("float32 loss = %v, want %v", got, want)
	}
}

func TestTargetsSetErrors(t *testing.T) {
	g := G.NewGraph()
	tg, err := NewTargets(g, tensor.Float64, 3, 4, "targets")
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name    string
		targets []int
		weights []float64
		want    string
	}{
		{"short targets", []int{0, 1}, []float64{1, 1, 1}, "want 3 of each"},
		{"long weights", []int{0, 1, 2}, []float64{1, 1, 1, 1}, "want 3 of each"},
		{"target = classes", []int{0, 4, 2}, []float64{1, 1, 1}, "outside [0, 4)"},
		{"negative target", []int{0, 1, -1}, []float64{1, 1, 1}, "outside [0, 4)"},
		{"negative weight", []int{0, 1, 2}, []float64{1, -0.5, 1}, "not a finite non-negative"},
		{"NaN weight", []int{0, 1, 2}, []float64{1, math.NaN(), 1}, "not a finite non-negative"},
		{"Inf weight", []int{0, 1, 2}, []float64{math.Inf(1), 1, 1}, "not a finite non-negative"},
		{"all weights zero", []int{0, 1, 2}, []float64{0, 0, 0}, "every weight is 0"},
	} {
		err := noPanic(t, test.name, func() error { return tg.Set(test.targets, test.weights) })
		if err == nil {
			t.Errorf("%s: no error", test.name)
		} else if !strings.Contains(err.Error(), test.want) {
			t.Errorf("%s: error %q does not mention %q", test.name, err, test.want)
		}
	}
	if err := tg.Set([]int{0, 17, 3}, []float64{1, 0, 1}); err != nil {
		t.Errorf("out-of-range target at weight 0: %v", err)
	}

	for _, test := range []struct {
		dt         tensor.Dtype
		n, classes int
	}{{tensor.Int, 2, 2}, {tensor.Float64, 0, 2}, {tensor.Float32, 2, 0}} {
		if _, err := NewTargets(g, test.dt, test.n, test.classes, "bad"); err == nil {
			t.Errorf("NewTargets(%v, %d, %d): no error", test.dt, test.n, test.classes)
		}
	}
}

func TestCrossEntropyErrors(t *testing.T) {
	g := G.NewGraph()
	tg, err := NewTargets(g, tensor.Float64, 6, 4, "targets")
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name   string
		logits *G.Node
		want   string
	}{
		{"wrong classes", input(g, tensor.Float64, tensor.Shape{8, 3}, "a"), "does not match"},
		{"wrong N", input(g, tensor.Float64, tensor.Shape{5, 4}, "b"), "does not match"},
		{"wrong N, 3-D", input(g, tensor.Float64, tensor.Shape{2, 2, 4}, "c"), "does not match"},
		{"same size, last axis differs", input(g, tensor.Float64, tensor.Shape{2, 4, 3}, "d"), "does not match"},
		{"dtype", input(g, tensor.Float32, tensor.Shape{6, 4}, "e"), "float32"},
	} {
		err := noPanic(t, test.name, func() error {
			_, err := CrossEntropy(test.logits, tg)
			return err
		})
		if err == nil {
			t.Errorf("%s: no error", test.name)
		} else if !strings.Contains(err.Error(), test.want) {
			t.Errorf("%s: error %q does not mention %q", test.name, err, test.want)
		}
	}
	for _, ok := range []tensor.Shape{{6, 4}, {2, 3, 4}, {3, 2, 4}} {
		if _, err := CrossEntropy(input(g, tensor.Float64, ok, "ok"), tg); err != nil {
			t.Errorf("logits %v: %v", ok, err)
		}
	}
}

// crossEntropyComposed is the readable form of CrossEntropy, composed of
// gorgonia's ops: -sum(targets ⊙ LogSoftmax(logits)). The fused op must
// equal it, in value and gradient.
func crossEntropyComposed(t *testing.T, logits *G.Node, tg *Targets) *G.Node {
	t.Helper()
	if logits.Dims() != 2 {
		var err error
		if logits, err = Reshape(logits, tensor.Shape{tg.N, tg.Classes}); err != nil {
			t.Fatal(err)
		}
	}
	logp, err := LogSoftmax(logits)
	if err != nil {
		t.Fatal(err)
	}
	return G.Must(G.Neg(G.Must(G.Sum(G.Must(G.HadamardProd(logp, tg.Node))))))
}

// The fused cross-entropy equals the composed one, loss and logits'
// gradient, in both dtypes, with weight-0 rows, 3-D logits, soft targets
// (several classes of one row weighted, as Targets' matrix allows) and
// logits far apart.
func TestCrossEntropyFusedEqualsComposed(t *testing.T) {
	for i, test := range []struct {
		shape tensor.Shape
		scale float64
		soft  bool
	}{
		{shape: tensor.Shape{6, 5}, scale: 2},
		{shape: tensor.Shape{2, 3, 7}, scale: 8},
		{shape: tensor.Shape{4, 9}, scale: 3, soft: true},
		{shape: tensor.Shape{3, 17}, scale: 60},
	} {
		for _, dt := range floatTypes {
			classes := test.shape[len(test.shape)-1]
			n := test.shape.TotalSize() / classes
			rng := newRand(uint64(700 + i))
			xs := roundTo(dt, uniform(rng, test.shape.TotalSize(), -test.scale, test.scale))
			ts := make([]float64, n*classes)
			for r := 0; r < n; r++ {
				if r%3 == 1 {
					continue // a row of weight 0
				}
				ts[r*classes+(r*5)%classes] = float64(r + 1)
				if test.soft {
					ts[r*classes+(r*5+2)%classes] = 0.5
				}
			}
			var total float64
			for _, v := range ts {
				total += v
			}
			for j := range ts {
				ts[j] /= total
			}
			var got, want [][]float64
			for k, build := range []func(*G.Node, *Targets) *G.Node{
				func(z *G.Node, tg *Targets) *G.Node { return G.Must(CrossEntropy(z, tg)) },
				func(z *G.Node, tg *Targets) *G.Node { return crossEntropyComposed(t, z, tg) },
			} {
				g := G.NewGraph()
				logits := input(g, dt, test.shape, "logits")
				tg, err := NewTargets(g, dt, n, classes, "targets")
				if err != nil {
					t.Fatal(err)
				}
				loss := build(logits, tg)
				dz, err := G.Grad(loss, logits)
				if err != nil {
					t.Fatal(err)
				}
				vals := eval(t, map[*G.Node]G.Value{
					logits:  NewDense(dt, test.shape, xs),
					tg.Node: NewDense(dt, tensor.Shape{n, classes}, ts),
				}, loss, dz[0])
				if k == 0 {
					got = vals
				} else {
					want = vals
				}
			}
			tol := 1e-12
			if dt == tensor.Float32 {
				tol = 2e-5
			}
			checkClose(t, "loss", got[0], want[0], tol)
			checkClose(t, "gradient", got[1], want[1], tol)
		}
	}
}

// A finite-difference check of the fused op's gradient, float64, through a
// product with a fixed matrix so that the logits' gradient is not the
// softmax's alone.
func TestCrossEntropyGradCheck(t *testing.T) {
	const n, classes = 5, 6
	rng := newRand(41)
	g := G.NewGraph()
	x := param(g, tensor.Shape{n, classes}, uniform(rng, n*classes, -2, 2), "x")
	w := G.NewConstant(NewDense(tensor.Float64, tensor.Shape{classes, classes}, uniform(rng, classes*classes, -1, 1)))
	tg, err := NewTargets(g, tensor.Float64, n, classes, "targets")
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Set([]int{0, 3, 5, 2, 1}, []float64{1, 0, 2, 1, 0.5}); err != nil {
		t.Fatal(err)
	}
	loss, err := CrossEntropy(G.Must(G.Mul(x.Node, w)), tg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := GradCheck(loss, []Param{x}, nil, GradCheckConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("relative error %.2g", rep[0].Rel)
	if rep[0].Rel > 1e-8 {
		t.Errorf("cross-entropy gradient: relative error %.2e against finite differences, want < 1e-8", rep[0].Rel)
	}
}
