//go:build amd64 && !purego

package vec

import "golang.org/x/sys/cpu"

// avx2 is the set of eight-lane kernels on ymm registers, with AVX2 and
// FMA; they take whole registers only, and the Go loops do the last few
// elements.
var avx2 = &kernelSet{
	name:   "AVX2+FMA assembly",
	step32: 8, step64: 4,
	gelu:         geluAVX2,
	gelu64:       gelu64AVX2,
	geluGrad:     geluGradAVX2,
	relu32:       relu32AVX2,
	relu64:       relu64AVX2,
	expShiftSum:  expShiftSumAVX2,
	sum32:        sum32AVX2,
	dot32:        dot32AVX2,
	lin32:        lin32AVX2,
	mulAdd32:     mulAdd32AVX2,
	addWiden32:   addWiden32AVX2,
	sumSquares32: sumSquares32AVX2,
	sumSquares64: sumSquares64AVX2,
	max32:        max32AVX2,
	mulDiff32:    mulDiff32AVX2,
	adam32:       adam32AVX2,
	adam64:       adam64AVX2,
}

// avx512 is the set of sixteen-lane kernels on zmm registers (eight
// float64 lanes); they take any n >= 1, the last block under a mask, and
// use AVX512F instructions and AVX512VL's masked ymm load (AddWiden's
// eight float32). Adam's are the AVX2 set's (see below).
var avx512 = &kernelSet{
	name:   "AVX-512 assembly",
	step32: 1, step64: 1,
	gelu:            geluAVX512,
	gelu64:          gelu64AVX512,
	geluGrad:        geluGradAVX512,
	relu32:          relu32AVX512,
	relu64:          relu64AVX512,
	expShiftSum:     expShiftSumAVX512,
	sum32:           sum32AVX512,
	dot32:           dot32AVX512,
	lin32:           lin32AVX512,
	mulAdd32:        mulAdd32AVX512,
	addWiden32:      addWiden32AVX512,
	scaleWiden32:    scaleWiden32AVX512,
	sumSquares32:    sumSquares32AVX512,
	sumSquares64:    sumSquares64AVX512,
	max32:           max32AVX512,
	mulDiff32:       mulDiff32AVX512,
	normalise32:     normalise32AVX512,
	normGradSums32:  normGradSums32AVX512,
	normGradApply32: normGradApply32AVX512,
	// Adam's float64 divisions and square roots bound its time, and on
	// zmm registers each takes three micro-ops on the ports the other
	// arithmetic needs, on ymm one: the AVX2 kernels, the same operations
	// in the same order, ran 7% faster on an AVX-512 Xeon (1.75 against
	// 1.89 ns a parameter, BenchmarkKernels/Adam, three runs each).
	adam32: adam32AVX2,
	adam64: adam64AVX2,
}

// kernelSets lists the sets this CPU can run, the fastest first; the
// exported functions run the first, tests and benchmarks each of them.
// x/sys/cpu reports AVX-512 only when the operating system also saves the
// zmm and mask registers.
func kernelSets() []*kernelSet {
	var sets []*kernelSet
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL {
		sets = append(sets, avx512)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		sets = append(sets, avx2)
	}
	return sets
}

// The kernels, as kernelSet documents them; the AVX2 ones take n a
// positive multiple of 8 (4 for relu64AVX2 and Adam), the AVX-512 ones any
// n >= 1.

//go:noescape
func geluAVX2(y, x *float32, n int, k *[21][8]float32)

//go:noescape
func geluGradAVX2(dx, x, dy *float32, n int, k *[21][8]float32)

//go:noescape
func relu32AVX2(y, x, dy *float32, n int)

//go:noescape
func relu64AVX2(y, x, dy *float64, n int)

//go:noescape
func expShiftSumAVX2(y, x *float32, n int, shift float32, k *[13][8]float32) float32

//go:noescape
func sum32AVX2(x *float32, n int) float32

//go:noescape
func dot32AVX2(x, y *float32, n int) float32

//go:noescape
func lin32AVX2(y, x1, x2 *float32, n int, a, b, c float32)

//go:noescape
func mulAdd32AVX2(y, p, q, r *float32, n int)

//go:noescape
func adam32AVX2(p, grad *float32, m, v *float64, n int, k *[8]float64)

//go:noescape
func adam64AVX2(p, grad *float64, m, v *float64, n int, k *[8]float64)

//go:noescape
func geluAVX512(y, x *float32, n int, k *[21][8]float32)

//go:noescape
func geluGradAVX512(dx, x, dy *float32, n int, k *[21][8]float32)

//go:noescape
func relu32AVX512(y, x, dy *float32, n int)

//go:noescape
func relu64AVX512(y, x, dy *float64, n int)

//go:noescape
func expShiftSumAVX512(y, x *float32, n int, shift float32, k *[13][8]float32) float32

//go:noescape
func sum32AVX512(x *float32, n int) float32

//go:noescape
func dot32AVX512(x, y *float32, n int) float32

//go:noescape
func lin32AVX512(y, x1, x2 *float32, n int, a, b, c float32)

//go:noescape
func mulAdd32AVX512(y, p, q, r *float32, n int)

//go:noescape
func addWiden32AVX2(y *float64, x *float32, n int)

//go:noescape
func addWiden32AVX512(y *float64, x *float32, n int)

//go:noescape
func sumSquares32AVX2(x *float32, n int, scale float64) (lanes [8]float64, maxAbs float64)

//go:noescape
func sumSquares64AVX2(x *float64, n int, scale float64) (lanes [8]float64, maxAbs float64)

//go:noescape
func sumSquares32AVX512(x *float32, n int, scale float64) (lanes [8]float64, maxAbs float64)

//go:noescape
func sumSquares64AVX512(x *float64, n int, scale float64) (lanes [8]float64, maxAbs float64)

//go:noescape
func max32AVX2(x *float32, n int) float32

//go:noescape
func max32AVX512(x *float32, n int) float32

//go:noescape
func mulDiff32AVX2(y, p, q *float32, n int, c, scale float32)

//go:noescape
func mulDiff32AVX512(y, p, q *float32, n int, c, scale float32)

//go:noescape
func normalise32AVX512(x, xhat *float32, n int, eps float64) float32

//go:noescape
func scaleWiden32AVX512(x *float32, n int, scale float64)

//go:noescape
func normGradSums32AVX512(dy, gain, xhat *float32, n int) (sum, dot float32)

//go:noescape
func normGradApply32AVX512(dx, dy, gain, xhat, addend *float32, sumGain, sumBias *float64, n int, a, b, c float32)
