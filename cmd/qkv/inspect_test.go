package main

import (
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

// TestTokenLabels: attention heatmaps name the separator and the padding
// (SEP, PAD) instead of showing their bare symbols "|" and "_".
func TestTokenLabels(t *testing.T) {
	v, err := data.NewVocab([]string{"0", "1", "2"})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := v.Encode("2 0 | 1 _")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tokenLabels(v, ids), []string{"2", "0", "SEP", "1", "PAD"}; !slices.Equal(got, want) {
		t.Errorf("tokenLabels(%v) = %q, want %q", ids, got, want)
	}
}

// TestCausalHidden: the cells marked hidden are the ones the causal mask
// hides, the keys after each query, and no others.
func TestCausalHidden(t *testing.T) {
	h, err := causalHidden(3)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]bool{{false, true, true}, {false, false, true}, {false, false, false}}
	if !slices.EqualFunc(h, want, slices.Equal[[]bool]) {
		t.Errorf("causalHidden(3) = %v, want %v", h, want)
	}
}
