package vec

// ReLU sets y[i] = max(x[i], 0); a NaN stays NaN.
func ReLU[T float32 | float64](y, x []T) {
	n := 0
	if useAVX2 {
		n = reluAVX2(y, x, nil)
	}
	for i := n; i < len(x); i++ {
		y[i] = max(x[i], 0)
	}
}

// ReLUGrad sets dx[i] = dy[i] where x[i] > 0, and 0 elsewhere (0 and NaN
// included), as PyTorch's.
func ReLUGrad[T float32 | float64](dx, x, dy []T) {
	n := 0
	if useAVX2 {
		n = reluAVX2(dx, x, dy)
	}
	for i := n; i < len(x); i++ {
		if x[i] > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// reluAVX2 runs the assembly kernel for T on the longest prefix it takes
// (whole registers: 8 float32 or 4 float64) and returns its length; with dy
// it is the gradient.
func reluAVX2[T float32 | float64](y, x, dy []T) int {
	switch y := any(y).(type) {
	case []float32:
		n := len(y) &^ 7
		if n > 0 {
			x := any(x).([]float32)
			if dy == nil {
				relu32(&y[0], &x[0], nil, n)
			} else {
				relu32(&y[0], &x[0], &any(dy).([]float32)[0], n)
			}
		}
		return n
	case []float64:
		n := len(y) &^ 3
		if n > 0 {
			x := any(x).([]float64)
			if dy == nil {
				relu64(&y[0], &x[0], nil, n)
			} else {
				relu64(&y[0], &x[0], &any(dy).([]float64)[0], n)
			}
		}
		return n
	}
	return 0
}
