//go:build amd64 && !purego

package vec

import "golang.org/x/sys/cpu"

var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// geluAVX2 is GELU on the first n elements, n a positive multiple of 8.
//
//go:noescape
func geluAVX2(y, x *float32, n int, k *[21][8]float32)

// geluGradAVX2 is GELUGrad on the first n elements, n a positive multiple
// of 8.
//
//go:noescape
func geluGradAVX2(dx, x, dy *float32, n int, k *[21][8]float32)

// relu32 sets y = max(x, 0) on n float32, n a positive multiple of 8, or with
// dy non-nil, y = dy where x > 0 and 0 elsewhere.
//
//go:noescape
func relu32(y, x, dy *float32, n int)

// relu64 is relu32 for float64, n a positive multiple of 4.
//
//go:noescape
func relu64(y, x, dy *float64, n int)

// expShiftSumAVX2 is ExpShiftSum on the first n elements, n a positive
// multiple of 8.
//
//go:noescape
func expShiftSumAVX2(y, x *float32, n int, shift float32, k *[13][8]float32) float32

// sum32 returns the sum of n float32, n a positive multiple of 8.
//
//go:noescape
func sum32(x *float32, n int) float32

// dot32 returns the dot product of n float32, n a positive multiple of 8.
//
//go:noescape
func dot32(x, y *float32, n int) float32

// lin32 sets y = a x1 + b x2 + c on n float32, n a positive multiple of 8.
//
//go:noescape
func lin32(y, x1, x2 *float32, n int, a, b, c float32)

// mulAdd32 sets y = p q + r, or p q with r nil, on n float32, n a positive
// multiple of 8.
//
//go:noescape
func mulAdd32(y, p, q, r *float32, n int)

// adam32 is Adam on the first n float32 parameters, n a positive multiple
// of 4; k holds beta1, 1-beta1, beta2, 1-beta2, StepSize, SqrtBC2, Eps and
// Keep.
//
//go:noescape
func adam32(p, grad *float32, m, v *float64, n int, k *[8]float64)

// adam64 is adam32 for float64 parameters.
//
//go:noescape
func adam64(p, grad *float64, m, v *float64, n int, k *[8]float64)
