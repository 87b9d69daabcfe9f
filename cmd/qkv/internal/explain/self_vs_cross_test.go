package explain

import (
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train/infer"
)

func TestCrossAsks(t *testing.T) {
	if got, want := crossAsks(4, true), []ask{{0, 3}, {1, 2}, {2, 1}, {3, 0}}; !slices.Equal(got, want) {
		t.Errorf("reverse asks %v, want %v", got, want)
	}
	if got, want := crossAsks(3, false), []ask{{0, 0}, {1, 1}, {2, 2}}; !slices.Equal(got, want) {
		t.Errorf("copy asks %v, want %v", got, want)
	}
}

// oneHot returns a rows x cols map whose row q is one-hot on at(q).
func oneHot(rows, cols int, at func(q int) int) [][]float64 {
	w := make([][]float64, rows)
	for q := range w {
		w[q] = make([]float64, cols)
		w[q][at(q)] = 1
	}
	return w
}

// An anti-diagonal cross-attention head reads the reverse positions every
// time and the copy ones never; a diagonal one the other way round.
func TestCrossAlignment(t *testing.T) {
	const n = 4
	anti := oneHot(n, n, func(q int) int { return n - 1 - q })
	diag := oneHot(n, n, func(q int) int { return q })
	maps := []infer.Maps{{{diag, anti}}}
	rev, cp := [][]ask{crossAsks(n, true)}, [][]ask{crossAsks(n, false)}
	best := bestPointer(maps, rev)
	if best.Layer != 0 || best.Head != 1 || best.ArgmaxRight != 1 {
		t.Errorf("reverse head %+v, want layer 0 head 1 with every argmax right", best)
	}
	if got := pointerStats(maps, cp, 0, 1); got.ArgmaxRight != 0 || got.MeanRight != 0 {
		t.Errorf("anti-diagonal head read as copy: %+v, want 0", got)
	}
	if best = bestPointer(maps, cp); best.Head != 0 || best.ArgmaxRight != 1 {
		t.Errorf("copy head %+v, want head 0 with every argmax right", best)
	}
}

// encDecMaps returns well-formed maps for a source of ss and a target of
// st tokens: uniform encoder and cross rows, a causal uniform decoder.
func encDecMaps(ss, st int) infer.AttentionMaps {
	uniform := func(rows, cols int) [][]float64 {
		w := make([][]float64, rows)
		for q := range w {
			w[q] = make([]float64, cols)
			for k := range w[q] {
				w[q][k] = 1 / float64(cols)
			}
		}
		return w
	}
	return infer.AttentionMaps{
		Encoder: infer.Maps{{uniform(ss, ss)}},
		Self:    infer.Maps{{causalUniform(st)}},
		Cross:   infer.Maps{{uniform(st, ss)}},
	}
}

func TestCheckShapes(t *testing.T) {
	m := encDecMaps(6, 3)
	if c := checkShapes(m, 6, 3); !c.OK || c.AboveDiagonal != 0 || c.RowSumError > 1e-15 {
		t.Errorf("well-formed maps: %+v", c)
	}
	// Cross-attention over the target instead of the source: 3 x 3.
	if c := checkShapes(encDecMaps(3, 3), 6, 3); c.OK {
		t.Errorf("cross-attention 3x3 where 3x6 is due passed (%+v)", c)
	}
	bad := encDecMaps(6, 3)
	bad.Cross = infer.Maps{{encDecMaps(3, 6).Cross[0][0]}} // 6 x 3, transposed
	if checkShapes(bad, 6, 3).OK {
		t.Error("transposed cross-attention passed")
	}
	// A decoder weight on a later position: not causal.
	leak := encDecMaps(6, 3)
	leak.Self[0][0][0][1], leak.Self[0][0][0][0] = 0.25, 0.75
	if c := checkShapes(leak, 6, 3); c.AboveDiagonal != 0.25 {
		t.Errorf("decoder weight 0.25 above the diagonal: measured %v", c.AboveDiagonal)
	}
	// A row that does not sum to 1.
	off := encDecMaps(6, 3)
	off.Cross[0][0][1][0] += 0.5
	if c := checkShapes(off, 6, 3); c.RowSumError != 0.5 {
		t.Errorf("row summing to 1.5: error %v, want 0.5", c.RowSumError)
	}
}

func TestMapsDiff(t *testing.T) {
	a, b := encDecMaps(4, 2), encDecMaps(4, 2)
	if d := mapsDiff(a.Encoder, b.Encoder); d != 0 {
		t.Errorf("equal maps differ by %v", d)
	}
	b.Encoder[0][0][2][3] += 0.125
	if d := mapsDiff(a.Encoder, b.Encoder); d != 0.125 {
		t.Errorf("maps 0.125 apart differ by %v", d)
	}
}

func TestChanged(t *testing.T) {
	task, err := data.New("reverse", data.TaskConfig{Length: 3, Alphabet: 3})
	if err != nil {
		t.Fatal(err)
	}
	v := task.Vocab() // symbols 0 1 2 are ids 2 3 4
	if got := changed([]int{2, 3, 4}, v); !slices.Equal(got, []int{3, 4, 2}) {
		t.Errorf("changed(2 3 4) = %v, want 3 4 2", got)
	}
}

func TestSelfVsCrossSmall(t *testing.T) {
	r := mustRun(t, "self-vs-cross")
	// Whatever a short run learns, the sources of Q, K and V are wiring.
	if r.Measured["shapes_ok"] != 1 || r.Measured["encoder_diff_when_target_changes"] != 0 ||
		r.Measured["decoder_layer0_self_diff_when_source_changes"] != 0 || r.Measured["cross_diff_when_source_changes"] == 0 {
		t.Errorf("self-vs-cross wiring: %v", r.Measured)
	}
}
