package explain

import (
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

func TestRowDiffs(t *testing.T) {
	// 2 rows, 2 positions, 2 logits each.
	a := []float64{0, 1, 2, 3, 4, 5, 6, 7}
	b := []float64{0, 1, 2, 3.5, 4, 5, 4, 7}
	if got := rowDiffs(a, b, 2, 2, 2); !slices.Equal(got, []float64{0, 0.5, 0, 2}) {
		t.Errorf("rowDiffs = %v, want 0 0.5 0 2", got)
	}
}

func TestSplitDiffs(t *testing.T) {
	diffs := []float64{
		0, 0.25, 1, 9, // row 0: cut at 1, end at 3 (the 9 is past the end)
		0.5, 0, 2, 3, // row 1: cut at 2, end at 4
	}
	cut := func(r int) int { return 1 + r }
	end := func(r int) int { return 3 + r }
	below, from := splitDiffs(diffs, 2, 4, cut, end)
	if below != 0.5 || from != 3 {
		t.Errorf("splitDiffs = %v, %v; want 0.5 (row 1 position 0), 3 (row 1 position 3)", below, from)
	}
}

func TestNextSymbol(t *testing.T) {
	task, err := data.New("sort", data.DefaultConfig("sort")) // symbols 0 1 2: ids 2 3 4
	if err != nil {
		t.Fatal(err)
	}
	v := task.Vocab()
	for id, want := range map[int]int{2: 3, 3: 4, 4: 2} {
		if got := nextSymbol(v, id); got != want {
			t.Errorf("nextSymbol(%d) = %d, want %d", id, got, want)
		}
	}
}

// On the trained models too the masks hide the changed tokens bit for bit,
// and the controls see them.
func TestMasksTrained(t *testing.T) {
	r := mustRun(t, "causal-mask")
	if r.Measured["trained_max_diff_before_j"] != 0 || !(r.Measured["trained_min_diff_from_j"] > 0) {
		t.Errorf("trained causal mask: %v", r.Measured)
	}
	r = mustRun(t, "padding-mask")
	if r.Measured["trained_max_diff_real"] != 0 || !(r.Measured["trained_min_diff_unmasked"] > 0) {
		t.Errorf("trained padding mask: %v", r.Measured)
	}
}
