package decode

import (
	"math/rand/v2"
	"testing"
)

// TestMv4x2SameBits checks that the two-row product gives each row the
// bits mv4 gives it alone (so a row's logits do not depend on how many
// rows it is decoded with, nor a primed position on whether it was fed
// one at a time), for every k up to past a block and odd, and that both
// agree with the portable loops within float32 rounding.
func TestMv4x2SameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range []int{1, 2, 3, 16, 31, 64, 127, 128} {
		pstride := panelW*k + 3*panelW // panels apart, not adjacent
		w := make([]float32, 3*pstride+panelW*k)
		x0, x1 := make([]float32, k), make([]float32, k)
		for _, s := range [][]float32{w, x0, x1} {
			for i := range s {
				s[i] = float32(r.NormFloat64())
			}
		}
		y0, y1 := make([]float32, 64), make([]float32, 64)
		for i := range y0 {
			y0[i], y1[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		want0, want1 := append([]float32(nil), y0...), append([]float32(nil), y1...)
		mv4(want0, x0, w, k, pstride)
		mv4(want1, x1, w, k, pstride)
		go0, go1 := append([]float32(nil), y0...), append([]float32(nil), y1...)
		for p := range 4 {
			mv1Go(go0[p*panelW:(p+1)*panelW], x0, w[p*pstride:p*pstride+panelW*k])
			mv1Go(go1[p*panelW:(p+1)*panelW], x1, w[p*pstride:p*pstride+panelW*k])
		}
		mv4x2(y0, y1, x0, x1, w, k, pstride)
		for i := range y0 {
			if y0[i] != want0[i] || y1[i] != want1[i] {
				t.Fatalf("k %d, element %d: mv4x2 gives %v, %v; mv4 %v, %v", k, i, y0[i], y1[i], want0[i], want1[i])
			}
			for _, c := range [][2]float32{{y0[i], go0[i]}, {y1[i], go1[i]}} {
				if d := c[0] - c[1]; d > 1e-4*float32(k) || d < -1e-4*float32(k) {
					t.Fatalf("k %d, element %d: %v, the portable loops %v", k, i, c[0], c[1])
				}
			}
		}
	}
}
