package data_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

// The layouts below are worked by hand from seq = prompt + SEP + answer,
// Inputs = seq[:len-1], Targets = seq[1:], weight 1 where the target is an
// answer token.
func TestMakeBatchLayout(t *testing.T) {
	tests := []struct {
		name        string
		examples    []data.Example
		sep, pad, S int
		want        data.Batch
	}{
		{
			name: "sort 2 0 1 and a short row",
			examples: []data.Example{
				{Prompt: []int{4, 2, 3}, Answer: []int{2, 3, 4}}, // seq 4 2 3 | 2 3 4
				{Prompt: []int{7}, Answer: []int{8, 9}},          // seq 7 | 8 9
			},
			sep: 1, pad: 0, S: 6,
			want: data.Batch{
				B: 2, S: 6,
				Inputs: []int{
					4, 2, 3, 1, 2, 3,
					7, 1, 8, 0, 0, 0,
				},
				Targets: []int{
					2, 3, 1, 2, 3, 4,
					1, 8, 9, 0, 0, 0,
				},
				Weights: []float64{
					0, 0, 0, 1, 1, 1,
					0, 1, 1, 0, 0, 0,
				},
				Lengths: []int{6, 3},
				Starts:  []int{3, 1},
			},
		},
		{
			name: "other special ids, room to spare",
			examples: []data.Example{
				{Prompt: []int{5, 6}, Answer: []int{7}}, // seq 5 6 | 7
			},
			sep: 9, pad: 3, S: 5,
			want: data.Batch{
				B: 1, S: 5,
				Inputs:  []int{5, 6, 9, 3, 3},
				Targets: []int{6, 9, 7, 3, 3},
				Weights: []float64{0, 0, 1, 0, 0},
				Lengths: []int{3},
				Starts:  []int{2},
			},
		},
		{
			name:     "empty prompt",
			examples: []data.Example{{Prompt: nil, Answer: []int{4, 5}}}, // seq | 4 5
			sep:      1, pad: 0, S: 2,
			want: data.Batch{
				B: 1, S: 2,
				Inputs:  []int{1, 4},
				Targets: []int{4, 5},
				Weights: []float64{1, 1},
				Lengths: []int{2},
				Starts:  []int{0},
			},
		},
		{
			name: "multi-query recall: queries given, values targets",
			examples: []data.Example{
				// seq 5 2 6 3 | 6 3 5 2
				{Prompt: []int{5, 2, 6, 3}, Answer: []int{6, 3, 5, 2}, Given: []bool{true, false, true, false}},
				// seq 7 4 | 7 4, Given nil: both answer tokens are targets
				{Prompt: []int{7, 4}, Answer: []int{7, 4}},
			},
			sep: 1, pad: 0, S: 8,
			want: data.Batch{
				B: 2, S: 8,
				Inputs: []int{
					5, 2, 6, 3, 1, 6, 3, 5,
					7, 4, 1, 7, 0, 0, 0, 0,
				},
				Targets: []int{
					2, 6, 3, 1, 6, 3, 5, 2,
					4, 1, 7, 4, 0, 0, 0, 0,
				},
				Weights: []float64{
					0, 0, 0, 0, 0, 1, 0, 1,
					0, 0, 1, 1, 0, 0, 0, 0,
				},
				Lengths: []int{8, 4},
				Starts:  []int{4, 2},
			},
		},
		{
			name:     "a given token after the last target carries no loss",
			examples: []data.Example{{Prompt: []int{4}, Answer: []int{5, 6}, Given: []bool{false, true}}}, // seq 4 | 5 6
			sep:      1, pad: 0, S: 3,
			want: data.Batch{
				B: 1, S: 3,
				Inputs:  []int{4, 1, 5},
				Targets: []int{1, 5, 6},
				Weights: []float64{0, 1, 0},
				Lengths: []int{3},
				Starts:  []int{1},
			},
		},
	}
	for _, tt := range tests {
		got, err := data.MakeBatch(tt.examples, tt.sep, tt.pad, tt.S)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got.B != tt.want.B || got.S != tt.want.S ||
			!slices.Equal(got.Inputs, tt.want.Inputs) || !slices.Equal(got.Targets, tt.want.Targets) ||
			!slices.Equal(got.Weights, tt.want.Weights) || !slices.Equal(got.Lengths, tt.want.Lengths) ||
			!slices.Equal(got.Starts, tt.want.Starts) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
		for i, ex := range tt.examples {
			back, err := got.Example(i)
			if err != nil || !slices.Equal(back.Prompt, ex.Prompt) || !slices.Equal(back.Answer, ex.Answer) || !slices.Equal(back.Given, ex.Given) {
				t.Errorf("%s: Example(%d) = %v, %v, want %v", tt.name, i, back, err, ex)
			}
		}
	}
}

func TestMakeBatchErrors(t *testing.T) {
	ok := data.Example{Prompt: []int{2, 3}, Answer: []int{3, 2}}
	tests := []struct {
		name     string
		examples []data.Example
		sep, pad int
		S        int
		want     string
	}{
		{"none", nil, 1, 0, 4, "no examples"},
		{"S zero", []data.Example{ok}, 1, 0, 0, "S must be positive"},
		{"same specials", []data.Example{ok}, 1, 1, 4, "must be distinct"},
		{"empty answer", []data.Example{ok, {Prompt: []int{2}}}, 1, 0, 4, "example 1 has an empty answer"},
		{"all given", []data.Example{ok, {Prompt: []int{2}, Answer: []int{3}, Given: []bool{true}}}, 1, 0, 4, "example 1 has no target in its answer of 1 token,"},
		{"given too short", []data.Example{{Prompt: []int{2}, Answer: []int{3, 2}, Given: []bool{true}}}, 1, 0, 4, "example 0 marks 1 answer position given or not, but its answer has 2"},
		{"sep in prompt", []data.Example{{Prompt: []int{2, 1}, Answer: []int{2}}}, 1, 0, 4, "prompt position 1 holds id 1"},
		{"pad in answer", []data.Example{{Prompt: []int{2}, Answer: []int{2, 0}}}, 1, 0, 4, "answer position 1 holds id 0"},
		{"negative", []data.Example{{Prompt: []int{-3}, Answer: []int{2}}}, 1, 0, 4, "holds id -3"},
		{"too long", []data.Example{ok, {Prompt: []int{2, 3, 4}, Answer: []int{2, 3}}}, 1, 0, 4, "example 1: prompt (3) + separator + answer (2) is 6 tokens, needs S >= 5, got S = 4"},
	}
	for _, tt := range tests {
		_, err := data.MakeBatch(tt.examples, tt.sep, tt.pad, tt.S)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
	// Exactly S = len(prompt) + len(answer) fits.
	if _, err := data.MakeBatch([]data.Example{ok}, 1, 0, 4); err != nil {
		t.Errorf("exact fit: %v", err)
	}
}

// Batches of generated examples satisfy the layout's invariants, and
// variable-length tasks give rows of different lengths.
func TestBatchForInvariants(t *testing.T) {
	for _, tc := range taskCases {
		task := mustNew(t, tc.name, tc.cfg)
		rng := rand.New(rand.NewPCG(8, 0))
		exs := make([]data.Example, 64)
		for i := range exs {
			exs[i] = task.Generate(rng)
		}
		b, err := data.BatchFor(task, exs)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if b.B != 64 || b.S != task.MaxLen()-1 {
			t.Fatalf("%s: B, S = %d, %d", tc.name, b.B, b.S)
		}
		lengths := map[int]bool{}
		for i, ex := range exs {
			row, n := i*b.S, b.Lengths[i]
			lengths[n] = true
			if n != len(ex.Prompt)+len(ex.Answer) {
				t.Fatalf("%s row %d: length %d", tc.name, i, n)
			}
			var w float64
			for j := 0; j < b.S; j++ {
				w += b.Weights[row+j]
				if j+1 < n && b.Inputs[row+j+1] != b.Targets[row+j] {
					t.Fatalf("%s row %d: targets are not inputs shifted left at %d", tc.name, i, j)
				}
				if j >= n && (b.Inputs[row+j] != 0 || b.Targets[row+j] != 0 || b.Weights[row+j] != 0) {
					t.Fatalf("%s row %d: position %d past the length is not padding", tc.name, i, j)
				}
			}
			if b.Inputs[row+len(ex.Prompt)] != task.Vocab().SEP() || w != float64(len(ex.Targets())) {
				t.Fatalf("%s row %d: SEP or weights wrong", tc.name, i)
			}
		}
		variable := tc.cfg.MinLength != tc.cfg.MaxLength || tc.cfg.MinPairs != tc.cfg.MaxPairs
		if variable && len(lengths) < 2 {
			t.Errorf("%s %+v: variable-length task gave one row length %v", tc.name, tc.cfg, lengths)
		}
		if !variable && len(lengths) != 1 {
			t.Errorf("%s %+v: fixed-length task gave row lengths %v", tc.name, tc.cfg, lengths)
		}
	}
	task := mustNew(t, "sort", data.DefaultConfig("sort"))
	_, err := data.BatchFor(task, []data.Example{{Prompt: []int{2, 3, 4, 2, 3, 9}, Answer: []int{2}}})
	if err == nil || !strings.Contains(err.Error(), `task "sort"`) || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("BatchFor with id 9: %v", err)
	}
	_, err = data.BatchFor(task, nil)
	if err == nil || !strings.Contains(err.Error(), `task "sort"`) {
		t.Errorf("BatchFor with no examples: %v", err)
	}
}

func TestBatchExampleAndPadRows(t *testing.T) {
	b, err := data.MakeBatch([]data.Example{{Prompt: []int{2, 3}, Answer: []int{4}}}, 1, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.PadRows(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := data.Batch{
		B: 3, S: 4,
		Inputs:  []int{2, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		Targets: []int{3, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		Weights: []float64{0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		Lengths: []int{3, 0, 0},
	}
	if p.B != want.B || !slices.Equal(p.Inputs, want.Inputs) || !slices.Equal(p.Targets, want.Targets) ||
		!slices.Equal(p.Weights, want.Weights) || !slices.Equal(p.Lengths, want.Lengths) {
		t.Errorf("PadRows(3):\n got %+v\nwant %+v", p, want)
	}
	if b.B != 1 || len(b.Inputs) != 4 {
		t.Error("PadRows modified its receiver")
	}
	if _, err := b.PadRows(0, 0); err == nil {
		t.Error("PadRows shrinking succeeded")
	}
	if _, err := p.Example(1); err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Errorf("Example of a filler row: %v", err)
	}
	for _, i := range []int{-1, 3} {
		if _, err := p.Example(i); err == nil {
			t.Errorf("Example(%d) succeeded", i)
		}
	}
	broken := data.Batch{B: 2, S: 3, Inputs: []int{1}}
	if _, err := broken.Example(0); err == nil {
		t.Error("Example on an inconsistent batch succeeded")
	}
	if _, err := broken.PadRows(4, 0); err == nil {
		t.Error("PadRows on an inconsistent batch succeeded")
	}
}
