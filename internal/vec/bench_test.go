package vec

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkKernels runs each exported kernel on every path this machine
// has, side by side (Kernel/n=.../path), and reports ns/element: the
// activations at the default model's feed-forward size (64 x 12 x 192),
// softmax rows of 64 keys, layer norm rows of 192, and Adam on 64Ki
// float32 parameters.
func BenchmarkKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	act, row, keys, params := 64*12*192, 192, 64, 1<<16
	big := func(n int) []float32 { return inputs(r, n) }
	x, dy, out := big(act), big(act), make([]float32, act)
	r1, r2, r3, ro := big(row), big(row), big(row), make([]float32, row)
	s := make([]float32, keys)
	for i := range s {
		s[i] = float32(i) * -0.3
	}
	p, g := big(params), big(params)
	m, v := make([]float64, params), make([]float64, params)
	adam := AdamCoef{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, StepSize: 1e-3, SqrtBC2: 0.03, Keep: 1}
	var sink float32
	for _, k := range []struct {
		name string
		n    int
		run  func()
	}{
		{"GELU", act, func() { GELU(out, x) }},
		{"GELUGrad", act, func() { GELUGrad(out, x, dy) }},
		{"ReLU", act, func() { ReLU(out, x) }},
		{"ReLUGrad", act, func() { ReLUGrad(out, x, dy) }},
		{"ExpShiftSum", keys, func() { sink += ExpShiftSum(ro[:keys], s, 0.5) }},
		{"Sum", row, func() { sink += Sum(r1) }},
		{"Dot", row, func() { sink += Dot(r1, r2) }},
		{"Lin", row, func() { Lin(ro, r1, r2, 0.5, -2, 0.25) }},
		{"MulAdd", row, func() { MulAdd(ro, r1, r2, r3) }},
		{"Adam", params, func() { Adam(p, g, m, v, adam) }},
	} {
		for _, path := range paths() {
			b.Run(fmt.Sprintf("%s/n=%d/%s", k.name, k.n, path.name), func(b *testing.B) {
				usePath(b, path.set)
				for b.Loop() {
					k.run()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k.n), "ns/element")
			})
		}
	}
	if sink == 1 { // keep the reductions' results live
		b.Log(sink)
	}
}
