package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/qkv-dev/qkv/internal/fsx"
	"github.com/qkv-dev/qkv/internal/graphtest"
)

// trainTiny trains tinyRun's model of arch for 2 steps into a new
// directory and returns it.
func trainTiny(t *testing.T, arch string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	code, out, stderr := qkv(append(slices.Clone(tinyRun), "--arch", arch, "--steps", "2", "--warmup", "0", "--out", dir)...)
	if code != 0 {
		t.Fatalf("train --arch %s: exit %d: %s%s", arch, code, out, stderr)
	}
	return dir
}

// mkfifo makes a FIFO at path, the stand-in for a device such as /dev/null
// (which no test may risk replacing).
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
}

// isFIFO reports whether path is still a FIFO.
func isFIFO(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}

// isPNG reports whether path holds a PNG.
func isPNG(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n"))
}

// TestAttendOutput: attend --out never replaces what is not a regular file
// (a FIFO, or a link to one, standing in for /dev/null), writes through a
// link to a regular file keeping the link, and refuses a name that is not
// a PNG's, exit 2 naming the flag.
func TestAttendOutput(t *testing.T) {
	run := trainTiny(t, "decoder")
	dir := t.TempDir()
	fifo, toFIFO := filepath.Join(dir, "fifo.png"), filepath.Join(dir, "to-fifo.png")
	mkfifo(t, fifo)
	if err := os.Symlink(fifo, toFIFO); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ out, want string }{
		{fifo, "--out: plot: " + fifo + ": is a FIFO, not a regular file; qkv writes only regular files"},
		{toFIFO, "--out: plot: " + toFIFO + ": is a symbolic link to " + fifo + ", which is a FIFO"},
		{filepath.Join(dir, "a.jpg"), "--out: plot: " + filepath.Join(dir, "a.jpg") + ": has the extension .jpg: the file written is PNG, give a name ending in .png"},
	} {
		code, _, stderr := qkv("attend", "--checkpoint", run, "--input", "1 0 2", "--out", c.out)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("attend --out %s: exit %d, stderr %q; want exit 2 and %q", c.out, code, stderr, c.want)
		}
	}
	if !isFIFO(fifo) {
		t.Errorf("the FIFO %s was replaced", fifo)
	}
	if target, err := os.Readlink(toFIFO); err != nil || target != fifo {
		t.Errorf("the link %s was replaced: %q, %v", toFIFO, target, err)
	}

	real, link := filepath.Join(dir, "real.png"), filepath.Join(dir, "link.png")
	if err := os.WriteFile(real, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.png", link); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := qkv("attend", "--checkpoint", run, "--input", "1 0 2", "--out", link); code != 0 {
		t.Fatalf("attend --out a link: exit %d: %s", code, stderr)
	}
	if target, err := os.Readlink(link); err != nil || target != "real.png" {
		t.Errorf("the link %s was replaced: %q, %v", link, target, err)
	}
	if !isPNG(real) {
		t.Errorf("the linked file %s holds no PNG", real)
	}
	if n := graphtest.DirNames(t, dir); !slices.Equal(n, []string{"fifo.png", "link.png", "real.png", "to-fifo.png"}) {
		t.Errorf("%s holds %q", dir, n)
	}
}

// TestAttendEncDecAllOrNone: an encoder–decoder's attend that cannot write
// its third PNG (its name a directory; or an I/O error as the third file is
// created) writes none, and the first name keeps its old content.
func TestAttendEncDecAllOrNone(t *testing.T) {
	run := trainTiny(t, "encdec")
	attend := func(dir string) (int, string) {
		if err := os.WriteFile(filepath.Join(dir, "attn-encoder.png"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := qkv("attend", "--checkpoint", run, "--input", "1 0 2", "--out", filepath.Join(dir, "attn.png"))
		return code, stderr
	}
	// wantNone fails unless dir holds what it held before, and extra.
	wantNone := func(dir string, extra ...string) {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(dir, "attn-encoder.png")); err != nil || string(b) != "old" {
			t.Errorf("attn-encoder.png holds %d bytes (%v), want its old content", len(b), err)
		}
		want := slices.Sorted(slices.Values(append([]string{"attn-encoder.png"}, extra...)))
		if n := graphtest.DirNames(t, dir); !slices.Equal(n, want) {
			t.Errorf("%s holds %q, want %q", dir, n, want)
		}
	}

	dir := t.TempDir()
	cross := filepath.Join(dir, "attn-cross.png")
	if err := os.Mkdir(cross, 0o755); err != nil {
		t.Fatal(err)
	}
	if code, stderr := attend(dir); code != 2 || !strings.Contains(stderr, "--out: plot: "+cross+": is a directory, not a regular file") {
		t.Errorf("attend with a directory as the third PNG: exit %d, %q", code, stderr)
	}
	wantNone(dir, "attn-cross.png")

	// Where the third file's creation is, from an attend that works.
	dir = t.TempDir()
	all := fsx.NoFaults()
	fsx.Current = all
	t.Cleanup(func() { fsx.Current = fsx.OS{} })
	code, stderr := attend(dir)
	fsx.Current = fsx.OS{}
	var creates []int
	for i, op := range all.Ops {
		if strings.HasPrefix(op, "create ") {
			creates = append(creates, i)
		}
	}
	if code != 0 || len(creates) != 3 {
		t.Fatalf("attend: exit %d, %q, operations %q", code, stderr, all.Ops)
	}
	dir = t.TempDir()
	fault := fsx.NoFaults()
	fault.FailAt = creates[2]
	fsx.Current = fault
	code, stderr = attend(dir)
	fsx.Current = fsx.OS{}
	if code != 1 || !strings.Contains(stderr, "plot: "+filepath.Join(dir, "attn-cross.png")+": "+fsx.ErrIO.Error()) {
		t.Errorf("attend failing to create the third PNG: exit %d, %q", code, stderr)
	}
	wantNone(dir)
}

// TestBenchProfileChecked: a CPU profile that cannot be written whole (a
// full disk, a failing close) fails bench, exit 1 naming the file, and
// leaves no file; a profile named by a FIFO is refused before any work.
func TestBenchProfileChecked(t *testing.T) {
	bench := func(prof string, f fsx.FS) (int, string, string) {
		fsx.Current = f
		defer func() { fsx.Current = fsx.OS{} }()
		return qkv("bench", "--task", "sort", "--length", "3", "--test-size", "4", "--dim", "8", "--heads", "2",
			"--hidden", "16", "--layers", "1", "--batch", "4", "-n", "2", "--profile", prof)
	}
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	all := fsx.NoFaults()
	if code, _, stderr := bench(prof, all); code != 0 || !isFile(prof) {
		t.Fatalf("bench --profile: exit %d, %q", code, stderr)
	}
	closeAt := slices.IndexFunc(all.Ops, func(op string) bool { return strings.HasPrefix(op, "close ") })
	if closeAt < 0 {
		t.Fatalf("the profile was not closed through fsx: %q", all.Ops)
	}

	full := fsx.NoFaults()
	full.Space = 0
	failClose := fsx.NoFaults()
	failClose.FailAt = closeAt
	for _, c := range []struct {
		name string
		fs   *fsx.Fault
		want string
	}{{"full disk", full, syscall.ENOSPC.Error()}, {"failing close", failClose, fsx.ErrIO.Error()}} {
		dir := t.TempDir()
		prof := filepath.Join(dir, "cpu.prof")
		code, out, stderr := bench(prof, c.fs)
		if code != 1 || !strings.Contains(stderr, "--profile: "+prof+": ") || !strings.Contains(stderr, c.want) {
			t.Errorf("bench --profile, %s: exit %d, stderr %q; want exit 1 naming %s and %q", c.name, code, stderr, prof, c.want)
		}
		if strings.Contains(out, "CPU profile of the timed steps in") {
			t.Errorf("bench --profile, %s: says it wrote the profile: %q", c.name, out)
		}
		if n := graphtest.DirNames(t, dir); len(n) != 0 {
			t.Errorf("bench --profile, %s: left %q", c.name, n)
		}
	}

	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	if code, out, stderr := bench(fifo, fsx.OS{}); code != 2 || !strings.Contains(stderr, "--profile: "+fifo+": is a FIFO") || out != "" {
		t.Errorf("bench --profile to a FIFO: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if !isFIFO(fifo) {
		t.Errorf("the FIFO %s was replaced", fifo)
	}
}

// TestBenchPlotRefused: bench --seq --plot refuses, before timing
// anything, a name that is not a PNG's or is a FIFO, exit 2 naming --plot.
func TestBenchPlotRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.png")
	mkfifo(t, fifo)
	for _, c := range []struct{ plot, want string }{
		{filepath.Join(dir, "scaling.jpg"), "give a name ending in .png"},
		{fifo, "is a FIFO"},
	} {
		code, out, stderr := qkv("bench", "--seq", "8", "--attention", "fused", "--batch", "1", "--heads", "1", "--head-dim", "4", "-n", "1", "--plot", c.plot)
		if code != 2 || !strings.Contains(stderr, "--plot: "+c.plot+": ") || !strings.Contains(stderr, c.want) || out != "" {
			t.Errorf("bench --plot %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.plot, code, out, stderr, c.want)
		}
	}
	if n := graphtest.DirNames(t, dir); !slices.Equal(n, []string{"fifo.png"}) || !isFIFO(fifo) {
		t.Errorf("%s holds %q", dir, n)
	}
}

// isFile reports whether path is a non-empty regular file.
func isFile(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}
