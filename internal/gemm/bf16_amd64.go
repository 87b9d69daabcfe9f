//go:build amd64 && !purego

package gemm

//go:generate go run gen_bf16.go

import (
	"math"

	"golang.org/x/sys/cpu"
)

// The AVX512_BF16 experiment (docs/speed-peak.md): does a bf16 product,
// float32 inputs rounded to bf16 and float32 sums (VDPBF16PS), beat the
// float32 kernels by enough to be worth a training path? It is measured
// here, by bf16_test.go's benchmarks, and wired into nothing: sgemmBF16 is
// the single-goroutine product of the measurement, not a Gemm. (It does not
// pay; AMX does: amx_amd64.go's GemmBF16 shares toBF16 and bf16Interleave.)

// hasBF16 says whether this CPU (and the operating system, for the zmm
// registers) runs AVX512_BF16.
var hasBF16 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512BF16

// bf16Interleave is packBBF16's VPERMW index: word 2j of the result is
// word j of the first row's 16, word 2j+1 word j of the second's.
var bf16Interleave = func() (idx [32]uint16) {
	for j := range 16 {
		idx[2*j], idx[2*j+1] = uint16(j), uint16(16+j)
	}
	return
}()

// toBF16 rounds x to bf16 to nearest, ties to even, as VCVTNE2PS2BF16 does
// (a NaN stays a NaN).
func toBF16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// fromBF16 is the float32 of a bf16.
func fromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// bf16Work holds sgemmBF16's rounded and packed operands between calls.
type bf16Work struct {
	rows []uint16 // A's rows rounded, k a row
	a, b []uint32 // A's panels of 12 rows, B's of 32 columns
}

// sgemmBF16 adds to C (m x n, ldc) the product of A (m x k, lda) and B
// (k x n, ldb), row-major float32, computed from their bf16 roundings with
// float32 sums: every operand is rounded and packed (the cost a bf16 path
// pays that a float32 one, which only packs, does not), then the 12x32
// kernel runs over the tiles. m must be a multiple of 12, n of 32, k even.
func sgemmBF16(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, w *bf16Work) {
	k2 := k / 2
	w.rows = growU16(w.rows, m*k)
	w.a = growU32(w.a, m*k2)
	w.b = growU32(w.b, n*k2)
	for i := range m { // round A's rows
		row, dst := a[i*lda:][:k], w.rows[i*k:][:k]
		whole := k &^ 31
		if whole > 0 {
			roundBF16(whole, &row[0], &dst[0])
		}
		for q := whole; q < k; q++ {
			dst[q] = toBF16(row[q])
		}
	}
	for i0 := 0; i0 < m; i0 += 12 { // pack A: the 12 rows' pairs, pair by pair
		panel := w.a[i0*k2:][:12*k2]
		for r := range 12 {
			row := w.rows[(i0+r)*k:][:k]
			for q := range k2 {
				panel[q*12+r] = uint32(row[2*q]) | uint32(row[2*q+1])<<16
			}
		}
	}
	for j0 := 0; j0 < n; j0 += 32 { // round and pack B
		packBBF16(k2, &b[j0], ldb, &w.b[j0*k2], &bf16Interleave[0])
	}
	for j0 := 0; j0 < n; j0 += 32 {
		for i0 := 0; i0 < m; i0 += 12 {
			kernelBF16x12x32(k2, &w.a[i0*k2], &w.b[j0*k2], &c[i0*ldc+j0], ldc)
		}
	}
}

func growU16(s []uint16, n int) []uint16 {
	if cap(s) < n {
		return make([]uint16, n)
	}
	return s[:n]
}

func growU32(s []uint32, n int) []uint32 {
	if cap(s) < n {
		return make([]uint32, n)
	}
	return s[:n]
}

// peakBF16 runs n iterations of 16 independent VDPBF16PS on zmm registers:
// 16*32*2 = 1024 operations an iteration, counting each bf16 product and
// its sum as two, as a float32 multiply-add.
//
//go:noescape
func peakBF16(n int)

// kernelBF16x12x32 adds to the 12x32 float32 tile at c (ldc) the product
// of a panel of A, k2 groups of 12 bf16 pairs (a[r][2q], a[r][2q+1]), and
// one of B, k2 groups of 32 pairs (b[2q][j], b[2q+1][j]).
//
//go:noescape
func kernelBF16x12x32(k2 int, a, b *uint32, c *float32, ldc int)

// packBBF16 rounds to bf16 and packs 32 columns of k2 pairs of rows of B
// (ldb apart) as kernelBF16x12x32 reads them; idx is bf16Interleave.
//
//go:noescape
func packBBF16(k2 int, b *float32, ldb int, dst *uint32, idx *uint16)

// roundBF16 rounds n float32 (a multiple of 32) to bf16, in order.
//
//go:noescape
func roundBF16(n int, src *float32, dst *uint16)

// peakAMX runs n iterations of 4 independent TDPBF16PS on AMX tiles
// configured by cfg (64 bytes: palette 1, 16 rows of 64 bytes each):
// 4*16*16*32*2 = 65536 operations an iteration.
//
//go:noescape
func peakAMX(n int, cfg *byte)
