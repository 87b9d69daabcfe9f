package vec

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkKernels runs each exported kernel on every path this machine
// has, side by side (Kernel/n=.../path), and reports ns/element: the
// activations at the default model's feed-forward size (64 x 12 x 192),
// softmax rows of 12 and 64 keys, layer norm rows of 48 and 192 (the
// default model's and nanogpt-cpu's widths are 48 and 128), LayerNorm's
// gradient of such rows (NormGrad, with an addend and the sums), and Adam on
// 64Ki float32 parameters.
func BenchmarkKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	act, params := 64*12*192, 1<<16
	x, dy, out := inputs(r, act), inputs(r, act), make([]float32, act)
	p, g := inputs(r, params), inputs(r, params)
	m, v := make([]float64, params), make([]float64, params)
	adam := AdamCoef{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, StepSize: 1e-3, SqrtBC2: 0.03, Keep: 1}
	var sink float32
	type kernel struct {
		name string
		n    int
		run  func()
	}
	ks := []kernel{
		{"GELU", act, func() { GELU(out, x) }},
		{"GELUGrad", act, func() { GELUGrad(out, x, dy) }},
		{"ReLU", act, func() { ReLU(out, x) }},
		{"ReLUGrad", act, func() { ReLUGrad(out, x, dy) }},
	}
	for _, keys := range []int{12, 64} {
		s, y := make([]float32, keys), make([]float32, keys)
		for i := range s {
			s[i] = float32(i) * -0.3
		}
		ks = append(ks, kernel{"ExpShiftSum", keys, func() { sink += ExpShiftSum(y, s, 0.5) }})
	}
	scratch, sums := make([]float32, 192), make([]float64, 2*192)
	for _, row := range []int{48, 192} {
		r1, r2, r3, ro := inputs(r, row), inputs(r, row), inputs(r, row), make([]float32, row)
		ks = append(ks,
			kernel{"Sum", row, func() { sink += Sum(r1) }},
			kernel{"Dot", row, func() { sink += Dot(r1, r2) }},
			kernel{"Lin", row, func() { Lin(ro, r1, r2, 0.5, -2, 0.25) }},
			kernel{"MulAdd", row, func() { MulAdd(ro, r1, r2, r3) }},
			kernel{"NormGrad", row, func() { NormGrad(ro, r1, r2, r3, scratch, 0.5, r1, sums[:row], sums[row:]) }})
	}
	ks = append(ks, kernel{"Adam", params, func() { Adam(p, g, m, v, adam) }})
	for _, k := range ks {
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

// BenchmarkLinWorkingSet runs the residual add's kernel (Lin: y = a + b)
// over working sets from 3 to 192 MiB (three arrays of 1 to 64 MiB) and
// reports the bytes it reads and writes per second: what a memory-bound op of a training step
// gets from the caches and what it gets from memory once a step's tensors
// no longer fit (go test ./internal/vec -run X -bench LinWorkingSet).
func BenchmarkLinWorkingSet(b *testing.B) {
	for _, mib := range []int{1, 4, 16, 32, 64} {
		n := mib << 20 / 4
		y, x1, x2 := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x1 {
			x1[i], x2[i] = float32(i), 1
		}
		b.Run(fmt.Sprintf("array=%dMiB", mib), func(b *testing.B) {
			for b.Loop() {
				Lin(y, x1, x2, 1, 1, 0)
			}
			b.ReportMetric(3*float64(n*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkSumWorkingSet reads one array again and again (Sum) at sizes
// around a core's second-level cache: where the read rate falls is how
// much the cache holds, which decides whether the decoder's split step
// (each core's half of the nanoGPT preset's weights, 1.57 MB) reads its
// weights from L2 or L3 (docs/speed.md, Generation).
func BenchmarkSumWorkingSet(b *testing.B) {
	for _, kib := range []int{1024, 1400, 1600, 1800, 3200} {
		x := make([]float32, kib<<10/4)
		for i := range x {
			x[i] = 1
		}
		b.Run(fmt.Sprintf("array=%dKiB", kib), func(b *testing.B) {
			var s float32
			for b.Loop() {
				s += Sum(x)
			}
			if s == 0 {
				b.Fatal("Sum of ones is 0")
			}
			b.ReportMetric(float64(len(x)*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
