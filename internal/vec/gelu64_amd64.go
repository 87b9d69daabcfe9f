//go:build !purego

package vec

// gelu64AVX2 and gelu64AVX512 set y to GELU64 of x, or with dy non-nil to
// GELUGrad64, reading gelu64Consts; gelu64AVX2 takes n a positive multiple
// of 4, gelu64AVX512 any n >= 1.

//go:noescape
func gelu64AVX2(y, x, dy *float64, n int, k *gelu64Table)

//go:noescape
func gelu64AVX512(y, x, dy *float64, n int, k *gelu64Table)
