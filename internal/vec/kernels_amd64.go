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
