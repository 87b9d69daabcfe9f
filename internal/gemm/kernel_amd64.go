//go:build amd64 && !purego

package gemm

//go:generate go run gen_kernels.go

import "golang.org/x/sys/cpu"

// avx2 is the set of 6x16 float32 and 6x8 float64 kernels on ymm registers.
// They can only add to C, a tile to be stored is cleared first, and they do
// not scale (alpha is 1: A comes scaled in its panel).
var avx2 = &kernelSet{
	name: "AVX2+FMA assembly (6x16)",
	f32: kernels[float32]{
		mr: 6, nr: 16,
		kernel: adding(6, 16, kernel6x16),
		direct: addingInPlace(6, 16, kernel6x16Direct),
	},
	f64: kernels[float64]{
		mr: 6, nr: 8,
		kernel: adding(6, 8, kernel6x8),
		direct: addingInPlace(6, 8, kernel6x8Direct),
	},
}

// adding and addingInPlace are packed and inPlace for the AVX2 kernels of
// an mr x nr tile, which only add to C: a tile to be stored is cleared
// first.
func adding[T Float](mr, nr int, f func(k int, a, b, c *T, ldc int)) func(int, []T, []T, []T, int, T, bool) {
	return func(k int, a, b, c []T, ldc int, _ T, store bool) {
		if store {
			clearTile(c, ldc, mr, nr)
		}
		f(k, &a[0], &b[0], &c[0], ldc)
	}
}

func addingInPlace[T Float](mr, nr int, f func(k int, a *T, lda int, b, c *T, ldc int)) func(int, []T, int, []T, []T, int, T, bool, ahead) {
	return func(k int, a []T, lda int, b, c []T, ldc int, _ T, store bool, _ ahead) {
		if store {
			clearTile(c, ldc, mr, nr)
		}
		f(k, &a[0], lda, &b[0], &c[0], ldc)
	}
}

// avx512 is the set of 12x32 float32 and 12x16 float64 kernels on zmm
// registers, with their edge kernels and row copies; they use only AVX512F
// instructions.
var avx512 = &kernelSet{
	name: "AVX-512 assembly (12x32)",
	f32: kernels[float32]{
		mr: 12, nr: 32, scales: true,
		kernel:   packed(kernel12x32),
		direct:   inPlace(kernel12x32Direct),
		rowsB:    copier(32, copyRows32f32),
		colsB:    transposer(gatherer(32, gatherCols32f32)),
		h:        packed(kernel12x32H),
		w:        packed(kernel12x32W),
		hw:       packed(kernel12x32HW),
		directW:  inPlace(kernel12x32WDirect),
		directT:  inPlace(kernel12x32T),
		directTW: inPlace(kernel12x32WT),
		directTRows: [12]func(int, []float32, int, []float32, []float32, int, float32, bool, ahead){
			4: inPlace(kernel4x32T), 5: inPlace(kernel5x32T), 8: inPlace(kernel8x32T),
		},
		directRows: [12]func(int, []float32, int, []float32, []float32, int, float32, bool, ahead){
			4: inPlace(kernel4x32Direct), 5: inPlace(kernel5x32Direct), 8: inPlace(kernel8x32Direct),
		},
	},
	f64: kernels[float64]{
		mr: 12, nr: 16, scales: true,
		kernel:   packed(kernel12x16),
		direct:   inPlace(kernel12x16Direct),
		rowsB:    copier(16, copyRows16f64),
		colsB:    gatherer(16, gatherCols16f64),
		h:        packed(kernel12x16H),
		w:        packed(kernel12x16W),
		hw:       packed(kernel12x16HW),
		directW:  inPlace(kernel12x16WDirect),
		directT:  inPlace(kernel12x16T),
		directTW: inPlace(kernel12x16WT),
		directTRows: [12]func(int, []float64, int, []float64, []float64, int, float64, bool, ahead){
			4: inPlace(kernel4x16T), 5: inPlace(kernel5x16T), 8: inPlace(kernel8x16T),
		},
		directRows: [12]func(int, []float64, int, []float64, []float64, int, float64, bool, ahead){
			4: inPlace(kernel4x16Direct), 5: inPlace(kernel5x16Direct), 8: inPlace(kernel8x16Direct),
		},
	},
}

// packed and inPlace wrap an assembly kernel on panels, or on A where it
// lies, as a function of slices.
func packed[T Float](f func(k int, a, b, c *T, ldc int, alpha T, store bool)) func(int, []T, []T, []T, int, T, bool) {
	return func(k int, a, b, c []T, ldc int, alpha T, store bool) { f(k, &a[0], &b[0], &c[0], ldc, alpha, store) }
}

func inPlace[T Float](f func(k int, a *T, lda int, b, c *T, ldc int, alpha T, store bool, nextA, nextC uintptr)) func(int, []T, int, []T, []T, int, T, bool, ahead) {
	return func(k int, a []T, lda int, b, c []T, ldc int, alpha T, store bool, next ahead) {
		f(k, &a[0], lda, &b[0], &c[0], ldc, alpha, store, next.a, next.c)
	}
}

// transposer packs a transposed float32 B as gatherer does, sixteen rows of
// the panel at a time by transposeCols32f32, the rows past a multiple of
// 16 by rest: in a profile of the nanoGPT preset's step (attention's Q Kᵀ
// and dO Vᵀ, Linear's dY Wᵀ), 1.1% of the time against the gather's 2.9%.
func transposer(rest func(int, []float32, int, []float32)) func(int, []float32, int, []float32) {
	return func(n int, src []float32, ld int, dst []float32) {
		if blocks := n / 16; blocks > 0 {
			transposeCols32f32(blocks, &src[:31*ld+16*blocks][0], ld, &dst[:16*blocks*32][0])
		}
		if r := n % 16; r > 0 {
			rest(r, src[n-r:], ld, dst[(n-r)*32:])
		}
	}
}

// kernelSets lists the sets this CPU can run, the fastest first; Gemm runs
// the first, tests and benchmarks each of them. x/sys/cpu reports AVX-512
// only when the operating system also saves the zmm and mask registers.
func kernelSets() []*kernelSet {
	var sets []*kernelSet
	if cpu.X86.HasAVX512F {
		sets = append(sets, avx512)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		sets = append(sets, avx2)
	}
	return sets
}

func init() {
	if sets := kernelSets(); len(sets) > 0 {
		active = sets[0]
	}
}

// kernel6x16 adds to the 6x16 float32 tile at c (leading dimension ldc) the
// product of the packed panels a (k columns of 6) and b (k rows of 16).
//
//go:noescape
func kernel6x16(k int, a, b, c *float32, ldc int)

// kernel6x8 is kernel6x16 for float64: a 6x8 tile.
//
//go:noescape
func kernel6x8(k int, a, b, c *float64, ldc int)

// kernel6x16Direct is kernel6x16 reading A's six rows, lda apart, from a
// instead of a packed panel.
//
//go:noescape
func kernel6x16Direct(k int, a *float32, lda int, b, c *float32, ldc int)

// kernel6x8Direct is kernel6x16Direct for float64.
//
//go:noescape
func kernel6x8Direct(k int, a *float64, lda int, b, c *float64, ldc int)

// kernel12x32 is kernel6x16 on AVX-512: a 12x32 float32 tile, from packed
// panels of 12 and 32, times alpha; with store, the tile is set to that
// instead of having it added.
//
//go:noescape
func kernel12x32(k int, a, b, c *float32, ldc int, alpha float32, store bool)

// kernel12x16 is kernel12x32 for float64: a 12x16 tile.
//
//go:noescape
func kernel12x16(k int, a, b, c *float64, ldc int, alpha float64, store bool)

// kernel12x32Direct is kernel12x32 reading A's twelve rows, lda apart, from
// a instead of a packed panel; meanwhile it prefetches the next tile's A
// and C, at nextA and nextC (ahead).
//
//go:noescape
func kernel12x32Direct(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

// kernel12x16Direct is kernel12x32Direct for float64.
//
//go:noescape
func kernel12x16Direct(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)

// copyRows32f32 copies n rows of 32 float32, ld apart from src, to
// consecutive rows at dst; n >= 0. copyRows16f64 is the same for 16
// float64.
//
//go:noescape
func copyRows32f32(n int, src *float32, ld int, dst *float32)

//go:noescape
func copyRows16f64(n int, src *float64, ld int, dst *float64)

// The edge kernels of kernel12x32 and kernel12x16, reading the same panels:
// H computes the tile's first 6 rows, W its first 16 (float32) or 8
// (float64) columns, HW both.
//
//go:noescape
func kernel12x32H(k int, a, b, c *float32, ldc int, alpha float32, store bool)

//go:noescape
func kernel12x32W(k int, a, b, c *float32, ldc int, alpha float32, store bool)

//go:noescape
func kernel12x32HW(k int, a, b, c *float32, ldc int, alpha float32, store bool)

//go:noescape
func kernel12x32WDirect(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

//go:noescape
func kernel12x16H(k int, a, b, c *float64, ldc int, alpha float64, store bool)

//go:noescape
func kernel12x16W(k int, a, b, c *float64, ldc int, alpha float64, store bool)

//go:noescape
func kernel12x16HW(k int, a, b, c *float64, ldc int, alpha float64, store bool)

//go:noescape
func kernel12x16WDirect(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)

// gatherCols32f32 sets row q of the 32-column panel at dst, for q < n, to
// element q of each of the 32 rows at src, ld apart (ld*32 < 2^31);
// gatherCols16f64 is the same for 16 float64 columns.
//
//go:noescape
func gatherCols32f32(n int, src *float32, ld int, dst *float32)

// transposeCols32f32 is gatherCols32f32 for n = 16 blocks, by 16 x 16
// transposes in registers.
//
//go:noescape
func transposeCols32f32(blocks int, src *float32, ld int, dst *float32)

//go:noescape
func gatherCols16f64(n int, src *float64, ld int, dst *float64)

// kernel12x32T is kernel12x32Direct for a transposed A read in place: the
// twelve values of each column of op(A) are consecutive, lda apart from
// one column to the next. kernel12x32WT computes the first 16 columns of
// the tile; kernel12x16T and kernel12x16WT are the same for float64.
//
//go:noescape
func kernel12x32T(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

//go:noescape
func kernel12x32WT(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

//go:noescape
func kernel12x16T(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)

//go:noescape
func kernel12x16WT(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)

// kernel4x32T, kernel5x32T and kernel8x32T are kernel12x32T for the tile's
// first 4, 5 or 8 rows, reading that many values of each column of op(A);
// the x16 ones are the same for float64.
//
//go:noescape
func kernel4x32T(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

//go:noescape
func kernel5x32T(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

//go:noescape
func kernel8x32T(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

//go:noescape
func kernel4x16T(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)

//go:noescape
func kernel5x16T(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)

//go:noescape
func kernel8x16T(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)

// kernel4x32Direct, kernel5x32Direct and kernel8x32Direct are
// kernel12x32Direct for the tile's first 4, 5 or 8 rows of A in place;
// they fetch nothing ahead (nextA and nextC are not read). The x16 ones
// are the same for float64.
//
//go:noescape
func kernel4x32Direct(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

//go:noescape
func kernel5x32Direct(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

//go:noescape
func kernel8x32Direct(k int, a *float32, lda int, b, c *float32, ldc int, alpha float32, store bool, nextA, nextC uintptr)

//go:noescape
func kernel4x16Direct(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)

//go:noescape
func kernel5x16Direct(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)

//go:noescape
func kernel8x16Direct(k int, a *float64, lda int, b, c *float64, ldc int, alpha float64, store bool, nextA, nextC uintptr)
