package vec

import (
	"math"
	"sync"
)

// AdamCoef are one Adam step's constants.
type AdamCoef struct {
	Beta1, Beta2, Eps float64
	StepSize          float64 // lr / (1 - beta1^t)
	SqrtBC2           float64 // sqrt(1 - beta2^t)
	Keep              float64 // 1 - lr * weight decay, or 1 without decay
}

// adamConsts holds the [8]float64 of coefficients Adam's kernels read.
var adamConsts = sync.Pool{New: func() any { return new([8]float64) }}

// Adam applies one Adam (AdamW with Keep != 1) update to the parameters p
// with gradients g and moments m and v, all of one length, in float64:
//
//	m = beta1 m + (1 - beta1) g
//	v = beta2 v + (1 - beta2) g g
//	p = p Keep - StepSize m / (sqrt(v) / SqrtBC2 + Eps)
//
// The assembly (AVX2, four float64 lanes, also on AVX-512) does the same
// operations in the same order without fused multiply-adds, so its results
// equal the Go loop's bit for bit (TestAdam).
func Adam[T float32 | float64](p, g []T, m, v []float64, c AdamCoef) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	n := adamSpan(len(p))
	if n > 0 {
		// The kernels are called through function values, which the
		// compiler assumes keep k: from a pool, k is not allocated anew
		// at every call (several per parameter per step).
		k := adamConsts.Get().(*[8]float64)
		*k = [8]float64{c.Beta1, 1 - c.Beta1, c.Beta2, 1 - c.Beta2, c.StepSize, c.SqrtBC2, c.Eps, c.Keep}
		switch p := any(p).(type) {
		case []float32:
			active.adam32(&p[0], &any(g).([]float32)[0], &m[0], &v[0], n, k)
		case []float64:
			active.adam64(&p[0], &any(g).([]float64)[0], &m[0], &v[0], n, k)
		}
		adamConsts.Put(k)
	}
	// The float64 conversions of float64 products round them, as the
	// assembly does: Go may otherwise fuse a product into the addition after
	// it (it does with GOAMD64=v3), and the results would differ from the
	// assembly's in the last bit.
	for j := n; j < len(p); j++ {
		gj := float64(g[j])
		m[j] = float64(c.Beta1*m[j]) + float64((1-c.Beta1)*gj)
		v[j] = float64(c.Beta2*v[j]) + float64((1-c.Beta2)*gj*gj)
		x := float64(float64(p[j]) * c.Keep)
		p[j] = T(x - c.StepSize*m[j]/(math.Sqrt(v[j])/c.SqrtBC2+c.Eps))
	}
}
