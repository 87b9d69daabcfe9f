package gemm

// kernelSet is one family of assembly kernels: for each element type, the
// kernel on packed panels, the one reading A in place, and the tile of C
// they keep in registers, mr rows by nr columns. Packing, edge tiles and the
// split over goroutines all follow the selected set's tile.
type kernelSet struct {
	name       string // as Kernels reports it
	mr32, nr32 int
	mr64, nr64 int
	kernel32   func(k int, a, b, c []float32, ldc int)
	kernel64   func(k int, a, b, c []float64, ldc int)
	direct32   func(k int, a []float32, lda int, b, c []float32, ldc int)
	direct64   func(k int, a []float64, lda int, b, c []float64, ldc int)
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
// and one of B (k rows of nr); nil where there is no assembly kernel.
func kernel[T Float]() func(k int, a, b, c []T, ldc int) {
	if active == nil {
		return nil
	}
	var f any = active.kernel64
	if poolIndex[T]() == 0 {
		f = active.kernel32
	}
	return f.(func(int, []T, []T, []T, int))
}

// directKernel returns the kernel that reads A's mr rows where they lie, lda
// apart, or nil where there is none (then A is packed).
func directKernel[T Float]() func(k int, a []T, lda int, b, c []T, ldc int) {
	if active == nil {
		return nil
	}
	var f any = active.direct64
	if poolIndex[T]() == 0 {
		f = active.direct32
	}
	return f.(func(int, []T, int, []T, []T, int))
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
