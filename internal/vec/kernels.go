package vec

// kernelSet is one family of assembly kernels. The exported functions run
// the active set's kernel on the longest prefix it takes and the Go loop on
// the rest; they pass it n >= 1 elements.
type kernelSet struct {
	name string // as Kernels reports it
	// step32 and step64: the kernels take a multiple of step32 float32 or
	// step64 float64 elements: a register's lanes on AVX2, 1 on AVX-512,
	// whose kernels mask their last block.
	step32, step64 int

	// gelu is GELU and geluGrad GELUGrad, reading consts.
	gelu     func(y, x *float32, n int, k *[21][8]float32)
	geluGrad func(dx, x, dy *float32, n int, k *[21][8]float32)
	// gelu64 is GELU64, or with dy non-nil GELUGrad64, reading
	// gelu64Consts.
	gelu64 func(y, x, dy *float64, n int, k *gelu64Table)
	// relu32 sets y = max(x, 0), or with dy non-nil, y = dy where x > 0
	// and 0 elsewhere; relu64 is the same for float64.
	relu32 func(y, x, dy *float32, n int)
	relu64 func(y, x, dy *float64, n int)
	// expShiftSum is ExpShiftSum, reading expConsts.
	expShiftSum func(y, x *float32, n int, shift float32, k *[13][8]float32) float32
	// sum32 and dot32 are Sum and Dot, lin32 Lin and mulAdd32 MulAdd (r
	// may be nil), for float32.
	sum32    func(x *float32, n int) float32
	dot32    func(x, y *float32, n int) float32
	lin32    func(y, x1, x2 *float32, n int, a, b, c float32)
	mulAdd32 func(y, p, q, r *float32, n int)
	// addWiden32 is AddWiden for float32 x; scaleWiden32, where not nil,
	// is ScaleWiden.
	addWiden32   func(y *float64, x *float32, n int)
	scaleWiden32 func(x *float32, n int, scale float64)
	// sumSquares32 and sumSquares64 return lanes[l], the sum of
	// (x[i]·scale)² over i = l mod 8 by fused multiply-adds in element
	// order, and the largest |x[i]| (NaN not counted); SumSquares adds up
	// the lanes. They return the lanes rather than fill the caller's: a
	// pointer passed through a function value escapes, and every call
	// allocated.
	sumSquares32 func(x *float32, n int, scale float64) (lanes [8]float64, maxAbs float64)
	sumSquares64 func(x *float64, n int, scale float64) (lanes [8]float64, maxAbs float64)
	// max32 is Max for float32 (any NaN: a NaN); mulDiff32 is MulDiff.
	max32     func(x *float32, n int) float32
	mulDiff32 func(y, p, q *float32, n int, c, scale float32)
	// normalise32 is Normalise for float32; nil in a set without one,
	// where Normalise runs the composed calls.
	normalise32 func(x, xhat *float32, n int, eps float64) float32
	// normGradSums32 and normGradApply32 are NormGrad's two passes for
	// float32 (addend, sumGain and sumBias may be nil; sumBias only with
	// sumGain); nil in a set without them, where NormGrad runs the
	// composed calls.
	normGradSums32  func(dy, gain, xhat *float32, n int) (sum, dot float32)
	normGradApply32 func(dx, dy, gain, xhat, addend *float32, sumGain, sumBias *float64, n int, a, b, c float32)
	// adam32 and adam64 are Adam for float32 and float64 parameters; k
	// holds beta1, 1-beta1, beta2, 1-beta2, StepSize, SqrtBC2, Eps and
	// Keep.
	adam32 func(p, grad *float32, m, v *float64, n int, k *[8]float64)
	adam64 func(p, grad *float64, m, v *float64, n int, k *[8]float64)
}

// active is the kernel set the exported functions run: the first of
// kernelSets, the fastest this CPU has; nil where there is none (other
// CPUs and architectures, the purego tag), and in the tests of that path,
// which also make it each set the machine can run.
var active = func() *kernelSet {
	if sets := kernelSets(); len(sets) > 0 {
		return sets[0]
	}
	return nil
}()

// span32 and span64 return how many of n float32 or float64 elements the
// active kernels take; the Go loops do the rest.
func span32(n int) int {
	if active == nil {
		return 0
	}
	return n - n%active.step32
}

func span64(n int) int {
	if active == nil {
		return 0
	}
	return n - n%active.step64
}

// adamStep is the multiple of parameters adam32 and adam64 take: the
// AVX2 kernels' four float64 lanes (their moments are float64), which the
// AVX-512 set runs too.
const adamStep = 4

// adamSpan returns how many of n parameters Adam's kernels take.
func adamSpan(n int) int {
	if active == nil {
		return 0
	}
	return n - n%adamStep
}

// Kernels names the kernels this machine runs: "AVX-512 assembly",
// "AVX2+FMA assembly", or "portable Go" on other CPUs and architectures and
// with the purego tag.
func Kernels() string {
	if active != nil {
		return active.name
	}
	return "portable Go"
}
