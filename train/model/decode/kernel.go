package decode

// The decoder's one product kernel: y += x·W for a weight W packed in
// panels of 16 columns (packed), where panel p holds rows 0..k-1 of its 16
// columns one after the other, and panels lie pstride elements apart. The
// same layout holds the key cache transposed (a panel is 16 positions,
// its rows a head's features) and the value cache (a panel is 16 of a
// head's features, its rows the positions), so that the attention's
// scores and its weighted sum of values are the same product.

// panelW is the width of a panel.
const panelW = 16

// mv4 sets y[0:64] += Σ_i x[i]·w[p·pstride + 16i + c] over the four panels
// p of w, i < k; mv1 does one panel, y[0:16].
func mv4[T float32 | float64](y, x, w []T, k, pstride int) {
	if k == 0 {
		return
	}
	if asm != nil {
		if y32, ok := any(y).([]float32); ok {
			x32, w32 := any(x).([]float32), any(w).([]float32)
			_ = y32[63]
			_ = x32[k-1]
			_ = w32[3*pstride+16*k-1]
			asm.mv4(&y32[0], &x32[0], &w32[0], k, pstride)
			return
		}
	}
	for p := range 4 {
		mv1Go(y[p*panelW:p*panelW+panelW], x[:k], w[p*pstride:p*pstride+panelW*k])
	}
}

// mv4x2 is mv4 for two rows, y0 += x0·W and y1 += x1·W, reading each
// block of W once for both (the assembly; the Go form is two mv4 calls).
// Each row's sums are mv4's, in its order: the same bits.
func mv4x2[T float32 | float64](y0, y1, x0, x1, w []T, k, pstride int) {
	if k == 0 {
		return
	}
	if asm != nil {
		if y32, ok := any(y0).([]float32); ok {
			y132, x032, x132, w32 := any(y1).([]float32), any(x0).([]float32), any(x1).([]float32), any(w).([]float32)
			_, _ = y32[63], y132[63]
			_, _ = x032[k-1], x132[k-1]
			_ = w32[3*pstride+16*k-1]
			asm.mv4x2(&y32[0], &y132[0], &x032[0], &x132[0], &w32[0], k, pstride)
			return
		}
	}
	mv4(y0, x0, w, k, pstride)
	mv4(y1, x1, w, k, pstride)
}

// mv1 is mv4 of one panel.
func mv1[T float32 | float64](y, x, w []T, k int) {
	if k == 0 {
		return
	}
	if asm != nil {
		if y32, ok := any(y).([]float32); ok {
			x32, w32 := any(x).([]float32), any(w).([]float32)
			_ = y32[15]
			_ = x32[k-1]
			_ = w32[16*k-1]
			asm.mv1(&y32[0], &x32[0], &w32[0], k)
			return
		}
	}
	mv1Go(y[:panelW], x[:k], w[:panelW*k])
}

// mv1Go is mv1 in Go: y (16) += Σ_i x[i] w[16i : 16i+16].
func mv1Go[T float32 | float64](y, x, w []T) {
	var acc [panelW]T
	copy(acc[:], y)
	for i, xi := range x {
		row := w[i*panelW : i*panelW+panelW]
		for c := range acc {
			acc[c] += xi * row[c]
		}
	}
	copy(y, acc[:])
}

// panels runs mv over panels [0, n) of w, pstride apart, into y (16n):
// four at a time, then one.
func panels[T float32 | float64](y, x, w []T, k, n, pstride int) {
	p := 0
	for ; p+4 <= n; p += 4 {
		mv4(y[p*panelW:], x, w[p*pstride:], k, pstride)
	}
	for ; p < n; p++ {
		mv1(y[p*panelW:], x, w[p*pstride:], k)
	}
}

// kernels are the assembly forms of mv4 and mv1 for float32, nil where
// there are none (kernel_other.go, or a CPU without AVX-512).
type kernels struct {
	name  string
	mv4   func(y, x, w *float32, k, pstride int)
	mv4x2 func(y0, y1, x0, x1, w *float32, k, pstride int)
	mv1   func(y, x, w *float32, k int)
}

// Kernels names the product kernels this machine runs for float32:
// "AVX-512 assembly" or "portable Go".
func Kernels() string {
	if asm != nil {
		return asm.name
	}
	return "portable Go"
}
