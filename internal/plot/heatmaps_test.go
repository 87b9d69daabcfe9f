package plot

import (
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/graph"
)

// TestCausalHidden: the cells marked hidden are the ones graph.Causal, the
// mask the models use, hides, and no others.
func TestCausalHidden(t *testing.T) {
	for _, n := range []int{1, 3, 7} {
		m, err := graph.MaskOf(graph.Causal(), 1, n, n)
		if err != nil {
			t.Fatal(err)
		}
		h := CausalHidden(n)
		for q := range n {
			for k := range n {
				if h[q][k] == m.Allow[q*n+k] {
					t.Fatalf("n=%d: cell (%d, %d) hidden %v, mask allows %v", n, q, k, h[q][k], m.Allow[q*n+k])
				}
			}
		}
	}
}

// TestSelfHidden: the cells marked hidden are the ones the masks of the
// models (graph.Causal, graph.Window, graph.Band) hide, and no others.
func TestSelfHidden(t *testing.T) {
	if SelfHidden(4, false, 0) != nil {
		t.Error("a bidirectional map without a window has hidden cells")
	}
	for _, n := range []int{1, 3, 7} {
		for _, w := range []int{0, 1, 2, 5} {
			for _, causal := range []bool{true, false} {
				var visible func(q, k int) bool
				switch {
				case w == 0:
					visible = func(q, k int) bool { return k <= q }
				case causal:
					m, _ := graph.Window(w)
					visible = func(q, k int) bool { return m.Visible(0, 0, q, k) }
				default:
					m, _ := graph.Band(w)
					visible = func(q, k int) bool { return m.Visible(0, 0, q, k) }
				}
				if !causal && w == 0 {
					continue
				}
				h := SelfHidden(n, causal, w)
				for q := range n {
					for k := range n {
						if h[q][k] == visible(q, k) {
							t.Fatalf("n=%d causal=%v w=%d: cell (%d, %d) hidden %v, visible %v", n, causal, w, q, k, h[q][k], visible(q, k))
						}
					}
				}
			}
		}
	}
}

// TestHeatmaps: one panel per layer and head, in order, each carrying its
// weights and the hidden cells.
func TestHeatmaps(t *testing.T) {
	maps := [][][][]float64{
		{{{1}}, {{0.5}}},
		{{{0.25}}, {{0.125}}},
	}
	hidden := [][]bool{{false}}
	got := Heatmaps(maps, hidden)
	want := []struct{ layer, head int }{{0, 0}, {0, 1}, {1, 0}, {1, 1}}
	if len(got) != len(want) {
		t.Fatalf("%d panels, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Layer != w.layer || g.Head != w.head || g.Weights[0][0] != maps[w.layer][w.head][0][0] || !slices.Equal(g.Hidden[0], hidden[0]) {
			t.Errorf("panel %d = %+v, want layer %d head %d", i, g, w.layer, w.head)
		}
	}
}
