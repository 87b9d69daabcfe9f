package vec

import (
	"math"
	"strings"
	"testing"
)

// path is one set of kernels this machine runs, by name; a nil set is the
// Go loops, the path of other CPUs and of the purego tag, which runs
// anywhere.
type path struct {
	name string
	set  *kernelSet
}

// paths are the kernel sets this machine can run, fastest first, named by
// the first word of Kernels' name ("AVX-512", "AVX2+FMA"), then "Go".
func paths() []path {
	var ps []path
	for _, s := range kernelSets() {
		ps = append(ps, path{strings.Fields(s.name)[0], s})
	}
	return append(ps, path{"Go", nil})
}

// usePath makes set the active kernels until the test or benchmark ends.
func usePath(tb testing.TB, set *kernelSet) {
	prev := active
	active = set
	tb.Cleanup(func() { active = prev })
}

// forEachPath runs f as a subtest on each path.
func forEachPath(t *testing.T, f func(t *testing.T)) {
	for _, p := range paths() {
		t.Run(p.name, func(t *testing.T) {
			usePath(t, p.set)
			f(t)
		})
	}
}

// lengths are the row lengths the tests run: 0, every length up to two
// AVX-512 blocks and a tail (so every remainder mod 16, and mod 8 for
// AVX2), and longer rows with each kind of tail.
var lengths = func() []int {
	var ns []int
	for n := range 34 {
		ns = append(ns, n)
	}
	return append(ns, 47, 64, 100, 255, 1001)
}()

// offsets are where the tests' slices start in their buffers, in elements:
// aligned as allocated, and 4 and 12 bytes off.
var offsets = []int{0, 1, 3}

// guarded returns n elements starting off elements into a buffer whose
// other elements are set to a canary, and a check that the kernels left
// the canaries alone: a masked store must write nothing beyond the slice.
// The slice's capacity ends at n, so the Go loops cannot overrun it
// unseen either.
func guarded[T float32 | float64](n, off int) ([]T, func(t *testing.T)) {
	const canary = 12345.5
	buf := make([]T, off+n+20)
	for i := range buf {
		buf[i] = canary
	}
	check := func(t *testing.T) {
		t.Helper()
		for i, v := range buf {
			if (i < off || i >= off+n) && v != canary {
				t.Fatalf("n=%d offset %d: element %d outside the slice overwritten with %v", n, off, i-off, v)
			}
		}
	}
	return buf[off : off+n : off+n], check
}

// ulps is how many float32 units in the last place of want got is.
func ulps(got float32, want float64) float64 {
	w := float32(want)
	ulp := math.Abs(float64(math.Nextafter32(w, float32(math.Inf(1)))) - float64(w))
	return math.Abs(float64(got)-want) / ulp
}
