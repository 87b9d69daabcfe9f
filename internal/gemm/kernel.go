package gemm

// tile is the block of C a kernel call keeps in registers: mr rows by nr
// columns. 6 rows of two AVX2 registers each take 12 of the 16, leaving two
// for a row of the B panel and two for broadcasts of A.
func tile[T Float]() (mr, nr int) {
	if poolIndex[T]() == 0 {
		return 6, 16 // 2 registers of 8 float32
	}
	return 6, 8 // 2 registers of 4 float64
}

// The assembly kernels, set by kernel_amd64.go when the CPU has AVX2 and
// FMA; nil elsewhere (then Gemm is gonum's), and in tests of that path.
var (
	asmKernel32 func(k int, a, b, c []float32, ldc int)
	asmKernel64 func(k int, a, b, c []float64, ldc int)
	asmDirect32 func(k int, a []float32, lda int, b, c []float32, ldc int)
	asmDirect64 func(k int, a []float64, lda int, b, c []float64, ldc int)
)

// kernel returns the function that adds to the (mr, nr) tile of C at c, with
// leading dimension ldc, the product of a packed panel of A (k columns of mr)
// and one of B (k rows of nr); nil where there is no assembly kernel.
func kernel[T Float]() func(k int, a, b, c []T, ldc int) {
	var f any
	if poolIndex[T]() == 0 && asmKernel32 != nil {
		f = asmKernel32
	} else if poolIndex[T]() == 1 && asmKernel64 != nil {
		f = asmKernel64
	} else {
		return nil
	}
	return f.(func(int, []T, []T, []T, int))
}

// directKernel returns the kernel that reads A's mr rows where they lie, lda
// apart, or nil where there is none (then A is packed).
func directKernel[T Float]() func(k int, a []T, lda int, b, c []T, ldc int) {
	var f any
	if poolIndex[T]() == 0 && asmDirect32 != nil {
		f = asmDirect32
	} else if poolIndex[T]() == 1 && asmDirect64 != nil {
		f = asmDirect64
	} else {
		return nil
	}
	return f.(func(int, []T, int, []T, []T, int))
}

// Kernels names the kernels this machine runs: "AVX2+FMA assembly", or
// "gonum" on other CPUs and architectures and with the purego tag.
func Kernels() string {
	if asmKernel32 != nil {
		return "AVX2+FMA assembly"
	}
	return "gonum"
}
