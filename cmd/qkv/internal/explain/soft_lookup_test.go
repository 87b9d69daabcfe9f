package explain

import (
	"math"
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train/infer"
)

// lookupExample is a two-pair recall example, a→3 b→4, asking b then a:
// read as 20 3 21 4 SEP 21 4 20, the query b at position 5 and a at 7.
var lookupExample = data.Example{
	Prompt: []int{20, 3, 21, 4},
	Answer: []int{21, 4, 20, 3},
	Given:  []bool{true, false, true, false},
}

func TestRecallAsks(t *testing.T) {
	onKey, onValue := recallAsks(lookupExample)
	if want := []ask{{5, 2}, {7, 0}}; !slices.Equal(onKey, want) {
		t.Errorf("asks on the key %v, want %v", onKey, want)
	}
	if want := []ask{{5, 3}, {7, 1}}; !slices.Equal(onValue, want) {
		t.Errorf("asks on the value %v, want %v", onValue, want)
	}
}

// causalUniform returns an n x n causal map, each row uniform over the keys
// it sees.
func causalUniform(n int) [][]float64 {
	rows := make([][]float64, n)
	for q := range rows {
		rows[q] = make([]float64, n)
		for k := 0; k <= q; k++ {
			rows[q][k] = 1 / float64(q+1)
		}
	}
	return rows
}

// pointAt returns causalUniform(n) with the rows of asks one-hot on their
// key, or on shift(key) when shift is not nil.
func pointAt(n int, asks []ask, shift func(int) int) [][]float64 {
	rows := causalUniform(n)
	for _, a := range asks {
		k := a.Key
		if shift != nil {
			k = shift(k)
		}
		clear(rows[a.Query])
		rows[a.Query][k] = 1
	}
	return rows
}

// Two layers of two heads: layer 0 head 1 points at the matching keys,
// layer 1 head 0 at the matching values, layer 1 head 1 at the other pair's
// value, layer 0 head 0 is uniform.
func lookupMaps() infer.Maps {
	const n = 8
	onKey, onValue := recallAsks(lookupExample)
	wrong := func(k int) int { return 4 - k } // value 3 <-> value 1
	return infer.Maps{
		{causalUniform(n), pointAt(n, onKey, nil)},
		{pointAt(n, onValue, nil), pointAt(n, onValue, wrong)},
	}
}

func TestChooseLookup(t *testing.T) {
	onKey, onValue := recallAsks(lookupExample)
	maps := []infer.Maps{lookupMaps()}
	choice, bestKey, bestValue := chooseLookup(maps, [][]ask{onKey}, [][]ask{onValue})
	if choice.Layer != 1 || choice.Head != 0 || !choice.OnValue {
		t.Errorf("lookup head: layer %d head %d on the value %v; want layer 1 head 0 on the value", choice.Layer, choice.Head, choice.OnValue)
	}
	if choice.ArgmaxRight != 1 || choice.MeanRight != 1 || choice.MeanBestWrong != 0 || choice.N != 2 {
		t.Errorf("one-hot on the right value: %+v; want argmax fraction 1, mean 1, best wrong 0 over 2 answers", choice.pointing)
	}
	if bestKey.Layer != 0 || bestKey.Head != 1 || bestKey.ArgmaxRight != 1 || bestValue.Layer != 1 || bestValue.Head != 0 {
		t.Errorf("best key head %+v, best value head %+v; want layer 0 head 1 and layer 1 head 0", bestKey, bestValue)
	}

	// Without the value head, the key head is the lookup.
	maps[0][1][0] = causalUniform(8)
	maps[0][1][1] = causalUniform(8)
	if choice, _, _ = chooseLookup(maps, [][]ask{onKey}, [][]ask{onValue}); choice.OnValue || choice.Layer != 0 || choice.Head != 1 {
		t.Errorf("with no value head, lookup is layer %d head %d on the value %v; want layer 0 head 1 on the key", choice.Layer, choice.Head, choice.OnValue)
	}
}

func TestPointerStats(t *testing.T) {
	_, onValue := recallAsks(lookupExample)
	maps := []infer.Maps{lookupMaps()}
	// Uniform rows: a tie, never a right argmax; rows 5 and 7 weigh each of
	// their 6 and 8 keys alike.
	u := pointerStats(maps, [][]ask{onValue}, 0, 0)
	want := (1.0/6 + 1.0/8) / 2
	if u.ArgmaxRight != 0 || math.Abs(u.MeanRight-want) > 1e-15 || math.Abs(u.MeanBestWrong-want) > 1e-15 {
		t.Errorf("uniform rows: %+v; want argmax fraction 0, mean right = best wrong = %v", u, want)
	}
	// All weight on the other pair's value: right 0, wrong 1.
	w := pointerStats(maps, [][]ask{onValue}, 1, 1)
	if w.ArgmaxRight != 0 || w.MeanRight != 0 || w.MeanBestWrong != 1 {
		t.Errorf("rows on the wrong value: %+v; want 0, 0, 1", w)
	}
	// The key head read against the values: its weight is on the key, a
	// wrong position.
	k := pointerStats(maps, [][]ask{onValue}, 0, 1)
	if k.ArgmaxRight != 0 || k.MeanBestWrong != 1 {
		t.Errorf("key head against the values: %+v; want argmax fraction 0, best wrong 1", k)
	}
}

func TestHalves(t *testing.T) {
	a, b := halves([]int{0, 1, 2, 3, 4})
	if !slices.Equal(a, []int{0, 2, 4}) || !slices.Equal(b, []int{1, 3}) {
		t.Errorf("halves = %v, %v", a, b)
	}
}

// The full claim on a short run: every measured name is there.
func TestSoftLookupSmall(t *testing.T) {
	r := mustRun(t, "soft-lookup")
	for _, name := range []string{"lookup_layer", "lookup_head", "lookup_reads_value", "argmax_right_fraction", "mean_weight_right", "mean_weight_best_wrong", "exact_match"} {
		if _, ok := r.Measured[name]; !ok {
			t.Errorf("no %s in %v", name, r.Measured)
		}
	}
}
