package vec

// ReLU sets y[i] = max(x[i], 0); a NaN stays NaN. y and x have the same
// length.
func ReLU[T float32 | float64](y, x []T) {
	y = y[:len(x)] // the assembly writes len(x) elements
	n := reluAsm(y, x, nil)
	for i := n; i < len(x); i++ {
		y[i] = max(x[i], 0)
	}
}

// ReLUGrad sets dx[i] = dy[i] where x[i] > 0, and 0 elsewhere (0 and NaN
// included), as PyTorch's. dx, x and dy have the same length.
func ReLUGrad[T float32 | float64](dx, x, dy []T) {
	dx, dy = dx[:len(x)], dy[:len(x)] // the assembly takes len(x) of each
	n := reluAsm(dx, x, dy)
	for i := n; i < len(x); i++ {
		if x[i] > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// reluAsm runs the active assembly kernel for T on the longest prefix of
// y, x and dy (nil or as long) it takes and returns its length, 0 without
// assembly; with dy it is the gradient.
func reluAsm[T float32 | float64](y, x, dy []T) int {
	switch y := any(y).(type) {
	case []float32:
		n := span32(len(x))
		if n > 0 {
			active.relu32(&y[0], &any(x).([]float32)[0], first(any(dy).([]float32)), n)
		}
		return n
	case []float64:
		n := span64(len(x))
		if n > 0 {
			active.relu64(&y[0], &any(x).([]float64)[0], first(any(dy).([]float64)), n)
		}
		return n
	}
	return 0
}

// first returns &s[0], or nil for an empty s: a kernel's optional operand.
func first[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}
