package gemm

// kernels are one element type's assembly kernels and the tile of C they
// keep in registers, mr rows by nr columns. Packing, edge tiles and the
// split over goroutines all follow the selected set's tile.
type kernels[T Float] struct {
	mr, nr int
	// kernel adds to the (mr, nr) tile of C at c, with leading dimension
	// ldc, alpha times the product of a packed panel of A (k columns of mr)
	// and one of B (k rows of nr), or with store sets the tile to it.
	kernel func(k int, a, b, c []T, ldc int, alpha T, store bool)
	// direct is kernel reading A's mr rows where they lie, lda apart; it
	// may prefetch, while it computes, the next tile's operands at next.
	direct func(k int, a []T, lda int, b, c []T, ldc int, alpha T, store bool, next ahead)
	// scales: the kernels apply alpha; without it they take only 1, and
	// A is scaled as it is packed.
	scales bool
	// rowsB, where not nil, copies n rows of nr elements, ld apart in src,
	// to consecutive rows of dst: the packing of B, in assembly.
	rowsB func(n int, src []T, ld int, dst []T)
	// colsB, where not nil, packs a transposed B: row q of dst (nr
	// elements) is element q of each of nr rows of src, ld apart, for
	// q < n; ld*nr must be below 2^31.
	colsB func(n int, src []T, ld int, dst []T)
	// The edge kernels, where not nil, are kernel (and direct) computing
	// from the same panels only the tile's first mr/2 rows (h), first nr/2
	// columns (w), or both (hw): for a last tile that small, about half
	// the work.
	h, w, hw func(k int, a, b, c []T, ldc int, alpha T, store bool)
	directW  func(k int, a []T, lda int, b, c []T, ldc int, alpha T, store bool, next ahead)
	// directT and directTW, where not nil, are direct and directW for a
	// transposed A read in place: a column of op(A) is mr consecutive
	// values of a row of a, the next column lda further.
	directT, directTW func(k int, a []T, lda int, b, c []T, ldc int, alpha T, store bool, next ahead)
	// directTRows[r], where not nil, is directT for the tile's first r
	// rows, reading r values a column: a last panel of exactly r rows
	// (4, 5 and 8 have kernels) then is read in place, not packed from
	// columns of a one value at a time and computed as 6 or 12 rows.
	directTRows [12]func(k int, a []T, lda int, b, c []T, ldc int, alpha T, store bool, next ahead)
	// directRows[r] is the same for A in place (direct's first r rows),
	// fetching nothing ahead: no tile of its block comes after it.
	directRows [12]func(k int, a []T, lda int, b, c []T, ldc int, alpha T, store bool, next ahead)
}

// ahead is where the tile after a direct kernel's lies: the address of its
// A, read as the kernel reads its own (rows, or for directT columns, lda
// apart), and of its C. The AVX-512 direct kernels fetch both into the
// cache a few lines an iteration while they compute, instead of the tile
// after waiting on them one line after another. Addresses only, never
// read by Go: the hardware ignores a prefetch of an address it cannot
// fetch.
type ahead struct{ a, c uintptr }

// kernelSet is one family of assembly kernels, for both element types.
type kernelSet struct {
	name string // as Kernels reports it
	f32  kernels[float32]
	f64  kernels[float64]
}

// active is the kernel set Gemm runs, chosen by kernel_amd64.go for this
// CPU: AVX-512 where there is AVX-512, else AVX2 and FMA. nil elsewhere
// (then Gemm is gonum's), and in tests of that path, which also set it to
// each set the machine can run.
var active *kernelSet

// kernelsOf returns the active set's kernels for T, or nil where there are
// none (then Gemm is gonum's).
func kernelsOf[T Float]() *kernels[T] {
	if active == nil {
		return nil
	}
	var ks any = &active.f64
	if isFloat32[T]() {
		ks = &active.f32
	}
	return ks.(*kernels[T])
}

// tile is the block of C the active kernels keep in registers: mr rows by
// nr columns. Only called where there is an active set.
func tile[T Float]() (mr, nr int) {
	ks := kernelsOf[T]()
	return ks.mr, ks.nr
}

// clearTile sets the tile of mr rows of nr at c to zero: it gives kernels
// that can only add to C the store argument of the others.
func clearTile[T Float](c []T, ldc, mr, nr int) {
	for r := range mr {
		clear(c[r*ldc:][:nr])
	}
}

// copier wraps an assembly row copy of w elements a row, slicing src and
// dst to what it reads and writes so that short ones panic instead.
func copier[T Float](w int, f func(n int, src *T, ld int, dst *T)) func(int, []T, int, []T) {
	return func(n int, src []T, ld int, dst []T) {
		if n > 0 {
			f(n, &src[:(n-1)*ld+w][0], ld, &dst[:n*w][0])
		}
	}
}

// gatherer wraps an assembly gather of nr columns as copier does a row
// copy.
func gatherer[T Float](nr int, f func(n int, src *T, ld int, dst *T)) func(int, []T, int, []T) {
	return func(n int, src []T, ld int, dst []T) {
		if n > 0 {
			f(n, &src[:(nr-1)*ld+n][0], ld, &dst[:n*nr][0])
		}
	}
}

// Kernels names the kernels this machine runs: "AVX-512 assembly" or
// "AVX2+FMA assembly" with their float32 tile, or "gonum" on other CPUs and
// architectures and with the purego tag.
func Kernels() string {
	if active != nil {
		return active.name
	}
	return "gonum"
}
