// Package fsx is the file system that qkv's writers go through: the one
// writer of every output file (see WriteFiles), files that are synced
// before they count and replaced atomically, and a seam where tests inject
// crashes, I/O errors and full disks (see Fault).
package fsx

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
)

// FS is every file-system operation a writer makes. Writers go through
// Current, not through os directly, so that tests can stop a save after any
// single write, sync, close, rename or removal (a crash), or fail a write
// part way (a full disk), and check what survives.
type FS interface {
	MkdirAll(dir string) error
	MkdirTemp(dir, pattern string) (string, error)
	// Create creates path, which must not exist.
	Create(path string) (File, error)
	Rename(from, to string) error
	RemoveAll(path string) error
	// Link makes newname a hard link to the file oldname.
	Link(oldname, newname string) error
	// SyncDir makes the entries of dir (creations, renames) durable.
	SyncDir(dir string) error
}

// File is the part of *os.File a writer uses.
type File interface {
	io.Writer
	Sync() error
	Close() error
}

// OS is the real file system.
type OS struct{}

// Current is the file system writers use; tests replace it.
var Current FS = OS{}

// MkdirAll creates dir and its parents.
func (OS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

// Rename renames from to to, replacing to.
func (OS) Rename(from, to string) error { return os.Rename(from, to) }

// RemoveAll removes path and what it holds.
func (OS) RemoveAll(path string) error { return os.RemoveAll(path) }

// Link makes newname a hard link to oldname.
func (OS) Link(oldname, newname string) error { return os.Link(oldname, newname) }

// MkdirTemp creates a new directory in dir, readable like the files it
// will hold.
func (OS) MkdirTemp(dir, pattern string) (string, error) {
	name, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	// MkdirTemp makes it private; a checkpoint is as readable as its files.
	return name, os.Chmod(name, 0o755)
}

// Create creates path, failing if it exists.
func (OS) Create(path string) (File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
}

// SyncDir syncs the directory dir.
func (OS) SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be synced there
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// WriteSynced creates path, which must not exist, fills it by write and
// syncs and closes it, checking each step. On error it tries to remove what
// it created.
func WriteSynced(path string, write func(io.Writer) error) error {
	f, err := createFile(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.discard()
		return err
	}
	if err := f.finish(); err != nil {
		f.discard()
		return err
	}
	return nil
}

// file is a file being written through a buffer, which keeps the first
// failing write: later writes do nothing and finish returns it, so that a
// writer that ignores write errors (runtime/pprof does) cannot make a
// partial file count as written.
type file struct {
	path   string
	f      File
	bw     *bufio.Writer
	err    error
	closed bool
}

// createFile creates path, which must not exist.
func createFile(path string) (*file, error) {
	f, err := Current.Create(path)
	if err != nil {
		return nil, err
	}
	return &file{path: path, f: f, bw: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (f *file) Write(b []byte) (int, error) { return f.bw.Write(b) }

// finish flushes, syncs and closes the file and returns the first error of
// any write or of these.
func (f *file) finish() error {
	if f.closed {
		return f.err
	}
	f.closed = true
	f.err = f.bw.Flush()
	if f.err == nil {
		f.err = f.f.Sync()
	}
	if err := f.f.Close(); f.err == nil {
		f.err = err
	}
	return f.err
}

// discard closes the file, if open, and removes it.
func (f *file) discard() {
	if !f.closed {
		f.closed = true
		f.f.Close()
	}
	Current.RemoveAll(f.path)
}

// tempCount numbers the temporary files of this process.
var tempCount atomic.Uint64

// TempName returns a fresh hidden name for a temporary copy of name,
// unique across processes and calls.
func TempName(name string) string {
	return fmt.Sprintf(".%s.tmp-%d-%d", name, os.Getpid(), tempCount.Add(1))
}

// IsTemp reports whether entry is a name TempName gave for name.
func IsTemp(entry, name string) bool { return strings.HasPrefix(entry, "."+name+".tmp-") }

// RemoveTemps removes the temporary copies of names that writers killed
// part way left in dir.
func RemoveTemps(dir string, names ...string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		for _, name := range names {
			if IsTemp(e.Name(), name) {
				Current.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
}
