package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/fsx"
)

// withFS makes saves use f until the test ends.
func withFS(t *testing.T, f fsx.FS) {
	t.Helper()
	fsx.Current = f
	t.Cleanup(func() { fsx.Current = fsx.OS{} })
}

// nextCheckpoint returns a checkpoint at step whose every tensor and JSON
// value differs from prev's.
func nextCheckpoint(t *testing.T, prev *Checkpoint, step int) *Checkpoint {
	t.Helper()
	next := &Checkpoint{
		Step:   step,
		Config: json.RawMessage(`{"model": {"dim": 4}, "task": "copy"}`),
		State:  json.RawMessage(fmt.Sprintf(`{"step":%d,"rng":[4,5,6]}`, step)),
	}
	for _, ts := range []struct{ from, to *[]NamedTensor }{{&prev.Weights, &next.Weights}, {&prev.Optimizer, &next.Optimizer}} {
		for _, w := range *ts.from {
			w.Data = slices.Clone(w.Data)
			for i := range w.Data {
				w.Data[i] += float64(step)
				if w.DType == tensor.Float32 {
					w.Data[i] = float64(float32(w.Data[i]))
				}
			}
			*ts.to = append(*ts.to, w)
		}
	}
	return next
}

// isStep reports whether the checkpoint in dir loads as ck.
func isStep(t *testing.T, dir string, ck *Checkpoint) bool {
	t.Helper()
	got, err := Load(dir)
	if err != nil {
		t.Fatalf("no checkpoint loads: %v", err)
	}
	return got.Step == ck.Step && string(got.State) == string(ck.State) && equalTensors(got.Weights, ck.Weights) && equalTensors(got.Optimizer, ck.Optimizer)
}

// equalTensors reports whether got and want (in any order) are equal bit
// for bit.
func equalTensors(got, want []NamedTensor) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(g NamedTensor) bool { return g.Name == w.Name })
		if i < 0 || !slices.Equal(got[i].Shape, w.Shape) || got[i].DType != w.DType || !sameBits(got[i].Data, w.Data) {
			return false
		}
	}
	return true
}

// TestCheckpointCrashAtEveryOperation kills a save after each of its
// file-system operations in turn, and after a save that committed, and
// checks that the directory always holds one complete checkpoint: the
// previous one until the manifest's rename, the new one from then on.
func TestCheckpointCrashAtEveryOperation(t *testing.T) {
	for k := 0; ; k++ {
		dir, prev := saveTest(t, 10)
		next := nextCheckpoint(t, prev, 20)
		fault := fsx.NoFaults()
		fault.CrashAfter = k
		fsx.Current = fault
		err := Save(dir, next)
		fsx.Current = fsx.OS{}
		if !fault.Crashed {
			if err != nil {
				t.Fatalf("a save without faults failed: %v", err)
			}
			if k < 10 {
				t.Fatalf("a save took only %d operations: %q", k, fault.Ops)
			}
			t.Logf("a save is %d operations; each was interrupted in turn", k)
			return
		}
		commit := slices.IndexFunc(fault.Ops, func(op string) bool {
			return strings.HasPrefix(op, "rename ") && strings.HasSuffix(op, "/"+ManifestFile)
		})
		committed := commit >= 0 // the manifest's rename happened before the crash
		switch {
		case committed && !isStep(t, dir, next):
			t.Fatalf("crash after %d operations (%s): the committed checkpoint does not load", k, fault.Ops[k-1])
		case !committed && !isStep(t, dir, prev):
			t.Fatalf("crash after %d operations (%s): the previous checkpoint does not load", k, fault.Ops[max(k-1, 0)])
		}
		if !committed && err == nil {
			t.Fatalf("crash after %d operations: the save reported success before its commit", k)
		}
		// The next save, with a working disk, succeeds and leaves nothing
		// of the interrupted one.
		third := nextCheckpoint(t, prev, 30)
		if err := Save(dir, third); err != nil {
			t.Fatalf("crash after %d operations: the next save fails: %v", k, err)
		}
		noTemps(t, dir)
		if !isStep(t, dir, third) {
			t.Fatalf("crash after %d operations: the next save does not load", k)
		}
	}
}

// TestCheckpointDiskFull fills the disk after every number of bytes a save
// writes: the save fails naming the file, the previous checkpoint stays
// complete, nothing is left behind, and a save after space is freed works.
func TestCheckpointDiskFull(t *testing.T) {
	dir, prev := saveTest(t, 10)
	next := nextCheckpoint(t, prev, 20)
	files, err := encodeCheckpoint(dir, next)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len(newManifest(20, checkpointDirName(20, 0), files).encode()))
	for _, b := range files {
		total += int64(len(b))
	}
	// Every stride-th byte count, and the last byte.
	var counts []int64
	for n := int64(0); n < total-1; n += max(1, total/50) {
		counts = append(counts, n)
	}
	counts = append(counts, total-1)
	t.Logf("the disk fills after each of %d byte counts from 0 to %d of a %d-byte save", len(counts), total-1, total)
	for _, n := range counts {
		fault := fsx.NoFaults()
		fault.Space = n
		withFS(t, fault)
		err := Save(dir, next)
		fsx.Current = fsx.OS{}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("disk full after %d of %d bytes: err = %v, want ENOSPC", n, total, err)
		}
		if !strings.Contains(err.Error(), "checkpoint: "+dir+"/") {
			t.Errorf("disk full after %d bytes: error %q names no file", n, err)
		}
		noTemps(t, dir)
		if !isStep(t, dir, prev) {
			t.Fatalf("disk full after %d bytes: the previous checkpoint does not load", n)
		}
	}
	fault := fsx.NoFaults()
	fault.Space = total
	withFS(t, fault)
	if err := Save(dir, next); err != nil {
		t.Fatalf("a save with exactly enough space (%d bytes) fails: %v", total, err)
	}
	noTemps(t, dir)
	if !isStep(t, dir, next) {
		t.Fatal("the save after the disk was freed does not load")
	}
}

// TestCheckpointFailingOperations makes each operation of a save fail in
// turn, as an I/O error would, with the process alive to clean up: the
// previous checkpoint stays current, and no stray file is left unless the
// commit already happened.
func TestCheckpointFailingOperations(t *testing.T) {
	for k := 0; ; k++ {
		dir, prev := saveTest(t, 10)
		next := nextCheckpoint(t, prev, 20)
		fault := fsx.NoFaults()
		fault.FailAt = k
		fsx.Current = fault
		err := Save(dir, next)
		fsx.Current = fsx.OS{}
		if !fault.Failed {
			if err != nil {
				t.Fatalf("a save without faults failed: %v", err)
			}
			t.Logf("a save is %d operations; each failed in turn", k)
			return
		}
		if err == nil {
			// Failures after the commit (syncing the directory, removing the
			// old folder) may go unreported only if the new one is current.
			if !isStep(t, dir, next) {
				t.Fatalf("operation %d failed, the save reported success, but the new checkpoint is not current", k)
			}
			continue
		}
		if !strings.Contains(err.Error(), "checkpoint: "+dir) {
			t.Errorf("operation %d failed: error %q does not name the directory", k, err)
		}
		if !isStep(t, dir, prev) && !isStep(t, dir, next) {
			t.Fatalf("operation %d failed: neither checkpoint loads", k)
		}
	}
}

// TestLoadWhileSaving loads a run directory over and over while another
// goroutine saves checkpoint after checkpoint into it, as `qkv eval` may
// while `qkv train` runs: every load returns one complete checkpoint, never
// a mix of two or an error.
func TestLoadWhileSaving(t *testing.T) {
	dir, first := saveTest(t, 1)
	done := make(chan error, 1)
	go func() {
		for step := 2; step <= 30; step++ {
			if err := Save(dir, nextCheckpoint(t, first, step)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	loads := 0
	for finished := false; !finished; loads++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		got, err := Load(dir)
		if err != nil {
			t.Fatalf("load %d while saving: %v", loads, err)
		}
		want := first
		if got.Step != first.Step {
			want = nextCheckpoint(t, first, got.Step)
		}
		if string(got.State) != string(want.State) || !equalTensors(got.Weights, want.Weights) || !equalTensors(got.Optimizer, want.Optimizer) {
			t.Fatalf("load %d while saving: step %d mixes checkpoints", loads, got.Step)
		}
	}
	t.Logf("%d consistent loads during 29 saves", loads)
}
