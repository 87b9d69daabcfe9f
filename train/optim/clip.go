package optim

import (
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/gemm/par"
	"github.com/qkv-dev/qkv/internal/vec"
)

// GradNorm returns the global L2 norm of the gradients of params, as if all
// of them were one vector, accumulated in float64. A NaN or infinite
// gradient element gives a NaN or +Inf norm and no error, so that the
// training loop can log it and skip the batch. Finite gradients whose squares
// overflow or underflow float64 are rescaled, so the norm of finite
// gradients is finite and accurate. Gradients are read from p.Node.Grad():
// after G.Grad and a run of the graph on a graph.Machine (or on a tape
// machine made with G.BindDualValues(params...)).
func GradNorm(params []graph.Param) (float64, error) {
	j := normJob{grads: make([]gradSlices, len(params)), parts: make([]normPart, len(params))}
	for i, p := range params {
		f32, f64, err := gradData(p)
		if err != nil {
			return 0, fmt.Errorf("optim: grad norm: %w", err)
		}
		j.grads[i] = gradSlices{f32, f64}
		j.elements += len(f32) + len(f64)
	}
	sum, maxAbs := j.run(1)
	// sum is +Inf with finite elements only when squares overflowed, and can
	// lose tiny gradients to underflow: recompute relative to the largest.
	finite := !math.IsNaN(sum) && !math.IsInf(maxAbs, 0)
	if finite && maxAbs > 0 && (math.IsInf(sum, 1) || sum < 0x1p-900) {
		sum, _ = j.run(1 / maxAbs)
		return maxAbs * math.Sqrt(sum), nil
	}
	return math.Sqrt(sum), nil
}

// gradSlices is one parameter's gradient, of which one slice is set.
type gradSlices struct {
	f32 []float32
	f64 []float64
}

// normPart is one parameter's sum of squares and largest magnitude.
type normPart struct{ sum, maxAbs float64 }

// normJob sums the squares of the gradients over the cores (par.Run), an item per
// parameter: each parameter's sum is computed alone and the sums are added
// in parameter order, so the norm is the same bit for bit whatever the
// number of workers.
type normJob struct {
	grads    []gradSlices
	elements int // in all gradients
	parts    []normPart
	scale    float64
}

// run returns the sum of (x*scale)² over every gradient element, in
// float64, and the largest |x|.
func (j *normJob) run(scale float64) (sum, maxAbs float64) {
	j.scale = scale
	par.Run(len(j.grads), par.WorkersFor(j.elements), j)
	for _, p := range j.parts {
		sum += p.sum
		maxAbs = max(maxAbs, p.maxAbs)
	}
	return sum, maxAbs
}

func (j *normJob) Item(_, i int) {
	s32, m32 := vec.SumSquares(j.grads[i].f32, j.scale)
	s64, m64 := vec.SumSquares(j.grads[i].f64, j.scale)
	j.parts[i] = normPart{s32 + s64, max(m32, m64)}
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
		return 0, fmt.Errorf("optim: clip: max norm %v must be positive (+Inf disables clipping)", maxNorm)
	}
	norm, err = GradNorm(params)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) || norm <= maxNorm {
		return norm, nil
	}
	j := scaleJob{scale: maxNorm / norm}
	for i, p := range params {
		f32, f64, _ := gradData(p)
		for lo := 0; lo < len(f32)+len(f64); lo += stepChunk {
			j.chunks = append(j.chunks, chunk{param: i, lo: lo, hi: min(lo+stepChunk, len(f32)+len(f64))})
		}
		j.grads = append(j.grads, gradSlices{f32, f64})
		j.elements += len(f32) + len(f64)
	}
	par.Run(len(j.chunks), par.WorkersFor(j.elements), &j)
	return norm, nil
}

// scaleJob multiplies the gradients by scale over the cores (par.Run), a chunk
// of a parameter an item.
type scaleJob struct {
	grads    []gradSlices
	elements int // in all gradients
	chunks   []chunk
	scale    float64
}

func (j *scaleJob) Item(_, i int) {
	c := j.chunks[i]
	g := j.grads[c.param]
	if g.f32 != nil {
		vec.ScaleWiden(g.f32[c.lo:c.hi], j.scale) // float32(float64(x) * scale)
		return
	}
	f64 := g.f64[c.lo:c.hi]
	for k, x := range f64 {
		f64[k] = x * j.scale
	}
}

// ZeroGrads sets the gradients of params to zero. gorgonia's tape machine
// made with G.BindDualValues accumulates gradients over runs (a
// graph.Machine overwrites them at every run); Optimizer.Step zeroes
// them after each update, and a loop that skips a batch (say, one with a
// non-finite gradient) calls ZeroGrads so that the next batch starts clean.
func ZeroGrads(params []graph.Param) error {
	for _, p := range params {
		f32, f64, err := gradData(p)
		if err != nil {
			return fmt.Errorf("optim: zero grads: %w", err)
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
		return nil, nil, fmt.Errorf("parameter %q has no gradient: differentiate the cost with G.Grad and run the graph (graph.NewMachine) first", p.Name)
	}
	f32, f64, err := floatData(gv)
	if err != nil {
		return nil, nil, fmt.Errorf("gradient of %q: %w", p.Name, err)
	}
	return f32, f64, nil
}
