package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/qkv-dev/qkv/internal/fsx"
	"github.com/qkv-dev/qkv/internal/graphtest"
)

// fakeCurves is an Options.Curves that writes the PNG signature and the
// number of steps, as the command line's writes its PNG: through
// fsx.WriteFile.
func fakeCurves(path string, _ Summary, history []Metric) error {
	return fsx.WriteFile(path, "", func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "\x89PNG %d", len(history))
		return err
	})
}

// TestRunOutputsNotReplaced: a run directory whose summary.json is a FIFO
// fails the run naming it, and the FIFO is left; a curves.png that links
// to a file elsewhere is written through, the link kept.
func TestRunOutputsNotReplaced(t *testing.T) {
	cfg := tinyConfig()
	cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.CheckpointEvery = 4, 0, 2, 2
	dir, elsewhere := t.TempDir(), t.TempDir()
	// A run with a checkpoint to resume: a fresh run over outputs of an
	// earlier one is refused before it writes anything (EarlierRun).
	if _, err := Run(context.Background(), cfg, Options{Out: dir, StopAfter: 2}); !errors.Is(err, ErrInterrupted) {
		t.Fatal(err)
	}
	for _, name := range []string{SummaryFile, CurvesFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	summary := filepath.Join(dir, SummaryFile)
	if err := syscall.Mkfifo(summary, 0o644); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	curves := filepath.Join(elsewhere, "curves.png")
	if err := os.WriteFile(curves, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(curves, filepath.Join(dir, CurvesFile)); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), cfg, Options{Out: dir, Resume: true})
	if !errors.Is(err, fsx.ErrRefused) || !strings.Contains(err.Error(), summary+": is a FIFO") {
		t.Fatalf("got %v, want %s refused", err, summary)
	}
	if fi, err := os.Lstat(summary); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("%s was replaced (%v)", summary, err)
	}

	if err := os.Remove(summary); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), cfg, Options{Out: dir, Resume: true, Curves: fakeCurves}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, CurvesFile)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link %s was replaced (%v)", CurvesFile, err)
	}
	if b := graphtest.ReadFile(t, curves); string(b[:4]) != "\x89PNG" {
		t.Errorf("%s holds no PNG", curves)
	}
}
