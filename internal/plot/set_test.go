package plot

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/qkv-dev/qkv/internal/fsx"
)

// TestSetAllOrNone: a set whose third PNG cannot be written writes none,
// and the first two names keep what they held.
func TestSetAllOrNone(t *testing.T) {
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "a.png"), filepath.Join(dir, "b.png"), filepath.Join(dir, "nope", "c.png")}
	if err := os.WriteFile(paths[0], []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var s Set
	maps := sampleAttention(1, 1, sampleTokens)
	for _, p := range paths[:2] {
		if err := s.Attention(p, "x", sampleTokens, maps); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CrossAttention(paths[2], "x", sampleTokens, sampleTokens, maps); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, paths[2], s.Write(), "nope")
	if b, err := os.ReadFile(paths[0]); err != nil || string(b) != "old" {
		t.Errorf("%s holds %q (%v), want its old content", paths[0], b, err)
	}
	if _, err := os.Stat(paths[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s was written (%v)", paths[1], err)
	}
	noTempFiles(t, dir)
}

// TestPlotRefusesExtension: a PNG is not written under another format's
// name.
func TestPlotRefusesExtension(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jpg")
	err := Attention(path, "x", sampleTokens, sampleAttention(1, 1, sampleTokens))
	wantRefused(t, path, err, "give a name ending in .png")
	if !errors.Is(err, fsx.ErrRefused) {
		t.Errorf("%v does not wrap fsx.ErrRefused", err)
	}
}
