package infer_test

import (
	"math"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// checkRows checks that every map of maps is rows x cols per head, each
// row a distribution (weights in [0, 1] summing to 1 within 1e-9) and, if
// causal, zero after the diagonal.
func checkRows(t *testing.T, what string, maps infer.Maps, layers, heads, rows, cols int, causal bool) {
	t.Helper()
	if len(maps) != layers {
		t.Fatalf("%s: %d layers, want %d", what, len(maps), layers)
	}
	for l, hs := range maps {
		if len(hs) != heads {
			t.Fatalf("%s: layer %d has %d heads, want %d", what, l, len(hs), heads)
		}
		for h, m := range hs {
			if len(m) != rows {
				t.Fatalf("%s: layer %d head %d has %d rows, want %d", what, l, h, len(m), rows)
			}
			for i, row := range m {
				if len(row) != cols {
					t.Fatalf("%s: row %d has %d keys, want %d", what, i, len(row), cols)
				}
				sum := 0.0
				for j, w := range row {
					if w < 0 || w > 1 || (causal && j > i && w != 0) {
						t.Fatalf("%s: layer %d head %d weight (%d, %d) = %v", what, l, h, i, j, w)
					}
					sum += w
				}
				if math.Abs(sum-1) > 1e-9 {
					t.Fatalf("%s: layer %d head %d row %d sums to %v", what, l, h, i, sum)
				}
			}
		}
	}
}

// TestAttentionMaps: a decoder's maps are causal distributions over each
// sequence's own tokens, and a sequence's maps do not depend on what else
// shares its batch.
func TestAttentionMaps(t *testing.T) {
	cfg, m := randomModel(t, config.Float64, layers.PositionsLearned, false)
	seqs := [][]int{{1, 2, 3, 4, 0}, {2, 2}, {4, 3, 1}}
	maps, err := infer.Attention(m, nil, seqs)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]infer.Maps, len(maps))
	for b, seq := range seqs {
		if maps[b].Encoder != nil || maps[b].Cross != nil {
			t.Errorf("sequence %d: a decoder-only model has encoder or cross maps", b)
		}
		got[b] = maps[b].Self
		checkRows(t, "decoder", got[b], cfg.Model.Layers, cfg.Model.Heads, len(seq), len(seq), true)
	}
	aloneMaps, err := infer.Attention(m, nil, seqs[1:2])
	if err != nil {
		t.Fatal(err)
	}
	alone := []infer.Maps{aloneMaps[0].Self}
	for l := range alone[0] {
		for h := range alone[0][l] {
			for i := range alone[0][l][h] {
				for j, w := range alone[0][l][h][i] {
					if d := math.Abs(w - got[1][l][h][i][j]); d > 1e-12 {
						t.Fatalf("sequence 1 alone differs from in a batch by %v at layer %d head %d (%d, %d)", d, l, h, i, j)
					}
				}
			}
		}
	}
	for _, bad := range [][][]int{nil, {{}}, {{1}, {1}, {1}, {1}}, {make([]int, m.S+1)}} {
		if _, err := infer.Attention(m, nil, bad); err == nil || !strings.Contains(err.Error(), "infer: attention") {
			t.Errorf("Attention(%d sequences) = %v, want an error", len(bad), err)
		}
	}
}

// TestEncDecAttentionMaps: the encoder's, decoder's and cross maps have the
// shapes of source and target, and their rows are distributions.
func TestEncDecAttentionMaps(t *testing.T) {
	cfg, task, examples := multiQuery(t, config.ArchEncDec)
	m, err := model.Build(cfg, 2, cfg.Model.MaxLen, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	randomize(m.Params)
	var src, tgt [][]int
	for _, e := range examples[:2] {
		f := task.Frame(e.Prompt)
		src = append(src, f.Prompt)
		tgt = append(tgt, append([]int{task.Vocab().SEP()}, e.Answer[:len(e.Answer)-1]...))
	}
	got, err := infer.Attention(m, src, tgt)
	if err != nil {
		t.Fatal(err)
	}
	for b := range src {
		ns, nt := len(src[b]), len(tgt[b])
		checkRows(t, "encoder", got[b].Encoder, cfg.Model.Layers, cfg.Model.Heads, ns, ns, false)
		checkRows(t, "decoder", got[b].Self, cfg.Model.Layers, cfg.Model.Heads, nt, nt, true)
		checkRows(t, "cross", got[b].Cross, cfg.Model.Layers, cfg.Model.Heads, nt, ns, false)
	}
	if _, err := infer.Attention(m, src, tgt[:1]); err == nil {
		t.Error("Attention with 2 sources and 1 target: no error")
	}
	if _, err := infer.Attention(m, nil, tgt); err == nil {
		t.Error("Attention of an encoder-decoder without sources: no error")
	}
}
