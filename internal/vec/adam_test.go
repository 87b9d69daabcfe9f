package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdam: each assembly path gives the same parameters and moments as
// the Go loop bit for bit, in both dtypes, with and without decay, over
// several steps and the test lengths and offsets, writing nothing beyond
// the slices; and one step is Adam's formula on every path, the Go loop's
// included.
func TestAdam(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testAdam[float32](t) })
	t.Run("float64", func(t *testing.T) { testAdam[float64](t) })
}

// adamRun is three Adam steps from zero moments on a copy of p, in slices
// off elements into guarded buffers, on the active path.
func adamRun[T float32 | float64](t *testing.T, p, g []T, off int, keep float64) ([]T, []float64, []float64) {
	n := len(p)
	q, checkQ := guarded[T](n, off)
	m, checkM := guarded[float64](n, off)
	v, checkV := guarded[float64](n, off)
	copy(q, p)
	clear(m)
	clear(v)
	for step := 1; step <= 3; step++ {
		c := AdamCoef{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Keep: keep,
			StepSize: 3e-3 / (1 - math.Pow(0.9, float64(step))), SqrtBC2: math.Sqrt(1 - math.Pow(0.999, float64(step)))}
		Adam(q, g, m, v, c)
	}
	checkQ(t)
	checkM(t)
	checkV(t)
	return q, m, v
}

func testAdam[T float32 | float64](t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range lengths {
		for _, keep := range []float64{1, 1 - 3e-3*0.01} {
			p, g := make([]T, n), make([]T, n)
			for i := range p {
				p[i], g[i] = T(r.NormFloat64()), T(r.NormFloat64()*1e-2)
			}
			usePath(t, nil)
			wantP, wantM, wantV := adamRun(t, p, g, 0, keep)
			for _, path := range paths() {
				if path.set == nil {
					continue // the reference
				}
				usePath(t, path.set)
				for _, off := range offsets {
					gotP, gotM, gotV := adamRun(t, p, g, off, keep)
					for j := range p {
						if gotP[j] != wantP[j] || gotM[j] != wantM[j] || gotV[j] != wantV[j] {
							t.Fatalf("%s n=%d keep=%v [%d]: p, m, v = %v, %v, %v; Go loop %v, %v, %v", path.name, n, keep, j,
								gotP[j], gotM[j], gotV[j], wantP[j], wantM[j], wantV[j])
						}
					}
				}
			}
		}
	}
	// One step from zero moments moves each parameter by lr * sign(g) (to
	// within eps): m/(1-b1) = g and sqrt(v/(1-b2)) = |g|.
	forEachPath(t, func(t *testing.T) {
		g := []T{0.5, -0.25, 2, -3, 1, 0.125, -1, 4, -0.5, 3}
		p := make([]T, len(g))
		for j := range p {
			p[j] = 1
		}
		m, v := make([]float64, len(p)), make([]float64, len(p))
		Adam(p, g, m, v, AdamCoef{Beta1: 0.9, Beta2: 0.999, Eps: 1e-12, Keep: 1, StepSize: 0.1 / (1 - 0.9), SqrtBC2: math.Sqrt(1 - 0.999)})
		for j := range p {
			want := 1 - 0.1*math.Copysign(1, float64(g[j]))
			if d := math.Abs(float64(p[j]) - want); d > 1e-6 {
				t.Errorf("first step of parameter %d with gradient %v: %v, want %v", j, g[j], p[j], want)
			}
		}
	})
}
