package explain

import (
	"math/rand"
	"testing"

	"github.com/qkv-dev/qkv/layers"
)

// Without positions the encoder's output on a permuted input is the
// permuted output up to rounding; with positions it is not.
func TestEquivarianceError(t *testing.T) {
	for _, c := range []struct {
		pos      layers.PositionsKind
		lo, hi   float64
		expected string
	}{
		{layers.PositionsNone, 0, 1e-12, "< 1e-12"},
		{layers.PositionsLearned, 1e-3, 1e9, "> 1e-3"},
		{layers.PositionsSinusoidal, 1e-3, 1e9, "> 1e-3"},
	} {
		e, err := equivarianceError(rand.New(rand.NewSource(3)), c.pos, 1)
		if err != nil {
			t.Fatal(err)
		}
		if e < c.lo || e > c.hi {
			t.Errorf("positions %s: error %v, want %s", c.pos, e, c.expected)
		}
	}
}

// permutedDiff compares py[i] with y[perm[i]]: 0 for a permuted copy, the
// largest difference otherwise.
func TestPermutedDiff(t *testing.T) {
	y := []float64{1, 2, 3, 4, 5, 6} // B=1, S=3, D=2
	perm := []int{2, 0, 1}
	py := []float64{5, 6, 1, 2, 3, 4}
	if got := permutedDiff(y, py, perm, 1, 3, 2); got != 0 {
		t.Errorf("permuted copy: %v, want 0", got)
	}
	py[3] = 2.5
	if got := permutedDiff(y, py, perm, 1, 3, 2); got != 0.5 {
		t.Errorf("one value off by 0.5: %v", got)
	}
}

// At small size nothing is trained to the end, but every measurement is
// there and the equivariance part is exact.
func TestPermutationEquivariance(t *testing.T) {
	r := mustRun(t, "permutation-equivariance")
	if e := r.Measured["encoder_equivariance_error_none"]; e > 1e-12 {
		t.Errorf("no positions: equivariance error %v", e)
	}
	for _, k := range []string{"learned", "sinusoidal"} {
		if e := r.Measured["encoder_equivariance_error_"+k]; e < 1e-3 {
			t.Errorf("%s positions: equivariance error %v, want it large", k, e)
		}
	}
	for _, s := range []string{"learned_decoder", "none_decoder", "learned_encdec", "none_encdec"} {
		if _, ok := r.Measured["exact_match_reverse_"+s]; !ok {
			t.Errorf("no exact_match_reverse_%s", s)
		}
	}
}
