package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"gorgonia.org/tensor"
)

// errCrash is what every file-system operation returns from the moment a
// faultFS "crashes".
var errCrash = errors.New("injected crash")

// errIO is the error of an operation a faultFS fails on its own.
var errIO = errors.New("injected I/O error")

// faultFS is the real file system with faults injected into a save. With
// crashAfter = k it performs the first k operations (each create, write,
// sync, close, rename, removal, directory sync) and then behaves as if the
// process had been killed: every later operation fails and changes nothing,
// including the save's own clean-up. With failAt = k operation k alone fails
// (an I/O error the process lives through). With space = n, writes fail
// with ENOSPC once n bytes are written, after writing what fits.
type faultFS struct {
	crashAfter, failAt int   // -1: never
	space              int64 // -1: unlimited
	// ops are the operations performed, in order.
	ops             []string
	crashed, failed bool
}

// noFaults is a faultFS setting with every fault off.
func noFaults() *faultFS { return &faultFS{crashAfter: -1, failAt: -1, space: -1} }

func (f *faultFS) op(format string, args ...any) error {
	switch n := len(f.ops); {
	case f.crashed || (f.crashAfter >= 0 && n >= f.crashAfter):
		f.crashed = true
		return errCrash
	case n == f.failAt && !f.failed:
		f.failed = true
		return errIO
	}
	f.ops = append(f.ops, fmt.Sprintf(format, args...))
	return nil
}

func (f *faultFS) MkdirAll(dir string) error {
	if err := f.op("mkdir %s", dir); err != nil {
		return err
	}
	return osFS{}.MkdirAll(dir)
}

func (f *faultFS) MkdirTemp(dir, pattern string) (string, error) {
	if err := f.op("mkdirtemp %s", dir); err != nil {
		return "", err
	}
	return osFS{}.MkdirTemp(dir, pattern)
}

func (f *faultFS) Create(path string) (writableFile, error) {
	if err := f.op("create %s", path); err != nil {
		return nil, err
	}
	file, err := osFS{}.Create(path)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, file: file.(*os.File)}, nil
}

func (f *faultFS) Rename(from, to string) error {
	if err := f.op("rename %s %s", from, to); err != nil {
		return err
	}
	return osFS{}.Rename(from, to)
}

func (f *faultFS) RemoveAll(path string) error {
	if err := f.op("remove %s", path); err != nil {
		return err
	}
	return osFS{}.RemoveAll(path)
}

func (f *faultFS) SyncDir(dir string) error {
	if err := f.op("syncdir %s", dir); err != nil {
		return err
	}
	return osFS{}.SyncDir(dir)
}

type faultFile struct {
	fs   *faultFS
	file *os.File
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.op("write %s %d", f.file.Name(), len(p)); err != nil {
		return 0, err
	}
	if f.fs.space >= 0 && int64(len(p)) > f.fs.space {
		n, _ := f.file.Write(p[:f.fs.space])
		f.fs.space = 0
		return n, &os.PathError{Op: "write", Path: f.file.Name(), Err: syscall.ENOSPC}
	}
	if f.fs.space >= 0 {
		f.fs.space -= int64(len(p))
	}
	return f.file.Write(p)
}

func (f *faultFile) Sync() error {
	if err := f.fs.op("sync %s", f.file.Name()); err != nil {
		return err
	}
	return f.file.Sync()
}

func (f *faultFile) Close() error {
	err := f.fs.op("close %s", f.file.Name())
	cerr := f.file.Close() // a killed process's files are closed too
	if err != nil {
		return err
	}
	return cerr
}

// withFS makes saves use f until the test ends.
func withFS(t *testing.T, f fileSystem) {
	t.Helper()
	fsys = f
	t.Cleanup(func() { fsys = osFS{} })
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
	got, err := LoadCheckpoint(dir)
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
		fault := noFaults()
		fault.crashAfter = k
		fsys = fault
		err := SaveCheckpoint(dir, next)
		fsys = osFS{}
		if !fault.crashed {
			if err != nil {
				t.Fatalf("a save without faults failed: %v", err)
			}
			if k < 10 {
				t.Fatalf("a save took only %d operations: %q", k, fault.ops)
			}
			t.Logf("a save is %d operations; each was interrupted in turn", k)
			return
		}
		commit := slices.IndexFunc(fault.ops, func(op string) bool {
			return strings.HasPrefix(op, "rename ") && strings.HasSuffix(op, "/"+ManifestFile)
		})
		committed := commit >= 0 // the manifest's rename happened before the crash
		switch {
		case committed && !isStep(t, dir, next):
			t.Fatalf("crash after %d operations (%s): the committed checkpoint does not load", k, fault.ops[k-1])
		case !committed && !isStep(t, dir, prev):
			t.Fatalf("crash after %d operations (%s): the previous checkpoint does not load", k, fault.ops[max(k-1, 0)])
		}
		if !committed && err == nil {
			t.Fatalf("crash after %d operations: the save reported success before its commit", k)
		}
		// The next save, with a working disk, succeeds and leaves nothing
		// of the interrupted one.
		third := nextCheckpoint(t, prev, 30)
		if err := SaveCheckpoint(dir, third); err != nil {
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
		fault := noFaults()
		fault.space = n
		withFS(t, fault)
		err := SaveCheckpoint(dir, next)
		fsys = osFS{}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("disk full after %d of %d bytes: err = %v, want ENOSPC", n, total, err)
		}
		if !strings.Contains(err.Error(), "train: checkpoint "+dir+"/") {
			t.Errorf("disk full after %d bytes: error %q names no file", n, err)
		}
		noTemps(t, dir)
		if !isStep(t, dir, prev) {
			t.Fatalf("disk full after %d bytes: the previous checkpoint does not load", n)
		}
	}
	fault := noFaults()
	fault.space = total
	withFS(t, fault)
	if err := SaveCheckpoint(dir, next); err != nil {
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
		fault := noFaults()
		fault.failAt = k
		fsys = fault
		err := SaveCheckpoint(dir, next)
		fsys = osFS{}
		if !fault.failed {
			if err != nil {
				t.Fatalf("a save without faults failed: %v", err)
			}
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
		if !strings.Contains(err.Error(), "train: checkpoint "+dir) {
			t.Errorf("operation %d failed: error %q does not name the directory", k, err)
		}
		if !isStep(t, dir, prev) && !isStep(t, dir, next) {
			t.Fatalf("operation %d failed: neither checkpoint loads", k)
		}
	}
}
