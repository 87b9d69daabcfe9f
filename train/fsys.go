package train

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
)

// fileSystem is every file-system operation a checkpoint save makes. The
// save goes through it, not through os directly, so that tests can stop a
// save after any single write, sync, close, rename or removal (a crash), or
// fail a write part way (a full disk), and check that the last complete
// checkpoint survives each.
type fileSystem interface {
	MkdirAll(dir string) error
	MkdirTemp(dir, pattern string) (string, error)
	// Create creates path, which must not exist.
	Create(path string) (writableFile, error)
	Rename(from, to string) error
	RemoveAll(path string) error
	// SyncDir makes the entries of dir (creations, renames) durable.
	SyncDir(dir string) error
}

// writableFile is the part of *os.File a save uses.
type writableFile interface {
	io.Writer
	Sync() error
	Close() error
}

// osFS is the real file system.
type osFS struct{}

func (osFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }
func (osFS) MkdirTemp(dir, pattern string) (string, error) {
	name, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	// MkdirTemp makes it private; a checkpoint is as readable as its files.
	return name, os.Chmod(name, 0o755)
}
func (osFS) Rename(from, to string) error { return os.Rename(from, to) }
func (osFS) RemoveAll(path string) error  { return os.RemoveAll(path) }

func (osFS) Create(path string) (writableFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
}

func (osFS) SyncDir(dir string) error {
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

// fsys is the file system saves use; tests replace it.
var fsys fileSystem = osFS{}

// writeSynced creates path, fills it by write and syncs and closes it. On
// error it tries to remove what it created.
func writeSynced(path string, write func(io.Writer) error) (err error) {
	f, err := fsys.Create(path)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			fsys.RemoveAll(path)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	closed = true
	return f.Close()
}

// writeFileAtomic replaces dir/name as one step: the content goes to a
// synced temporary file that is renamed over name, and dir is synced. A
// crash at any point leaves either the old file or the new one, never a
// part of either.
func writeFileAtomic(dir, name string, write func(io.Writer) error) error {
	tmp := filepath.Join(dir, tempName(name))
	if err := writeSynced(tmp, write); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, filepath.Join(dir, name)); err != nil {
		fsys.RemoveAll(tmp)
		return err
	}
	return fsys.SyncDir(dir)
}

// tempCount numbers the temporary files of this process.
var tempCount atomic.Uint64

// tempName returns a fresh hidden name for a temporary copy of name, unique
// across processes and calls; the next save removes stale ones.
func tempName(name string) string {
	return fmt.Sprintf(".%s.tmp-%d-%d", name, os.Getpid(), tempCount.Add(1))
}
