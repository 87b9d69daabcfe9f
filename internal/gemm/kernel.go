package gemm

// kernelSet is one family of assembly kernels: for each element type, the
// kernel on packed panels, the one reading A in place, and the tile of C
// they keep in registers, mr rows by nr columns. Packing, edge tiles and the
// split over goroutines all follow the selected set's tile.
type kernelSet struct {
	name       string // as Kernels reports it
	mr32, nr32 int
	mr64, nr64 int
	kernel32   func(k int, a, b, c []float32, ldc int, store bool)
	kernel64   func(k int, a, b, c []float64, ldc int, store bool)
	direct32   func(k int, a []float32, lda int, b, c []float32, ldc int, store bool)
	direct64   func(k int, a []float64, lda int, b, c []float64, ldc int, store bool)
	// rowsA and rowsB, where not nil, copy n rows of mr (rowsA) or nr
	// (rowsB) elements, ld apart in src, to consecutive rows of dst: the
	// packing of a transposed A and of B, in assembly.
	rowsA32, rowsB32 func(n int, src []float32, ld int, dst []float32)
	rowsA64, rowsB64 func(n int, src []float64, ld int, dst []float64)
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

// clearTile sets the tile of mr rows of nr at c to zero: it gives kernels
// that can only add to C the store argument of the others.
func clearTile[T Float](c []T, ldc, mr, nr int) {
	for r := range mr {
		clear(c[r*ldc:][:nr])
	}
}

// rowCopiers returns the active set's rowsA and rowsB for T (nil when it
// has none).
func rowCopiers[T Float]() (rowsA, rowsB func(n int, src []T, ld int, dst []T)) {
	if poolIndex[T]() == 0 {
		a, b := any(active.rowsA32), any(active.rowsB32)
		return a.(func(int, []T, int, []T)), b.(func(int, []T, int, []T))
	}
	a, b := any(active.rowsA64), any(active.rowsB64)
	return a.(func(int, []T, int, []T)), b.(func(int, []T, int, []T))
}

// active is the kernel set Gemm runs, chosen by kernel_amd64.go for this
// CPU: AVX-512 where there is AVX-512, else AVX2 and FMA. nil elsewhere
// (then Gemm is gonum's), and in tests of that path, which also set it to
// each set the machine can run.
var active *kernelSet

// tile is the block of C the active kernels keep in registers: mr rows by
// nr columns. Only called where there is an active set.
func tile[T Float]() (mr, nr int) {
	if poolIndex[T]() == 0 {
		return active.mr32, active.nr32
	}
	return active.mr64, active.nr64
}

// kernel returns the function that adds to the (mr, nr) tile of C at c, with
// leading dimension ldc, the product of a packed panel of A (k columns of mr)
// and one of B (k rows of nr), or with store sets the tile to it; nil where
// there is no assembly kernel.
func kernel[T Float]() func(k int, a, b, c []T, ldc int, store bool) {
	if active == nil {
		return nil
	}
	var f any = active.kernel64
	if poolIndex[T]() == 0 {
		f = active.kernel32
	}
	return f.(func(int, []T, []T, []T, int, bool))
}

// directKernel returns the kernel that reads A's mr rows where they lie, lda
// apart, or nil where there is none (then A is packed).
func directKernel[T Float]() func(k int, a []T, lda int, b, c []T, ldc int, store bool) {
	if active == nil {
		return nil
	}
	var f any = active.direct64
	if poolIndex[T]() == 0 {
		f = active.direct32
	}
	return f.(func(int, []T, int, []T, []T, int, bool))
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
