package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdam: the assembly and the Go loop give the same parameters and
// moments bit for bit, in both dtypes, with and without decay, over several
// steps; and one step of the Go loop is Adam's formula.
func TestAdam(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testAdam[float32](t) })
	t.Run("float64", func(t *testing.T) { testAdam[float64](t) })
}

func testAdam[T float32 | float64](t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 here: only the Go loop runs")
	}
	defer func(v bool) { useAVX2 = v }(useAVX2)
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 3, 4, 5, 8, 13, 100} {
		for _, keep := range []float64{1, 1 - 3e-3*0.01} {
			p, g := make([]T, n), make([]T, n)
			for i := range p {
				p[i], g[i] = T(r.NormFloat64()), T(r.NormFloat64()*1e-2)
			}
			var runs [2]struct {
				p    []T
				m, v []float64
			}
			for i, avx := range []bool{true, false} {
				useAVX2 = avx
				runs[i].p = append([]T(nil), p...)
				runs[i].m, runs[i].v = make([]float64, n), make([]float64, n)
				for step := 1; step <= 3; step++ {
					c := AdamCoef{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Keep: keep,
						StepSize: 3e-3 / (1 - math.Pow(0.9, float64(step))), SqrtBC2: math.Sqrt(1 - math.Pow(0.999, float64(step)))}
					Adam(runs[i].p, g, runs[i].m, runs[i].v, c)
				}
			}
			for j := range p {
				if runs[0].p[j] != runs[1].p[j] || runs[0].m[j] != runs[1].m[j] || runs[0].v[j] != runs[1].v[j] {
					t.Fatalf("n=%d keep=%v [%d]: assembly p, m, v = %v, %v, %v; Go %v, %v, %v", n, keep, j,
						runs[0].p[j], runs[0].m[j], runs[0].v[j], runs[1].p[j], runs[1].m[j], runs[1].v[j])
				}
			}
		}
	}
	// One step from zero moments moves each parameter by lr * sign(g) (to
	// within eps): m/(1-b1) = g and sqrt(v/(1-b2)) = |g|.
	p, g := []T{1, 1, 1, 1, 1}, []T{0.5, -0.25, 2, -3, 1}
	m, v := make([]float64, 5), make([]float64, 5)
	Adam(p, g, m, v, AdamCoef{Beta1: 0.9, Beta2: 0.999, Eps: 1e-12, Keep: 1, StepSize: 0.1 / (1 - 0.9), SqrtBC2: math.Sqrt(1 - 0.999)})
	for j := range p {
		want := 1 - 0.1*math.Copysign(1, float64(g[j]))
		if d := math.Abs(float64(p[j]) - want); d > 1e-6 {
			t.Errorf("first step of parameter %d with gradient %v: %v, want %v", j, g[j], p[j], want)
		}
	}
}
