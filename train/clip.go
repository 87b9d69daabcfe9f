package train

import (
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/graph"
)

// GradNorm returns the global L2 norm of the gradients of params, as if all
// of them were one vector, accumulated in float64. A NaN or infinite
// gradient element gives a NaN or +Inf norm and no error, so that the
// training loop can log it and skip the batch. Finite gradients whose squares
// overflow or underflow float64 are rescaled, so the norm of finite
// gradients is finite and accurate. Gradients are read from p.Node.Grad(),
// which needs a machine made with G.BindDualValues(params...) that has run.
func GradNorm(params []graph.Param) (float64, error) {
	var sum, maxAbs float64
	for _, p := range params {
		f32, f64, err := gradData(p)
		if err != nil {
			return 0, fmt.Errorf("train: grad norm: %w", err)
		}
		s, m := sumSquares(f32, 1)
		sum += s
		maxAbs = max(maxAbs, m)
		s, m = sumSquares(f64, 1)
		sum += s
		maxAbs = max(maxAbs, m)
	}
	// sum is +Inf with finite elements only when squares overflowed, and can
	// lose tiny gradients to underflow: recompute relative to the largest.
	finite := !math.IsNaN(sum) && !math.IsInf(maxAbs, 0)
	if finite && maxAbs > 0 && (math.IsInf(sum, 1) || sum < 0x1p-900) {
		sum = 0
		for _, p := range params {
			f32, f64, _ := gradData(p)
			s, _ := sumSquares(f32, 1/maxAbs)
			sum += s
			s, _ = sumSquares(f64, 1/maxAbs)
			sum += s
		}
		return maxAbs * math.Sqrt(sum), nil
	}
	return math.Sqrt(sum), nil
}

// ClipGradNorm scales all gradients of params in place by maxNorm/norm when
// their global norm exceeds maxNorm, so that their norm becomes maxNorm: the
// global-norm clipping of torch.nn.utils.clip_grad_norm_, which gorgonia's
// element-wise WithClip is not. PyTorch scales by maxNorm/(norm+1e-6) and
// always multiplies (by a coefficient clamped to 1); this scales by
// maxNorm/norm, in float64, and leaves gradients with norm <= maxNorm
// untouched, so a port matches bit for bit only if it does the same. It
// returns the norm before clipping, for the training log. maxNorm = +Inf
// never clips, so a loop without clipping still gets the norm from one call.
// A non-finite norm is returned as it is with the gradients unchanged:
// scaling by maxNorm/Inf would zero them and hide the problem, and
// Optimizer.Step refuses them.
func ClipGradNorm(params []graph.Param, maxNorm float64) (norm float64, err error) {
	if !(maxNorm > 0) {
		return 0, fmt.Errorf("train: clip: max norm %v must be positive (+Inf disables clipping)", maxNorm)
	}
	norm, err = GradNorm(params)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) || norm <= maxNorm {
		return norm, nil
	}
	scale := maxNorm / norm
	for _, p := range params {
		f32, f64, _ := gradData(p)
		for j, x := range f32 {
			f32[j] = float32(float64(x) * scale)
		}
		for j, x := range f64 {
			f64[j] = x * scale
		}
	}
	return norm, nil
}

// ZeroGrads sets the gradients of params to zero. A machine made with
// G.BindDualValues accumulates gradients over runs; Optimizer.Step zeroes
// them after each update, and a loop that skips a batch (say, one with a
// non-finite gradient) calls ZeroGrads so that the next batch starts clean.
func ZeroGrads(params []graph.Param) error {
	for _, p := range params {
		f32, f64, err := gradData(p)
		if err != nil {
			return fmt.Errorf("train: zero grads: %w", err)
		}
		clear(f32)
		clear(f64)
	}
	return nil
}

// gradData returns the backing slice of p's gradient, in place.
func gradData(p graph.Param) ([]float32, []float64, error) {
	if p.Node == nil {
		return nil, nil, fmt.Errorf("parameter %q has no node", p.Name)
	}
	gv, err := p.Node.Grad()
	if err != nil || gv == nil {
		return nil, nil, fmt.Errorf("parameter %q has no gradient: make the machine with G.BindDualValues(params...) and run it first", p.Name)
	}
	f32, f64, err := floatData(gv)
	if err != nil {
		return nil, nil, fmt.Errorf("gradient of %q: %w", p.Name, err)
	}
	return f32, f64, nil
}

// sumSquares returns the sum of (x*scale)² in float64 and the largest |x|
// (NaN elements are not counted in the maximum but make the sum NaN).
func sumSquares[T float32 | float64](xs []T, scale float64) (sum, maxAbs float64) {
	for _, x := range xs {
		y := float64(x)
		if a := math.Abs(y); a > maxAbs {
			maxAbs = a
		}
		y *= scale
		sum += y * y
	}
	return sum, maxAbs
}
