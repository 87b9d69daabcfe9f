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
