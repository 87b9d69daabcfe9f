package vec

import "testing"

// TestKernels: the exported functions run the first set this CPU has, and
// Kernels names whichever path is active, as qkv bench prints it.
func TestKernels(t *testing.T) {
	if sets := kernelSets(); len(sets) > 0 && active != sets[0] || len(sets) == 0 && active != nil {
		t.Errorf("active kernels %q, want the first of the %d sets this CPU runs", Kernels(), len(sets))
	}
	want := map[string]string{"AVX-512": "AVX-512 assembly", "AVX2+FMA": "AVX2+FMA assembly", "Go": "portable Go"}
	for _, p := range paths() {
		usePath(t, p.set)
		if got := Kernels(); got != want[p.name] {
			t.Errorf("path %s: Kernels() = %q, want %q", p.name, got, want[p.name])
		}
	}
}

// TestShortPanics: on each path, an output or second input shorter than x
// panics instead of the assembly writing or reading past its end.
func TestShortPanics(t *testing.T) {
	x, short := make([]float32, 40), make([]float32, 20)
	x64, short64 := make([]float64, 40), make([]float64, 20)
	m, v := make([]float64, 40), make([]float64, 40)
	calls := map[string]func(){
		"GELU":                func() { GELU(short, x) },
		"GELUGrad dx":         func() { GELUGrad(short, x, x) },
		"GELUGrad dy":         func() { GELUGrad(x, x, short) },
		"ReLU":                func() { ReLU(short, x) },
		"ReLUGrad dy":         func() { ReLUGrad(x, x, short) },
		"ReLU float64":        func() { ReLU(short64, x64) },
		"ExpShiftSum":         func() { ExpShiftSum(short, x, 0) },
		"Dot":                 func() { Dot(x, short) },
		"Lin":                 func() { Lin(x, x, short, 1, 1, 1) },
		"MulAdd":              func() { MulAdd(x, x, x, short) },
		"Adam gradient":       func() { Adam(x, short, m, v, AdamCoef{}) },
		"Adam float64 moment": func() { Adam(x64, x64, m, short64, AdamCoef{}) },
	}
	forEachPath(t, func(t *testing.T) {
		for name, f := range calls {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s with a short slice did not panic", name)
					}
				}()
				f()
			}()
		}
	})
}
