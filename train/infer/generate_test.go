package infer_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// countLM predicts, after any sequence, the successor of its last token
// plus its source's first token, if it has one, modulo V: a token-level
// model that is not a qkv Model.
type countLM struct{ v int }

func (c countLM) NextLogits(sources, seqs [][]int) ([][]float64, error) {
	if sources != nil && len(sources) != len(seqs) {
		return nil, errors.New("sources and sequences differ in number")
	}
	out := make([][]float64, len(seqs))
	for i, s := range seqs {
		if len(s) == 0 {
			return nil, errors.New("empty sequence")
		}
		next := s[len(s)-1] + 1
		if sources != nil {
			next += sources[i][0]
		}
		out[i] = make([]float64, c.v)
		out[i][next%c.v] = 1
	}
	return out, nil
}

func TestGenerateAnyModel(t *testing.T) {
	seqs := [][]int{{1}, {4, 2}, {0}}
	got, err := infer.Generate(countLM{v: 5}, nil, seqs, []int{3, 0, 6})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{2, 3, 4}, {}, {1, 2, 3, 4, 0, 1}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Generate = %v, want %v", got, want)
	}
	if !slices.Equal(seqs[1], []int{4, 2}) {
		t.Errorf("Generate changed its input: %v", seqs)
	}
	// With sources, each sequence reads its own while others finish.
	got, err = infer.Generate(countLM{v: 5}, [][]int{{1}, {0}, {2}}, seqs, []int{3, 0, 2})
	if err != nil {
		t.Fatal(err)
	}
	want = [][]int{{3, 0, 2}, {}, {3, 1}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Generate with sources = %v, want %v", got, want)
	}
	for _, c := range []struct {
		name    string
		lm      infer.LM
		sources [][]int
		seqs    [][]int
		steps   []int
	}{
		{"nil model", nil, nil, seqs, []int{1, 1, 1}},
		{"step count", countLM{5}, nil, seqs, []int{1}},
		{"source count", countLM{5}, [][]int{{1}}, seqs, []int{1, 1, 1}},
		{"negative steps", countLM{5}, nil, seqs, []int{1, -1, 1}},
		{"model error", countLM{5}, nil, [][]int{{}}, []int{1}},
	} {
		if _, err := infer.Generate(c.lm, c.sources, c.seqs, c.steps); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// TestNextLogitsAnyBatch: a model compiled for 2 rows gives every sequence
// the logits it gives it alone, for batches of 1 to 5 sequences of mixed
// lengths.
func TestNextLogitsAnyBatch(t *testing.T) {
	cfg, task := tiny(t)
	m, err := model.Build(cfg, 2, task.MaxLen()-1, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	seqs := [][]int{{2, 3}, {4, 2, 3, 1}, {3}, {2, 2, 2, 2, 2}, {4, 1}}
	alone := make([][]float64, len(seqs))
	for i, s := range seqs {
		out, err := m.NextLogits(nil, [][]int{s})
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = out[0]
	}
	for n := 1; n <= len(seqs); n++ {
		got, err := m.NextLogits(nil, seqs[:n])
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			for j := range got[i] {
				if math.Abs(got[i][j]-alone[i][j]) > 1e-6 {
					t.Fatalf("batch of %d: sequence %d logit %d is %v, alone %v", n, i, j, got[i][j], alone[i][j])
				}
			}
		}
	}
	for _, bad := range [][][]int{{{}}, {make([]int, m.S+1)}, {{99}}} {
		if _, err := m.NextLogits(nil, bad); err == nil {
			t.Errorf("NextLogits(%v): no error", bad)
		}
	}
}
