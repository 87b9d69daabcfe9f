//go:build amd64 && !purego

package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAVX512MatchesAVX2: the AVX-512 elementwise kernels give the AVX2
// kernels' results bit for bit, on every element of every test length (the
// AVX2 kernel runs on the row padded to whole registers, so that its
// assembly computes the elements its exported function leaves to Go), with
// edge values among the inputs. The reductions (Sum, Dot, ExpShiftSum's
// total) may add in another order and are tested against their
// definitions only.
func TestAVX512MatchesAVX2(t *testing.T) {
	sets := kernelSets()
	if len(sets) < 2 {
		t.Skip("this CPU runs only one of the AVX-512 and AVX2 kernel sets")
	}
	r := rand.New(rand.NewPCG(13, 14))
	edges := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		7.9, -7.9, 8, -8, 100, 1e30, -1e30, 1e-30, -87.4, 88.5}
	kernels := []struct {
		name string
		run  func(k *kernelSet, y, x1, x2, x3 []float32)
	}{
		{"GELU", func(k *kernelSet, y, x1, _, _ []float32) { k.gelu(&y[0], &x1[0], len(y), &consts) }},
		{"GELUGrad", func(k *kernelSet, y, x1, x2, _ []float32) { k.geluGrad(&y[0], &x1[0], &x2[0], len(y), &consts) }},
		{"ReLU", func(k *kernelSet, y, x1, _, _ []float32) { k.relu32(&y[0], &x1[0], nil, len(y)) }},
		{"ReLUGrad", func(k *kernelSet, y, x1, x2, _ []float32) { k.relu32(&y[0], &x1[0], &x2[0], len(y)) }},
		{"ReLU64", func(k *kernelSet, y, x1, _, _ []float32) {
			y64, x64 := widen(y), widen(x1)
			k.relu64(&y64[0], &x64[0], nil, len(y64))
			narrow(y, y64)
		}},
		{"ReLUGrad64", func(k *kernelSet, y, x1, x2, _ []float32) {
			y64, x64, dy64 := widen(y), widen(x1), widen(x2)
			k.relu64(&y64[0], &x64[0], &dy64[0], len(y64))
			narrow(y, y64)
		}},
		{"ExpShiftSum", func(k *kernelSet, y, x1, _, _ []float32) { k.expShiftSum(&y[0], &x1[0], len(y), 1.5, &expConsts) }},
		{"Lin", func(k *kernelSet, y, x1, x2, _ []float32) { k.lin32(&y[0], &x1[0], &x2[0], len(y), 0.75, -3, 0.125) }},
		{"MulAdd", func(k *kernelSet, y, x1, x2, x3 []float32) { k.mulAdd32(&y[0], &x1[0], &x2[0], &x3[0], len(y)) }},
		{"Mul", func(k *kernelSet, y, x1, x2, _ []float32) { k.mulAdd32(&y[0], &x1[0], &x2[0], nil, len(y)) }},
	}
	for _, n := range lengths[1:] {
		padded := (n + 7) &^ 7
		var x [3][]float32
		for j := range x {
			x[j] = make([]float32, padded)
			for i := range x[j] {
				if r.IntN(4) == 0 {
					x[j][i] = edges[r.IntN(len(edges))]
				} else {
					x[j][i] = float32(4 * r.NormFloat64())
				}
			}
		}
		for _, k := range kernels {
			want, got := make([]float32, padded), make([]float32, n)
			k.run(avx2, want, x[0], x[1], x[2])
			k.run(avx512, got, x[0][:n], x[1][:n], x[2][:n])
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Errorf("%s n=%d [%d] of %v, %v, %v: AVX-512 %v, AVX2 %v", k.name, n, i, x[0][i], x[1][i], x[2][i], got[i], want[i])
				}
			}
		}
	}
}

// widen and narrow convert between float32 and float64 rows, exactly.
func widen(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func narrow(y []float32, x []float64) {
	for i, v := range x {
		y[i] = float32(v)
	}
}
