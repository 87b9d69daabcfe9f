package fsx

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// withFault makes writers use f until the test ends.
func withFault(t *testing.T, f *Fault) {
	t.Helper()
	Current = f
	t.Cleanup(func() { Current = OS{} })
}

// content returns path's content, or "absent".
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantRefused fails unless err is a refusal whose message has each of want.
func wantRefused(t *testing.T, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("got %v, want a refusal (ErrRefused)", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// TestWriteFileRefusesNonRegular: a FIFO, a directory, a link to a FIFO
// and a device are refused, naming the path, and are left as they were.
// (The device is only checked: a write to a real device must never be
// tried, fixed or not.)
func TestWriteFileRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.png")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	sub := filepath.Join(dir, "sub.png")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.png")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, kind string }{
		{fifo, "is a FIFO"},
		{sub, "is a directory"},
		{link, "is a symbolic link to " + fifo + ", which is a FIFO"},
	} {
		err := WriteFile(c.path, ".png", write("png"))
		wantRefused(t, err, c.path+": ", c.kind, "not a regular file; qkv writes only regular files")
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Errorf("the directory was replaced: %v", err)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"fifo.png", "link.png", "sub.png"}) {
		t.Errorf("refused writes left %q", n)
	}
	wantRefused(t, CheckOutput(os.DevNull, ""), os.DevNull+": is a character device")
}

// TestWriteFileThroughLink: a link to a regular file is written through,
// the link kept; a link that resolves to nothing is refused and nothing is
// created.
func TestWriteFileThroughLink(t *testing.T) {
	dir := t.TempDir()
	file, link := filepath.Join(dir, "real.json"), filepath.Join(dir, "link.json")
	if err := WriteFile(file, ".json", write("old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.json", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, ".json", write("new")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", fi.Mode(), err)
	}
	if got := content(t, file); got != "new" {
		t.Errorf("the linked file holds %q, want %q", got, "new")
	}

	dangling := filepath.Join(dir, "dangling.json")
	if err := os.Symlink("missing.json", dangling); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, WriteFile(dangling, ".json", write("x")), dangling+": is a symbolic link that resolves to no file")
	if n := names(t, dir); !slices.Equal(n, []string{"dangling.json", "link.json", "real.json"}) {
		t.Errorf("%s holds %q", dir, n)
	}

	// Two names of one file in one output are refused: the second rename
	// would undo the first.
	err := WriteFiles(Output{Path: file, Write: write("a")}, Output{Path: link, Write: write("b")})
	wantRefused(t, err, link+": names the same file as "+file)
	if got := content(t, file); got != "new" {
		t.Errorf("a refused output changed %s to %q", file, got)
	}
}

// TestWriteFileExtension: a name whose extension is not the format's is
// refused, in any case, naming what is expected, and nothing is written.
func TestWriteFileExtension(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, want string }{
		{"a.jpg", "has the extension .jpg: the file written is PNG, give a name ending in .png"},
		{"a", "has no extension: the file written is PNG, give a name ending in .png"},
		{"", "no file name"},
		{"sub/", "no file name, only a directory"},
		{"nope/a.png", "the directory " + filepath.Join(dir, "nope") + " does not exist"},
	} {
		path := filepath.Join(dir, c.name)
		if c.name == "" || strings.HasSuffix(c.name, "/") {
			path = c.name
		}
		wantRefused(t, WriteFile(path, ".png", write("png")), c.want)
	}
	if err := WriteFile(filepath.Join(dir, "A.PNG"), ".png", write("png")); err != nil {
		t.Errorf("an upper-case extension: %v", err)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"A.PNG"}) {
		t.Errorf("%s holds %q", dir, n)
	}
}

// threeFiles is an output of three files of which a and c exist before.
func threeFiles(t *testing.T) (dir string, outs []Output) {
	t.Helper()
	dir = t.TempDir()
	for _, name := range []string{"a.png", "c.png"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("old "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a.png", "b.png", "c.png"} {
		outs = append(outs, Output{Path: filepath.Join(dir, name), Ext: ".png", Write: write("new " + name)})
	}
	return dir, outs
}

// state returns what the three files hold: "old" (a and c as before, b
// absent), "new" (all new), or a description of a mixture.
func state(t *testing.T, dir string) string {
	t.Helper()
	var got []string
	for _, name := range []string{"a.png", "b.png", "c.png"} {
		got = append(got, content(t, filepath.Join(dir, name)))
	}
	switch {
	case slices.Equal(got, []string{"old a.png", "absent", "old c.png"}):
		return "old"
	case slices.Equal(got, []string{"new a.png", "new b.png", "new c.png"}):
		return "new"
	}
	return strings.Join(got, ", ")
}

// TestWriteFilesAllOrNone fails each operation of a three-file output in
// turn (and the third file's own write, and the disk): the files are all
// new, or, on any error before the last rename, all as they were, and
// nothing else is left in the directory.
func TestWriteFilesAllOrNone(t *testing.T) {
	dir, outs := threeFiles(t)
	outs[2].Write = func(io.Writer) error { return errors.New("cannot draw") }
	if err := WriteFiles(outs...); err == nil || !strings.Contains(err.Error(), outs[2].Path+": cannot draw") {
		t.Errorf("the third file failing: %v, want an error naming it", err)
	}
	if s := state(t, dir); s != "old" {
		t.Errorf("the third file failing left %s", s)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"a.png", "c.png"}) {
		t.Errorf("the third file failing left %q", n)
	}

	dir, outs = threeFiles(t)
	fault := NoFaults()
	fault.Space = int64(len("new a.png") + len("new b.png") + 2)
	withFault(t, fault)
	err := WriteFiles(outs...)
	Current = OS{}
	if !errors.Is(err, syscall.ENOSPC) || !strings.HasPrefix(err.Error(), outs[2].Path+": ") {
		t.Errorf("a full disk: %v, want ENOSPC naming %s", err, outs[2].Path)
	}
	if s := state(t, dir); s != "old" {
		t.Errorf("a full disk left %s", s)
	}

	dir, outs = threeFiles(t)
	all := NoFaults()
	withFault(t, all)
	if err := WriteFiles(outs...); err != nil || state(t, dir) != "new" {
		t.Fatalf("without faults: %s, %v", state(t, dir), err)
	}
	Current = OS{}
	for k, op := range all.Ops {
		dir, outs := threeFiles(t)
		fault := NoFaults()
		fault.FailAt = k
		withFault(t, fault)
		err := WriteFiles(outs...)
		Current = OS{}
		s, n := state(t, dir), names(t, dir)
		switch kind := strings.Fields(op)[0]; {
		case kind == "link" || (kind == "remove" && k > slices.IndexFunc(all.Ops, func(op string) bool { return strings.HasPrefix(op, "rename ") })):
			// A backup not made, or not removed, after the output is
			// complete: no error, at most a hidden leftover.
			if err != nil || s != "new" {
				t.Errorf("operation %d (%s) failed: %v, and the files hold %s", k, op, err, s)
			}
			continue
		case err == nil:
			t.Errorf("operation %d (%s) failed unreported", k, op)
		case errors.Is(err, ErrUnsynced) && s != "new", !errors.Is(err, ErrUnsynced) && s != "old":
			t.Errorf("operation %d (%s) failed: %v, and the files hold %s", k, op, err, s)
		}
		if !slices.Equal(n, []string{"a.png", "b.png", "c.png"}) && !slices.Equal(n, []string{"a.png", "c.png"}) {
			t.Errorf("operation %d (%s) failed: %s holds %q", k, op, dir, n)
		}
	}
	if !slices.ContainsFunc(all.Ops, func(op string) bool { return strings.HasPrefix(op, "link ") }) {
		t.Errorf("no backups were linked: %q", all.Ops)
	}
}

// TestWriteFilesCrash kills a three-file output after each operation in
// turn: every file is then whole, old or new, never missing or partial.
func TestWriteFilesCrash(t *testing.T) {
	for k := 0; ; k++ {
		dir, outs := threeFiles(t)
		fault := NoFaults()
		fault.CrashAfter = k
		withFault(t, fault)
		err := WriteFiles(outs...)
		Current = OS{}
		if !fault.Crashed {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		for _, name := range []string{"a.png", "b.png", "c.png"} {
			got := content(t, filepath.Join(dir, name))
			if got != "new "+name && got != "old "+name && !(name == "b.png" && got == "absent") {
				t.Errorf("crash after %d operations: %s holds %q", k, name, got)
			}
		}
	}
}

// TestPendingChecksEveryStep: a streamed file (a CPU profile) whose writes
// fail, even unchecked by its writer, or whose sync, close or rename fails,
// is not put in place, and Commit names the file.
func TestPendingChecksEveryStep(t *testing.T) {
	for k := 0; ; k++ {
		dir := t.TempDir()
		path := filepath.Join(dir, "cpu.prof")
		fault := NoFaults()
		fault.FailAt = k
		withFault(t, fault)
		p, err := Create(path, "")
		if err == nil {
			p.Write([]byte("profile")) // unchecked, as runtime/pprof does
			err = p.Commit()
		}
		Current = OS{}
		if !fault.Failed {
			if err != nil || content(t, path) != "profile" {
				t.Fatalf("without faults: %q, %v", content(t, path), err)
			}
			break
		}
		if errors.Is(err, ErrUnsynced) {
			continue // renamed; only the directory's sync failed
		}
		if err == nil || !strings.HasPrefix(err.Error(), path+": ") {
			t.Errorf("operation %d (%q) failed: %v, want an error naming %s", k, fault.Ops, err, path)
		}
		if n := names(t, dir); len(n) != 0 {
			t.Errorf("operation %d failed: %s holds %q", k, dir, n)
		}
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.prof")
	fault := NoFaults()
	fault.Space = 0
	withFault(t, fault)
	p, err := Create(path, "")
	if err != nil {
		t.Fatal(err)
	}
	p.Write(make([]byte, 2<<20)) // past the buffer: the disk is reached
	p.Write([]byte("more"))
	err = p.Commit()
	Current = OS{}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a full disk: %v, want ENOSPC", err)
	}
	if n := names(t, dir); len(n) != 0 {
		t.Errorf("a full disk left %q", n)
	}
}

// TestPendingTargetChanged: a name that became a FIFO while its file was
// written (a profile is open for a whole benchmark) is not replaced.
func TestPendingTargetChanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.prof")
	p, err := Create(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	p.Write([]byte("profile"))
	wantRefused(t, p.Commit(), path+": is now a FIFO")
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v", err)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"cpu.prof"}) {
		t.Errorf("%s holds %q", dir, n)
	}
}

// TestWriteFileKeepsMode: a replaced file keeps its permissions, so that a
// private file does not become readable by all.
func TestWriteFileKeepsMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "summary.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, ".json", write("new")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || content(t, path) != "new" {
		t.Errorf("replaced: mode %v, %q; want 0600 and the new content", fi.Mode(), content(t, path))
	}
}
