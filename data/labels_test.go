package data_test

import (
	"slices"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

// TestLabels: attention heatmaps name the separator and the padding (SEP,
// PAD) instead of showing their bare symbols "|" and "_", and an id
// outside the vocabulary by its number.
func TestLabels(t *testing.T) {
	v, err := data.NewVocab([]string{"0", "1", "2"})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := v.Encode("2 0 | 1 _")
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, 99)
	if got, want := v.Labels(ids), []string{"2", "0", "SEP", "1", "PAD", "<99>"}; !slices.Equal(got, want) {
		t.Errorf("Labels(%v) = %q, want %q", ids, got, want)
	}
}
