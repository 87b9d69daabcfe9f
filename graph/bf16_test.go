package graph

import (
	"errors"
	"math"
	"testing"

	"gonum.org/v1/gonum/blas"

	fastgemm "github.com/qkv-dev/qkv/internal/gemm"
)

// TestUseBF16Linear: off by default; on, Linear's float32 products are
// GemmBF16's, bit for bit, and not float32's, while float64 ones stay
// exact; where the CPU lacks AMX, turning it on is ErrNoAMX and leaves it
// off.
func TestUseBF16Linear(t *testing.T) {
	if bf16Linear.Load() {
		t.Fatal("bf16 Linear products are on by default")
	}
	was, err := UseBF16Linear(true)
	if !fastgemm.HasAMX() {
		if !errors.Is(err, ErrNoAMX) || bf16Linear.Load() {
			t.Fatalf("without AMX: UseBF16Linear(true) = %v, switch %t; want ErrNoAMX, off", err, bf16Linear.Load())
		}
		t.Skip("no AMX-BF16 here: only the refusal is checked")
	}
	if err != nil || was {
		t.Fatalf("UseBF16Linear(true) = %t, %v; want false, nil", was, err)
	}
	defer UseBF16Linear(false)
	const m, n, k = 33, 20, 70
	a, b := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(math.Sin(float64(i)))
	}
	for i := range b {
		b[i] = float32(math.Cos(float64(3 * i)))
	}
	got, want, f32 := make([]float32, m*n), make([]float32, m*n), make([]float32, m*n)
	gemm(blas.NoTrans, blas.NoTrans, m, n, k, a, b, 0, got)
	fastgemm.GemmBF16(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
	fastgemm.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, f32, n)
	differs := false
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("C[%d] = %v, GemmBF16's %v", i, got[i], want[i])
		}
		differs = differs || got[i] != f32[i]
	}
	if !differs {
		t.Error("the bf16 product equals float32's: the switch changed nothing")
	}
	a64, b64, c64 := []float64{1 + 1.0/512}, []float64{1}, []float64{0}
	gemm(blas.NoTrans, blas.NoTrans, 1, 1, 1, a64, b64, 0, c64)
	if c64[0] != 1+1.0/512 {
		t.Errorf("float64 product %v, want %v: bf16 applies to float32 only", c64[0], 1+1.0/512)
	}
	if was, _ := UseBF16Linear(false); !was || bf16Linear.Load() {
		t.Errorf("UseBF16Linear(false) returned %t and left the switch %t; want true, off", was, bf16Linear.Load())
	}
}
