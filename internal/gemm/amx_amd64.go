//go:build linux && amd64 && !purego

package gemm

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/qkv-dev/qkv/internal/gemm/par"
)

// HasAMX reports whether GemmBF16 runs on AMX here: the CPU has AMX-TILE
// and AMX-BF16 (and AVX512_BF16, which rounds the operands), and Linux
// granted the process the tile state, asked for once, on the first call
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA: without it the first
// tile instruction kills the thread with SIGILL).
func HasAMX() bool { return amxGranted() }

var amxGranted = sync.OnceValue(func() bool {
	if !cpu.X86.HasAMXTile || !cpu.X86.HasAMXBF16 || !hasBF16 {
		return false
	}
	const archReqXcompPerm, xfeatureXtiledata = 0x1023, 18
	_, _, e := unix.Syscall(unix.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0)
	return e == 0
})

// amxConfig is the tile configuration amxRow loads: palette 1, all 8 tiles
// 16 rows of 64 bytes (16 float32 sums, 32 bf16 of A, or 16 bf16 pairs of B
// a row).
var amxConfig = func() (cfg [64]byte) {
	cfg[0] = 1
	for t := range 8 {
		cfg[16+2*t] = 64
		cfg[48+t] = 16
	}
	return
}()

// amxArgs are amxRow's arguments, read by the assembly at fixed offsets
// (in comments; amx_test.go checks them): one block of up to 32 rows of C
// across every panel of 32 columns.
type amxArgs struct {
	a            *uint32  // 0: op(A)'s 32 rows in bf16, lda bytes apart, zero-padded
	lda          int      // 8
	kc           int      // 16: chunks of 32 along k
	b            *uint32  // 24: op(B)'s first panel
	panel        int      // 32: bytes from one panel of B to the next
	nb           int      // 40: panels
	c            *float32 // 48: the block's first element of C
	ldc          int      // 56: bytes
	rows         int      // 64: rows of C in the block, 1 to 32
	direct       int      // 72: the leading panels whose sums go straight to C (alpha 1, beta 0 or 1, whole)
	beta1        int      // 80: 1 when those sums start from C (beta 1)
	mask0, mask1 int      // 88, 96: the last panel's columns, 0-15 and 16-31
	alpha, beta  float32  // 104, 108
	cfg          *byte    // 112
	tmp          *float32 // 120: 32x32 float32 a panel, the other panels' sums
	readC        int      // 128: 1 unless beta is 0 (C is then not read)
	first, last  int      // 136, 144: 1 on the first (last) block of k
}

// amxRow computes one block of rows of C on AMX (gen_bf16.go): it loads
// the tile configuration, and releases the tiles before it returns, so that
// no tile state outlives the call. Go never preempts assembly (its
// asynchronous preemption stops only at safe points of compiled Go), so
// the goroutine cannot move to another thread, whose tiles would be
// unconfigured, in between; signals do not disturb it, Linux saves and
// restores the tiles around a handler.
//
//go:noescape
func amxRow(p *amxArgs)

// amxWork is one GemmBF16 call's packed operands and its workers' scratch.
type amxWork struct {
	transA, transB bool
	m, n, k        int
	k2             int // pairs along k, padded to a multiple of 16 (32 bf16)
	a              []float32
	lda            int
	b              []float32
	ldb            int
	alpha, beta    float32
	c              []float32
	ldc            int
	packedB        []uint32 // op(B) in panels of 32 columns, k2 rows of 32 pairs each
	packedA        []uint32 // with transA, A's pairs of rows in panels of 32 columns, as op(B)'s
	t              []uint32 // a panel of op(B) before its transposition
	ws             []amxWorker
}

// amxWorker is one worker's scratch: a block of op(A)'s rows in bf16 and
// the sums of edge blocks.
type amxWorker struct {
	a    []uint32
	tmp  []float32
	args amxArgs
}

// amxChunks is how many chunks of 32 along k a block of k spans at most:
// 256, so that a block of A's rows (16 KB) stays in L1 (48 KB here) across
// every panel, and a panel's part of B (16 KB) too. In one pass over k,
// both outgrow L1 at the preset's k = 780 and the tile loads wait on L2:
// those products measured 0-20% slower (BenchmarkGemmBF16, nano/xtdy).
const amxChunks = 8

var amxWorks = sync.Pool{New: func() any { return new(amxWork) }}

// GemmBF16 sets C = alpha op(A) op(B) + beta C as Gemm does for float32,
// but multiplies op(A) and op(B) rounded to bf16 (to nearest, ties to even),
// summing the products in float32 on AMX's TDPBF16PS; alpha and beta apply
// in float32 as in Gemm. Each operand is rounded and packed once a call.
// Where HasAMX is false it is Gemm. The arguments are not checked.
func GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !HasAMX() {
		Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		p := problem[float32]{beta: beta, c: c, ldc: ldc}
		p.scaleC(0, m, 0, n)
		return
	}
	w := amxWorks.Get().(*amxWork)
	*w = amxWork{transA: transA, transB: transB, m: m, n: n, k: k, k2: (k + 31) / 32 * 16,
		a: a, lda: lda, b: b, ldb: ldb, alpha: alpha, beta: beta, c: c, ldc: ldc,
		packedB: w.packedB, packedA: w.packedA, t: w.t, ws: w.ws}
	w.packB()
	if transA { // once for every block of rows, reading A in order
		w.packedA = growU32(w.packedA, (m+31)/32*32*w.k2)
		packPairs(w.packedA, a, lda, m, k, w.k2)
	}
	blocks := (m + 31) / 32
	workers := par.Workers()
	if m*n*k < parallelWork || blocks < 2 {
		workers = 1
	}
	for len(w.ws) < workers {
		w.ws = append(w.ws, amxWorker{})
	}
	if workers == 1 {
		for i := range blocks {
			w.Item(0, i)
		}
	} else {
		par.Run(blocks, workers, w)
	}
	w.a, w.b, w.c = nil, nil, nil // do not keep the caller's matrices alive
	amxWorks.Put(w)
}

// packB rounds op(B) to bf16 pairs in panels of 32 columns.
func (w *amxWork) packB() {
	nb := (w.n + 31) / 32
	w.packedB = growU32(w.packedB, nb*w.k2*32)
	if !w.transB { // op(B) is B: pairs of its rows
		packPairs(w.packedB, w.b, w.ldb, w.n, w.k, w.k2)
		return
	}
	for j := range nb { // op(B) is B^T: B's rows are op(B)'s columns, pairs consecutive
		dst := w.packedB[j*w.k2*32:][:w.k2*32]
		cols := min(32, w.n-32*j)
		w.t = growU32(w.t, 32*w.k2)
		roundRows(w.t, w.b, w.ldb, 32*j, cols, w.k, w.k2)
		transpose32(dst, w.t, 32, w.k2)
	}
}

// Item computes the block of rows i of C (32 rows) on worker's scratch.
func (w *amxWork) Item(worker, i int) {
	s := &w.ws[worker]
	rows := min(32, w.m-32*i)
	s.a = growU32(s.a, 32*w.k2)
	if !w.transA { // op(A)'s rows are A's
		roundRows(s.a, w.a, w.lda, 32*i, rows, w.k, w.k2)
	} else { // A's columns: its panel of pairs of A's rows (packedA), transposed
		transpose32(s.a, w.packedA[i*32*w.k2:][:32*w.k2], w.k2, 32)
	}
	nb := (w.n + 31) / 32
	last := w.n - 32*(nb-1) // columns in the last panel
	direct := 0
	if w.alpha == 1 && (w.beta == 0 || w.beta == 1) && rows == 32 {
		direct = nb
		if last < 32 {
			direct--
		}
	}
	mask := uint32(1)<<last - 1
	if direct < nb {
		s.tmp = growF32(s.tmp, 1024*nb)
	}
	kc := w.k2 / 16
	blocks := (kc + amxChunks - 1) / amxChunks
	per := (kc + blocks - 1) / blocks // chunks a block of k, evened out
	for c0 := 0; c0 < kc; c0 += per {
		s.args = amxArgs{
			a: &s.a[c0*16], lda: w.k2 * 4, kc: min(per, kc-c0),
			b: &w.packedB[c0*16*32], panel: w.k2 * 128, nb: nb,
			c: &w.c[32*i*w.ldc], ldc: w.ldc * 4, rows: rows,
			direct: direct, beta1: b2i(w.beta == 1),
			mask0: int(mask & 0xffff), mask1: int(mask >> 16),
			alpha: w.alpha, beta: w.beta, cfg: &amxConfig[0],
			readC: b2i(w.beta != 0), first: b2i(c0 == 0), last: b2i(c0+per >= kc),
		}
		if direct < nb {
			s.args.tmp = &s.tmp[0]
		}
		amxRow(&s.args)
	}
}

func growF32(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// packPairs rounds to bf16 the first k rows of src (n columns, ld apart)
// and stores them in dst as panels of 32 columns, each k2 rows of 32 pairs
// (k2*32 uint32 a panel): dst[j*k2*32+q*32+c] holds src's rows 2q and 2q+1
// in column 32j+c, the first in the low half. What lies beyond k and n is
// zero. Whole panels are packed in assembly, reading src row pair by row
// pair in order; the last row of an odd k and a last partial panel here.
func packPairs(dst []uint32, src []float32, ld, n, k, k2 int) {
	full, whole := n/32, 0
	if full > 0 && k >= 2 {
		whole = k / 2
		packPairsBF16(whole, full, &src[0], ld*4, &dst[0], k2*128, &bf16Interleave[0])
	}
	for j := range (n + 31) / 32 {
		panel := dst[j*k2*32:][:k2*32]
		cols, q := min(32, n-32*j), whole
		if cols < 32 {
			q = 0
		}
		for ; q < k2; q++ {
			row := panel[q*32:][:32]
			clear(row)
			if 2*q >= k {
				continue
			}
			for c := range cols {
				v := uint32(toBF16(src[2*q*ld+32*j+c]))
				if 2*q+1 < k {
					v |= uint32(toBF16(src[(2*q+1)*ld+32*j+c])) << 16
				}
				row[c] = v
			}
		}
	}
}

// packPairsBF16 packs k2 row pairs of panels whole panels of src (ld bytes
// apart) as packPairs does, panel bytes from one panel to the next; idx is
// bf16Interleave.
//
//go:noescape
func packPairsBF16(k2, panels int, src *float32, ld int, dst *uint32, panel int, idx *uint16)

// roundRows rounds to bf16 the rows row0 to row0+rows-1 (rows at most 32)
// of src (k values each, ld apart) into dst's 32 rows of k2 pairs, in
// order, zero beyond k and rows.
func roundRows(dst []uint32, src []float32, ld, row0, rows, k, k2 int) {
	t := k & 31
	tail := uint32(1)<<t - 1 // the last partial group's lanes
	for r := range 32 {
		d := dst[r*k2:][:k2]
		if r >= rows {
			clear(d)
			continue
		}
		roundRowBF16(k, 2*k2, &src[(row0+r)*ld], (*uint16)(unsafe.Pointer(&d[0])), tail)
	}
}

// roundRowBF16 rounds n float32 to bf16, in order, and writes zeros after
// them up to padded (a multiple of 32, at least n); tail masks the values
// of the last group of 32 when n is not a multiple of 32 (bit i: value i
// of the group), so that nothing beyond n is read.
//
//go:noescape
func roundRowBF16(n, padded int, src *float32, dst *uint16, tail uint32)

// transpose32 sets dst (cols x rows) to the transpose of src (rows x cols),
// both row-major and multiples of 16 (k2 and 32, here): the pairs of bf16
// move together.
func transpose32(dst, src []uint32, rows, cols int) {
	transposeU32(&dst[0], &src[0], rows, cols, &transposeIndex)
}

// transposeIndex holds transposeU32's VPERMT2D indices, two for each stage
// b = 8, 4, 2, 1 (gen_bf16.go's transpose): the new row i (bit b clear)
// keeps its columns c with bit b clear and takes row i+b's column c-b
// (16+: the second table) for the others; the new row i+b takes row i's
// column c+b for c with bit b clear, and keeps its own for the others.
var transposeIndex = func() (idx [8][16]uint32) {
	for s, b := range []uint32{8, 4, 2, 1} {
		for c := range uint32(16) {
			if c&b == 0 {
				idx[2*s][c], idx[2*s+1][c] = c, c+b
			} else {
				idx[2*s][c], idx[2*s+1][c] = 16+c-b, 16+c
			}
		}
	}
	return
}()

// transposeU32 is transpose32 in assembly (gen_bf16.go), idx
// transposeIndex.
//
//go:noescape
func transposeU32(dst, src *uint32, rows, cols int, idx *[8][16]uint32)
