package explain

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/qkv-dev/qkv/graph"
)

func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		parts []bool
		holds bool
		want  string
	}{
		{[]bool{true, true}, true, Holds},
		{[]bool{true, false}, false, HoldsInPart},
		{[]bool{false}, false, DoesNotHold},
	} {
		if h, v := verdict(c.parts...); h != c.holds || v != c.want {
			t.Errorf("verdict(%v) = %v, %q; want %v, %q", c.parts, h, v, c.holds, c.want)
		}
	}
}

func TestVariance(t *testing.T) {
	if got := variance([]float64{1, 3, 1, 3}); got != 1 {
		t.Errorf("variance(1 3 1 3) = %v, want 1", got)
	}
}

// The raw variance grows as d_k (16 is 4 times 4), the scaled one stays 1.
func TestScoresVariance(t *testing.T) {
	r := mustRun(t, "scores-variance")
	for _, dk := range []float64{4, 16, 64} {
		raw := r.Measured["var_raw_dk"+itoa(dk)]
		if math.Abs(raw/dk-1) > 0.15 {
			t.Errorf("Var(q·k) at d_k=%v = %v, want about %v", dk, raw, dk)
		}
		if sc := r.Measured["var_scaled_dk"+itoa(dk)]; math.Abs(sc-1) > 0.15 {
			t.Errorf("scaled variance at d_k=%v = %v, want about 1", dk, sc)
		}
	}
	wantHolds(t, r)
}

// exp(80) = 5.5e34 fits float32 (max 3.4e38), exp(100) = 2.7e43 does not:
// the naive softmax must break first at c = 100.
func TestStableSoftmax(t *testing.T) {
	r := mustRun(t, "stable-softmax")
	if got := r.Measured["naive_first_nonfinite_c"]; got != 100 {
		t.Errorf("naive softmax first non-finite at c = %v, want 100", got)
	}
	if got := r.Measured["stable_nonfinite_rows"]; got != 0 {
		t.Errorf("max-subtracted softmax: %v non-finite rows, want 0", got)
	}
	wantHolds(t, r)
}

func TestRowsSumToOne(t *testing.T) {
	r := mustRun(t, "rows-sum-to-one")
	// Under a causal mask query 0 sees key 0 alone: some weight is exactly 0.
	if got := r.Measured["min_weight"]; got != 0 {
		t.Errorf("smallest weight = %v, want 0 (the masked keys)", got)
	}
	if got := r.Measured["max_row_sum_error"]; got > 1e-12 {
		t.Errorf("row sums off 1 by %v", got)
	}
	wantHolds(t, r)
}

func TestRunUnknown(t *testing.T) {
	if _, err := Run("no-such-claim", Options{Small: true}); err == nil {
		t.Error("Run of an unknown claim: no error")
	}
}

func mustRun(t *testing.T, id string) Result {
	t.Helper()
	r, err := Run(id, Options{Small: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Claim != id || r.Statement == "" || r.Method == "" || r.Why == "" {
		t.Errorf("%s: incomplete result %+v", id, r)
	}
	return r
}

func wantHolds(t *testing.T, r Result) {
	t.Helper()
	if !r.Holds || r.Verdict != Holds {
		t.Errorf("%s: verdict %q (%s), want %q", r.Claim, r.Verdict, r.Why, Holds)
	}
}

func itoa(f float64) string { return fmt.Sprint(f) }

// Equal scores give uniform weights: max 1/4, entropy log 4; one score far
// above the rest gives one-hot weights and a zero gradient.
func TestSoftmaxStats(t *testing.T) {
	readout := []float64{1, -2, 3, 0.5}
	st, err := softmaxStats([]float64{0, 0, 0, 0}, readout, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(st.maxWeight-0.25) > 1e-12 || math.Abs(st.entropy-math.Log(4)) > 1e-12 {
		t.Errorf("equal scores: max weight %v, entropy %v; want 0.25, %v", st.maxWeight, st.entropy, math.Log(4))
	}
	// p = 1/4 each: dp·r/ds_j = p_j (r_j - mean r) = (1 -2 3 0.5)/4 - 0.625/4.
	want := 0.0
	for _, r := range readout {
		want += (r - 0.625) * (r - 0.625) / 16
	}
	if math.Abs(st.gradNorm-math.Sqrt(want)) > 1e-12 {
		t.Errorf("equal scores: gradient norm %v, want %v", st.gradNorm, math.Sqrt(want))
	}
	st, err = softmaxStats([]float64{100, 0, 0, 0}, readout, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if st.maxWeight != 1 || st.gradNorm > 1e-40 {
		t.Errorf("one dominant score: max weight %v, gradient norm %v; want 1, 0", st.maxWeight, st.gradNorm)
	}
}

func TestSoftmaxSaturation(t *testing.T) {
	r := mustRun(t, "softmax-saturation")
	if a, b := r.Measured["unscaled_max_weight_dk4"], r.Measured["unscaled_max_weight_dk64"]; a >= b {
		t.Errorf("unscaled max weight %v at d_k=4, %v at 64: want it to grow", a, b)
	}
	wantHolds(t, r)
}

// Without a mask, changing token j does move the earlier positions: the
// experiment sees a leak when there is one, so its 0 under the masks means
// something.
func TestMaskedChangeSeesALeak(t *testing.T) {
	m, err := graph.NewMask(maskB, maskS, maskS)
	if err != nil {
		t.Fatal(err)
	}
	before, _, err := maskedChange(rand.New(rand.NewSource(1)), m,
		func(_, i int) bool { return i == maskS/2 }, func(_, i int) bool { return i < maskS/2 })
	if err != nil {
		t.Fatal(err)
	}
	if before == 0 {
		t.Error("unmasked attention: changing token j left the earlier outputs unchanged")
	}
}

func TestMasks(t *testing.T) {
	r := mustRun(t, "causal-mask")
	if r.Measured["max_diff_before_j"] != 0 {
		t.Errorf("causal mask: outputs before j moved by %v", r.Measured["max_diff_before_j"])
	}
	wantHolds(t, r)
	r = mustRun(t, "padding-mask")
	if r.Measured["max_diff_real"] != 0 {
		t.Errorf("padding mask: real positions moved by %v", r.Measured["max_diff_real"])
	}
	wantHolds(t, r)
}
