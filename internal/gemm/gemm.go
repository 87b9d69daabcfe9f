package gemm

import (
	"math"
	"sync"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/qkv-dev/qkv/internal/gemm/par"
)

// Float is the element type of the matrices.
type Float interface{ float32 | float64 }

// Cache blocking: a kc-deep slice of op(B), nc columns wide, is packed once
// and reused by every mc-row block of op(A), which stays in L2 while the
// kernel walks across it.
const (
	kc = 256
	mc = 120
	nc = 2048
)

// parallelWork is the number of multiply-adds (m n k) above which a product
// is split over the cores (par.Run): below it, handing out the strips costs
// more than it saves. Measured on two cores with the AVX-512 kernels when
// every product started goroutines of its own (about 10 µs of one core's
// work): 65x32x65 took 7 µs split against 3 alone, 128x128x128 32 against
// 23, 192x128x192 the same either way; the default bench model's step went
// from 10.0 to 9.4 ms when 1 << 16 became 1 << 21.
const parallelWork = 1 << 21

// stripsPerWorker is how many strips of C a split hands each worker: more
// than one, so that a worker that starts late (its core busy with another
// process) leaves its strips to the others instead of making them wait;
// few, because each strip packs its own panels of B.
const stripsPerWorker = 2

// Gemm sets C = alpha op(A) op(B) + beta C, where op(A) is (m, k), op(B) is
// (k, n), and C is (m, n), all row-major with leading dimensions lda, ldb and
// ldc; op(X) is X, or its transpose when transX is true. The arguments are
// those of BLAS's ?gemm for row-major matrices and are not checked: the
// BLAS type checks them.
func Gemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	j := splitsOf[T]().get()
	j.p = problem[T]{transA: transA, transB: transB, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc}
	workers := par.Workers()
	for len(j.ws) < workers {
		j.ws = append(j.ws, Workspace[T]{})
	}
	if workers > 1 && m*n*k >= parallelWork && kernelsOf[T]() != nil {
		j.split(m, n, workers)
	} else {
		j.ws[0].gemm(&j.p, m, n)
	}
	j.p = problem[T]{} // do not keep the caller's matrices alive
	splitsOf[T]().put(j)
}

// Workspace holds the packed panels of one goroutine's products from one
// call to the next; the zero value is ready to use, and one workspace must
// not be used by two goroutines at once.
type Workspace[T Float] struct{ buf buffers[T] }

// Gemm is the package's Gemm on the calling goroutine alone, packing into
// w: for kernels that already share their work over the cores (attention
// heads, flash tiles) and keep a workspace per goroutine. The result is
// Gemm's, bit for bit.
func (w *Workspace[T]) Gemm(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	w.gemm(&problem[T]{transA: transA, transB: transB, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc}, m, n)
}

// Triangle tells Workspace.GemmTriangle which work a triangle of zeros, or
// of values nobody reads, lets it skip: causal attention's products, whose
// weights are 0 above the diagonal.
type Triangle struct {
	Shape TriangleShape
	// Off moves the diagonal: row i's bound is column i + Off.
	Off int
}

// TriangleShape is the kind of triangle (Triangle).
type TriangleShape uint8

const (
	// Full: nothing is skipped.
	Full TriangleShape = iota
	// LowerC: only C[i][j] with j <= i + Off is wanted. The tiles of C
	// wholly above that diagonal are not computed and keep what they held;
	// the tiles it crosses are computed whole.
	LowerC
	// LowerA: op(A)[i][q] = 0 for q > i + Off, so each tile of C sums
	// only up to its last row's bound.
	LowerA
	// UpperA: op(A)[i][q] = 0 for q < i + Off, so each tile of C sums
	// only from its first row's bound.
	UpperA
)

// GemmTriangle is Workspace.Gemm skipping the work tri allows. A sum that
// skips terms of A's triangle skips only products of a 0 with a finite B:
// it starts from +0 and adding them would not have changed it, so C is
// Gemm's bit for bit (TestGemmTriangle) where tri does not leave it
// unwritten. Where there are no assembly kernels it is Gemm.
func (w *Workspace[T]) GemmTriangle(tri Triangle, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	w.gemm(&problem[T]{transA: transA, transB: transB, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc, tri: tri}, m, n)
}

// TriangleWork is the multiply-adds GemmTriangle runs for C (m, n) over k
// with tri on this machine's kernels, counted as Gemm's m n k are: each
// tile it computes, of C's rows and columns, times the part of the shared
// dimension it sums. A FLOP count (qkv bench) counts these, not m n k.
func TriangleWork[T Float](tri Triangle, m, n, k int) float64 {
	if kernelsOf[T]() == nil || tri.Shape == Full {
		return float64(m) * float64(n) * float64(k)
	}
	mr, nr := tile[T]()
	p := problem[T]{k: k}
	var work float64
	for pc := 0; pc < k; pc += p.kStep() {
		kb := min(p.kStep(), k-pc)
		for i0 := 0; i0 < m; i0 += mr {
			i1 := min(i0+mr, m)
			for j0 := 0; j0 < n; j0 += nr {
				if k0, k1, compute := tri.span(i0, i1, j0, pc, kb); compute {
					work += float64((i1 - i0) * (min(j0+nr, n) - j0) * (k1 - k0))
				}
			}
		}
	}
	return work
}

// span returns the part [k0, k1) of the shared dimension's block [pc,
// pc+kb) that the tile of rows [i0, i1) of C, from column j0, sums over,
// and whether the tile is computed at all.
func (t Triangle) span(i0, i1, j0, pc, kb int) (k0, k1 int, compute bool) {
	k0, k1 = pc, pc+kb
	switch t.Shape {
	case LowerC:
		return k0, k1, j0 <= i1-1+t.Off
	case LowerA:
		k1 = min(k1, i1+t.Off)
	case UpperA:
		k0 = max(k0, i0+t.Off)
	}
	return k0, max(k0, k1), true
}

// gemm computes p, of C (m, n), on the calling goroutine.
func (w *Workspace[T]) gemm(p *problem[T], m, n int) {
	if m == 0 || n == 0 {
		return
	}
	if kernelsOf[T]() == nil {
		p.gonum(m, n)
		return
	}
	p.run(&w.buf, 0, m, 0, n)
}

// gonum computes p on gonum's GEMM, for machines without the assembly
// kernels: the same blocking compiled from Go loops was slower than gonum's,
// which on amd64 has SSE inner loops of its own. Only beta applies when
// there is nothing to multiply, as in run.
func (p *problem[T]) gonum(m, n int) {
	if p.k == 0 || p.alpha == 0 {
		p.scaleC(0, m, 0, n)
		return
	}
	tA, tB := blas.NoTrans, blas.NoTrans
	if p.transA {
		tA = blas.Trans
	}
	if p.transB {
		tB = blas.Trans
	}
	switch a := any(p.a).(type) {
	case []float32:
		gonum.Implementation{}.Sgemm(tA, tB, m, n, p.k, float32(p.alpha), a, p.lda, any(p.b).([]float32), p.ldb, float32(p.beta), any(p.c).([]float32), p.ldc)
	case []float64:
		gonum.Implementation{}.Dgemm(tA, tB, m, n, p.k, float64(p.alpha), a, p.lda, any(p.b).([]float64), p.ldb, float64(p.beta), any(p.c).([]float64), p.ldc)
	}
}

// splitJob is one Gemm call, kept from call to call with its workspaces:
// one per worker of par.Run, each keeping its packed panels, so that a
// split product allocates nothing once they have grown.
type splitJob[T Float] struct {
	p         problem[T]
	m, n      int
	rows      bool // strips of rows of C, else of columns
	size, per int  // the side split into strips, and a strip's width
	ws        []Workspace[T]
	b         []T // op(B) packed for all the strips of rows
	// packing: Item packs group i of packPer panels of op(B) into b,
	// every block of the shared dimension, instead of computing a strip.
	packing bool
	packPer int
}

// split computes C in strips along its longer side, in whole kernel tiles,
// each an independent GEMM with its own packing, shared over workers
// goroutines (par.Run). No element of C is summed across strips, so the
// result is the same however the strips fall.
func (j *splitJob[T]) split(m, n, workers int) {
	mr, nr := tile[T]()
	j.m, j.n = m, n
	j.rows = m/mr >= n/nr
	step := nr
	j.size = n
	if j.rows {
		j.size, step = m, mr
	}
	per := (j.size + workers*stripsPerWorker - 1) / (workers * stripsPerWorker)
	j.per = (per + step - 1) / step * step
	if j.rows && j.p.k > 0 && j.p.alpha != 0 {
		// Every strip of rows reads all of op(B): packed once here, not
		// by each strip (the preset's two-core step had packed 2.7 times
		// the bytes one core packs, and its weight gradients with m =
		// 512 copied dY four times). The workers pack it, a group of
		// panels each, before they compute, where that is worth
		// sharing: packed by the caller alone, it had left the second
		// core idle for 1.2 ms of the preset's two-core step, nearly
		// half of the step's packing.
		panels := (n + nr - 1) / nr
		j.b = grow(j.b, panels*nr*j.p.k)
		packers := min(workers, par.WorkersFor(2*n*j.p.k))
		j.p.sharedPanels = panels
		j.packing, j.packPer = true, (panels+packers-1)/packers
		par.Run((panels+j.packPer-1)/j.packPer, packers, j)
		j.packing = false
		j.p.sharedB = j.b
	}
	par.Run((j.size+j.per-1)/j.per, workers, j)
}

// Item computes strip i of C on worker w's workspace, or packs group i of
// panels of op(B).
func (j *splitJob[T]) Item(w, i int) {
	if j.packing {
		nr := kernelsOf[T]().nr
		jc := i * j.packPer * nr
		nb := min(j.packPer*nr, j.n-jc)
		kStep := j.p.kStep()
		for pc := 0; pc < j.p.k; pc += kStep {
			kb := min(kStep, j.p.k-pc)
			j.p.packB(j.b[pc*j.p.sharedPanels*nr+jc*kb:], pc, kb, jc, nb)
		}
		return
	}
	lo, hi := i*j.per, min((i+1)*j.per, j.size)
	if j.rows {
		j.p.run(&j.ws[w].buf, lo, hi, 0, j.n)
	} else {
		j.p.run(&j.ws[w].buf, 0, j.m, lo, hi)
	}
}

// problem holds one call's arguments.
type problem[T Float] struct {
	transA, transB bool
	k              int
	alpha          T
	a              []T
	lda            int
	b              []T
	ldb            int
	beta           T
	c              []T
	ldc            int
	// sharedB, when not nil, is op(B) already packed, sharedPanels panels
	// of nr wide: for each block of kStep rows from pc, its panels one
	// after another from pc*sharedPanels*nr.
	sharedB      []T
	sharedPanels int
	tri          Triangle // what may be skipped (GemmTriangle)
}

// OneBlock reports whether a product of depth k (the shared dimension) is
// computed in one block of it: then, with beta 1, each element of C gets
// its product added once, c + p rounded once, as a separate addition of
// the product would give. A deeper product adds its blocks' partial sums
// into C one after another.
func OneBlock(k int) bool { return k <= kc }

// kStep is the depth of the blocks the shared dimension is cut into: equal
// blocks of at most kc, so that no block is a thin remainder (780 = 4 x
// 195, not 3 x 256 + 12) whose C tiles cost more to load and store than
// to compute.
func (p *problem[T]) kStep() int {
	blocks := (p.k + kc - 1) / kc
	return (p.k + blocks - 1) / blocks
}

// buffers are the packed panels of one goroutine, reused across calls.
type buffers[T Float] struct {
	a, b []T
	edge []T // one tile of C for the partial tiles at the right and bottom
}

// freeList keeps values for reuse from one call to the next. Unlike a
// sync.Pool's, its values survive garbage collection: a training step
// collects garbage every few steps, and packed panels dropped by a
// collection would be allocated and zeroed again. It holds at most as many
// values as calls were ever in progress at once.
type freeList[V any] struct {
	mu   sync.Mutex
	free []*V
}

func (l *freeList[V]) get() *V {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) == 0 {
		return new(V)
	}
	v := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	return v
}

func (l *freeList[V]) put(v *V) {
	l.mu.Lock()
	l.free = append(l.free, v)
	l.mu.Unlock()
}

// The split jobs of Gemm's callers, one free list per element type.
var (
	splits32 freeList[splitJob[float32]]
	splits64 freeList[splitJob[float64]]
)

func splitsOf[T Float]() *freeList[splitJob[T]] {
	var l any = &splits64
	if isFloat32[T]() {
		l = &splits32
	}
	return l.(*freeList[splitJob[T]])
}

func isFloat32[T Float]() bool {
	var zero T
	_, ok := any(zero).(float32)
	return ok
}

// grow returns s resized to n elements, reallocating only when it is short.
func grow[T Float](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// run computes rows [i0, i1) and columns [j0, j1) of C, packing into buf.
func (p *problem[T]) run(buf *buffers[T], i0, i1, j0, j1 int) {
	if p.k == 0 || p.alpha == 0 {
		p.scaleC(i0, i1, j0, j1)
		return
	}
	// With beta 0 the first block of the shared dimension stores its tiles
	// instead of adding them to C, which is then neither cleared first nor
	// read (NaNs in it do not survive, as BLAS specifies).
	if p.beta != 0 {
		p.scaleC(i0, i1, j0, j1)
	}
	ks := kernelsOf[T]()
	mr, nr := ks.mr, ks.nr
	// A is read where it lies, but for a last panel of fewer than mr rows,
	// which is packed, unless it is scaled and the kernels do not scale, or
	// transposed and there is no kernel for that.
	inPlace := (p.alpha == 1 || ks.scales) && (!p.transA || ks.directT != nil)
	// alpha scales either the kernels' tiles or A as it is packed.
	kAlpha, packAlpha := T(1), p.alpha
	if ks.scales {
		kAlpha, packAlpha = p.alpha, 1
	}
	// grown, not made once: tests switch kernel sets, and with them the
	// tile, while the pooled workspaces live on.
	buf.edge = grow(buf.edge, mr*nr)
	for jc := j0; jc < j1; jc += nc {
		nb := min(nc, j1-jc)
		nPanels := (nb + nr - 1) / nr
		kStep := p.kStep()
		for pc := 0; pc < p.k; pc += kStep {
			kb := min(kStep, p.k-pc)
			store := p.beta == 0 && pc == 0
			var packedB []T
			if p.sharedB != nil {
				packedB = p.sharedB[pc*p.sharedPanels*nr+jc*kb:][:nPanels*nr*kb]
			} else {
				buf.b = grow(buf.b, nPanels*nr*kb)
				p.packB(buf.b, pc, kb, jc, nb)
				packedB = buf.b
			}
			for ic := i0; ic < i1; ic += mc {
				mb := min(mc, i1-ic)
				mPanels := (mb + mr - 1) / mr
				packed := 0 // the first panel packed into buf.a
				if inPlace {
					packed = mb / mr
				}
				// tail: the last panel's kernel where it is read in
				// place too (directTRows, directRows), else nil.
				var tail func(int, []T, int, []T, []T, int, T, bool, ahead)
				switch {
				case inPlace && p.transA:
					tail = ks.directTRows[mb%mr]
				case inPlace:
					tail = ks.directRows[mb%mr]
				}
				if packed < mPanels && tail == nil {
					buf.a = grow(buf.a, (mPanels-packed)*mr*kb)
					p.packA(buf.a, ic+packed*mr, mb-packed*mr, pc, kb, packAlpha)
				}
				if packed > 0 && ic == i0 {
					// The later blocks' first panels come with the
					// tile before them (next).
					p.prefetchA(ic, pc, kb)
				}
				// The tiles, column panel after column panel of B (each
				// in L1 while every row panel of A streams past it), or,
				// A transposed, row panel after row panel of A (each, kb
				// rows of a few values lda apart, in L1 while B's packed
				// panels stream past from L2): the weight gradients of
				// the nanoGPT preset ran 5-13% faster so
				// (BenchmarkSgemmCold/nano/xtdy), the other products
				// no faster either way.
				aOuter := p.transA
				tiles := nPanels * mPanels
				// The tile after (jp, ip) in the walk, (jn, in),
				// found without dividing t.
				var jn, in int
				for t, jp, ip := 0, 0, 0; t < tiles; t, jp, ip = t+1, jn, in {
					if jn, in = jp, ip+1; aOuter {
						jn, in = jp+1, ip
					}
					if jn == nPanels {
						jn, in = 0, ip+1
					} else if in == mPanels && !aOuter {
						jn, in = jp+1, 0
					}
					cols := min(nr, nb-jp*nr)
					rows := min(mr, mb-ip*mr)
					ci := (ic+ip*mr)*p.ldc + jc + jp*nr
					// The tile sums over [k0, k1) of this block: all of
					// it but where a triangle (GemmTriangle) skips some.
					k0, k1, compute := p.tri.span(ic+ip*mr, ic+ip*mr+rows, jc+jp*nr, pc, kb)
					if !compute {
						continue
					}
					if k0 == k1 { // nothing to add; a stored tile is 0
						for r := 0; store && r < rows; r++ {
							clear(p.c[ci+r*p.ldc:][:cols])
						}
						continue
					}
					kt := k1 - k0
					bp := packedB[jp*nr*kb+(k0-pc)*nr:][:nr*kt]
					// next is the tile after this one (the next
					// block's first, or this tile again after the
					// last), whose C, and A where it is read in
					// place, a direct kernel fetches while it
					// computes; before a packed tile's kernel, which
					// does not, its C is fetched here.
					var next ahead
					switch {
					case t+1 < tiles:
						next = p.aheadAt((ic+in*mr)*p.ldc+jc+jn*nr, ic+in*mr, pc)
						if ip >= packed && tail == nil {
							p.prefetchC((ic+in*mr)*p.ldc+jc+jn*nr, min(mr, mb-in*mr), min(nr, nb-jn*nr))
						}
					case ic+mc+mr <= i1 && inPlace:
						next = p.aheadAt((ic+mc)*p.ldc+jc, ic+mc, pc)
					default:
						next = p.aheadAt(ci, ic+ip*mr, pc)
					}
					// Most tiles are whole, with A in place: their
					// kernel is called here, without the closure and
					// the edge tests the rest go through (tile below).
					if ip < packed && cols == nr {
						if p.transA {
							ks.directT(kt, p.a[k0*p.lda+ic+ip*mr:], p.lda, bp, p.c[ci:], p.ldc, kAlpha, store, next)
						} else {
							ks.direct(kt, p.a[(ic+ip*mr)*p.lda+k0:], p.lda, bp, p.c[ci:], p.ldc, kAlpha, store, next)
						}
						continue
					}
					// tile adds this tile's product into c, ldc
					// apart, or with store sets c to it; of a last
					// tile of at most half the rows or columns, only
					// that half is computed. A tile in place here is
					// one of fewer than nr columns.
					tile := func(c []T, ldc int, store bool) {
						h, w := rows <= mr/2 && ks.h != nil, cols <= nr/2 && ks.w != nil
						if ip == packed && tail != nil {
							at := (ic+ip*mr)*p.lda + k0
							if p.transA {
								at = k0*p.lda + ic + ip*mr
							}
							tail(kt, p.a[at:], p.lda, bp, c, ldc, kAlpha, store, next)
							return
						}
						if ip < packed && p.transA {
							a := p.a[k0*p.lda+ic+ip*mr:]
							if w {
								ks.directTW(kt, a, p.lda, bp, c, ldc, kAlpha, store, next)
							} else {
								ks.directT(kt, a, p.lda, bp, c, ldc, kAlpha, store, next)
							}
							return
						}
						if ip < packed {
							a := p.a[(ic+ip*mr)*p.lda+k0:]
							if w {
								ks.directW(kt, a, p.lda, bp, c, ldc, kAlpha, store, next)
							} else {
								ks.direct(kt, a, p.lda, bp, c, ldc, kAlpha, store, next)
							}
							return
						}
						a := buf.a[(ip-packed)*mr*kb+(k0-pc)*mr:][:mr*kt]
						switch {
						case h && w:
							ks.hw(kt, a, bp, c, ldc, kAlpha, store)
						case h:
							ks.h(kt, a, bp, c, ldc, kAlpha, store)
						case w:
							ks.w(kt, a, bp, c, ldc, kAlpha, store)
						default:
							ks.kernel(kt, a, bp, c, ldc, kAlpha, store)
						}
					}
					if (rows == mr || ip == packed && tail != nil) && cols == nr {
						tile(p.c[ci:], p.ldc, store)
						continue
					}
					tile(buf.edge, nr, true)
					for r := 0; r < rows; r++ {
						row := p.c[ci+r*p.ldc : ci+r*p.ldc+cols]
						edge := buf.edge[r*nr:][:cols]
						if store {
							copy(row, edge)
							continue
						}
						for j := range row {
							row[j] += edge[j]
						}
					}
				}
			}
		}
	}
}

// aheadAt returns where the tile whose C is at c[ci:] reads it and, in
// place, row (or column) i of op(A) from column (or row) pc: see ahead.
// For a tile whose A is packed, the A returned is where it would lie in
// place, fetched for nothing.
func (p *problem[T]) aheadAt(ci, i, pc int) ahead {
	size := int(unsafe.Sizeof(p.a[0]))
	a := i*p.lda + pc
	if p.transA {
		a = pc*p.lda + i
	}
	return ahead{
		a: uintptr(unsafe.Pointer(unsafe.SliceData(p.a))) + uintptr(a*size),
		c: uintptr(unsafe.Pointer(unsafe.SliceData(p.c))) + uintptr(ci*size),
	}
}

// prefetchC and prefetchA fetch, ahead of a tile, the rows x cols block of
// C at c[ci:] and the mr x kb panel of op(A) at (i, pc) that it will read
// in place. Each row of a panel of A in place is only kb values, a few
// cache lines, too short a stream for the hardware prefetchers to pick up
// before it ends, and each tile of a product fresh from another op misses
// on lines of A and C one demand load after another: on the nanoGPT
// preset's shapes with cold caches the products ran at 0.55-0.85 of their
// warm rate (BenchmarkSgemmCold). They fetch all their lines at once,
// which stalls the core once the line fill buffers are full, so they only
// serve where no direct kernel runs before: a product's first panel of A,
// and a packed tile's C. The direct kernels fetch the next tile's lines a
// few an iteration (ahead): the preset's step at GOMAXPROCS=1 went from
// 49.3 to 47.2 ms (medians of 6 alternating runs).
func (p *problem[T]) prefetchC(ci, rows, cols int) {
	size := int(unsafe.Sizeof(p.c[0]))
	prefetchRows(unsafe.Pointer(&p.c[ci]), p.ldc*size, rows, cols*size, true)
}

func (p *problem[T]) prefetchA(i, pc, kb int) {
	mr := kernelsOf[T]().mr
	size := int(unsafe.Sizeof(p.a[0]))
	if p.transA { // kb rows of a, mr values each
		prefetchRows(unsafe.Pointer(&p.a[pc*p.lda+i]), p.lda*size, kb, mr*size, false)
		return
	}
	prefetchRows(unsafe.Pointer(&p.a[i*p.lda+pc]), p.lda*size, mr, kb*size, false)
}

// scaleC multiplies the block of C by beta; beta 0 sets it to zero, so that
// NaNs already in C do not survive, as BLAS specifies.
func (p *problem[T]) scaleC(i0, i1, j0, j1 int) {
	if p.beta == 1 {
		return
	}
	for i := i0; i < i1; i++ {
		row := p.c[i*p.ldc+j0 : i*p.ldc+j1]
		if p.beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= p.beta
		}
	}
}

// packA copies alpha op(A)[ic:ic+mb, pc:pc+kb] into panels of mr rows, each
// laid out column after column (mr values for each p), zero-padded below.
func (p *problem[T]) packA(dst []T, ic, mb, pc, kb int, alpha T) {
	mr := kernelsOf[T]().mr
	full := 0 // panels already packed
	if p.transA {
		// op(A)[i, q] = a[q*lda + i]: a column of op(A) is a row of a,
		// read once, in order, each mr of its values copied into their
		// panel; as one array for the AVX2 kernels' 6, which the compiler
		// turns into a few moves instead of a call to memmove. (The
		// AVX-512 kernels read a transposed A in place.)
		full = mb / mr
		for q := range kb {
			src := p.a[(pc+q)*p.lda+ic:][:full*mr]
			for ip := range full {
				out, in := dst[ip*mr*kb+q*mr:][:mr], src[ip*mr:][:mr]
				switch {
				case alpha != 1:
					for r, v := range in {
						out[r] = alpha * v
					}
				case mr == 6:
					*(*[6]T)(out) = [6]T(in)
				default:
					copy(out, in)
				}
			}
		}
	}
	for ip := full; ip*mr < mb; ip++ {
		panel := dst[ip*mr*kb : (ip+1)*mr*kb]
		rows := min(mr, mb-ip*mr)
		i := ic + ip*mr
		if rows < mr {
			clear(panel)
		}
		if p.transA {
			for q := 0; q < kb; q++ {
				src := p.a[(pc+q)*p.lda+i : (pc+q)*p.lda+i+rows]
				out := panel[q*mr : q*mr+rows]
				for r, v := range src {
					out[r] = alpha * v
				}
			}
			continue
		}
		if rows == mr && mr <= 16 {
			// A whole panel (A scaled, or no direct kernel): its rows
			// read in step, the panel written in order.
			var at [16][]T
			for r := range mr {
				at[r] = p.a[(i+r)*p.lda+pc:][:kb]
			}
			for q := range kb {
				out := panel[q*mr:][:mr]
				for r := range out {
					out[r] = alpha * at[r][q]
				}
			}
			continue
		}
		for r := 0; r < rows; r++ {
			src := p.a[(i+r)*p.lda+pc : (i+r)*p.lda+pc+kb]
			for q, v := range src {
				panel[q*mr+r] = alpha * v
			}
		}
	}
}

// packB copies op(B)[pc:pc+kb, jc:jc+nb] into panels of nr columns, each
// laid out row after row (nr values for each p), zero-padded on the right.
func (p *problem[T]) packB(dst []T, pc, kb, jc, nb int) {
	nr, rowsB, colsB := kernelsOf[T]().nr, kernelsOf[T]().rowsB, kernelsOf[T]().colsB
	if int64(p.ldb)*int64(nr) > math.MaxInt32 {
		colsB = nil // its 32-bit indices would overflow
	}
	for jp := 0; jp*nr < nb; jp++ {
		panel := dst[jp*nr*kb : (jp+1)*nr*kb]
		cols := min(nr, nb-jp*nr)
		j := jc + jp*nr
		if cols < nr {
			clear(panel)
		}
		if !p.transB && cols == nr && rowsB != nil {
			rowsB(kb, p.b[pc*p.ldb+j:], p.ldb, panel)
			continue
		}
		if p.transB && cols == nr && colsB != nil {
			colsB(kb, p.b[j*p.ldb+pc:], p.ldb, panel)
			continue
		}
		if !p.transB { // op(B)[q, j] = b[q*ldb + j]: rows are contiguous
			for q := 0; q < kb; q++ {
				copy(panel[q*nr:q*nr+cols], p.b[(pc+q)*p.ldb+j:(pc+q)*p.ldb+j+cols])
			}
			continue
		}
		for c := 0; c < cols; c++ {
			src := p.b[(j+c)*p.ldb+pc : (j+c)*p.ldb+pc+kb]
			for q, v := range src {
				panel[q*nr+c] = v
			}
		}
	}
}
