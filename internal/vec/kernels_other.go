//go:build !amd64 || purego

package vec

var useAVX2 = false

func geluAVX2(y, x *float32, n int, k *[21][8]float32)          { panic("vec: no AVX2 kernels") }
func geluGradAVX2(dx, x, dy *float32, n int, k *[21][8]float32) { panic("vec: no AVX2 kernels") }

func relu32(y, x, dy *float32, n int) { panic("vec: no AVX2 kernels") }
func relu64(y, x, dy *float64, n int) { panic("vec: no AVX2 kernels") }

func expShiftSumAVX2(y, x *float32, n int, shift float32, k *[13][8]float32) float32 {
	panic("vec: no AVX2 kernels")
}

func sum32(x *float32, n int) float32                  { panic("vec: no AVX2 kernels") }
func dot32(x, y *float32, n int) float32               { panic("vec: no AVX2 kernels") }
func lin32(y, x1, x2 *float32, n int, a, b, c float32) { panic("vec: no AVX2 kernels") }
func mulAdd32(y, p, q, r *float32, n int)              { panic("vec: no AVX2 kernels") }

func adam32(p, grad *float32, m, v *float64, n int, k *[8]float64) { panic("vec: no AVX2 kernels") }
func adam64(p, grad *float64, m, v *float64, n int, k *[8]float64) { panic("vec: no AVX2 kernels") }
