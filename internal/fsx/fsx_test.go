package fsx

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func write(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestWriteFile: the new content replaces the old whole, or, when a
// fault strikes at any operation, the old content stays and (unless the
// process "crashed") nothing else is left behind.
func TestWriteFile(t *testing.T) {
	for k := 0; ; k++ {
		dir := t.TempDir()
		if err := WriteFile(filepath.Join(dir, "f"), "", write("old")); err != nil {
			t.Fatal(err)
		}
		fault := NoFaults()
		fault.FailAt = k
		Current = fault
		err := WriteFile(filepath.Join(dir, "f"), "", write("new"))
		Current = OS{}
		got, rerr := os.ReadFile(filepath.Join(dir, "f"))
		if rerr != nil {
			t.Fatal(rerr)
		}
		if !fault.Failed {
			if err != nil || string(got) != "new" {
				t.Fatalf("without faults: %q, %v", got, err)
			}
			if k < 5 {
				t.Fatalf("a write took only %d operations: %q", k, fault.Ops)
			}
			return
		}
		renamed := slices.ContainsFunc(fault.Ops, func(op string) bool { return len(op) > 6 && op[:6] == "rename" })
		switch {
		case !renamed && (err == nil || string(got) != "old"):
			t.Errorf("operation %d failed before the rename: %q, %v; want the old content and an error", k, got, err)
		case renamed && string(got) != "new":
			t.Errorf("operation %d failed after the rename: %q, want the new content", k, got)
		}
		if n := names(t, dir); !slices.Equal(n, []string{"f"}) {
			t.Errorf("operation %d failed: %s holds %q", k, dir, n)
		}
	}
}

func TestFaultSpaceAndCrash(t *testing.T) {
	dir := t.TempDir()
	fault := NoFaults()
	fault.Space = 2
	Current = fault
	err := WriteFile(filepath.Join(dir, "f"), "", write("four"))
	Current = OS{}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a full disk: %v, want ENOSPC", err)
	}
	if n := names(t, dir); len(n) != 0 {
		t.Errorf("a failed write left %q", n)
	}

	crash := NoFaults()
	crash.CrashAfter = 2 // create and write happen; the sync "kills" it
	Current = crash
	err = WriteFile(filepath.Join(dir, "f"), "", write("data"))
	Current = OS{}
	if !errors.Is(err, ErrCrash) || !crash.Crashed || len(crash.Ops) != 2 {
		t.Fatalf("crash after 2 operations: %v, ops %q", err, crash.Ops)
	}
	n := names(t, dir)
	if len(n) != 1 || !IsTemp(n[0], "f") {
		t.Fatalf("a crash leaves its temporary file, as a killed process would: %q", n)
	}
	RemoveTemps(dir, "f")
	if n := names(t, dir); len(n) != 0 {
		t.Errorf("RemoveTemps left %q", n)
	}
}
