package gemm

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// BenchmarkSgemmCold times the nanoGPT preset's products warm (the
// operands left in cache by the previous call, as BenchmarkSgemm) and cold
// (4 MiB, twice L2, written between calls, untimed, so that A, B and C come from
// memory, as they do in a training step where each product reads what
// another op just wrote): the gap is what prefetchA and prefetchC recover.
func BenchmarkSgemmCold(b *testing.B) {
	junk := make([]float32, 4<<20/4)
	for _, s := range benchShapes {
		if !strings.HasPrefix(s.name, "nano/") {
			continue
		}
		for _, cold := range []bool{false, true} {
			name := s.name + "/warm"
			if cold {
				name = s.name + "/cold"
			}
			b.Run(name, func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				a, lda, bm, ldb, c, ldc := operands[float32](r, shape{s.m, s.n, s.k, 0}, s.transA, s.transB)
				for b.Loop() {
					if cold {
						b.StopTimer()
						for i := range junk {
							junk[i]++
						}
						b.StartTimer()
					}
					Gemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, ldc)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
