package train

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gofrs/flock"
)

// LockFile is the file of a run directory that Run locks for as long as it
// trains there. The lock is the operating system's (flock), so it ends with
// the process however that ends, kill -9 included.
const LockFile = ".lock"

var (
	// ErrLocked is returned (wrapped) by Run when another process holds the
	// run directory's lock.
	ErrLocked = errors.New("run directory in use")
	// ErrRunExists is returned (wrapped) by Run when a fresh run would
	// start in a directory that holds an earlier run: a checkpoint, or the
	// metrics, summary or curves of a run that saved none.
	ErrRunExists = errors.New("run directory holds an earlier run")
)

// lockRun takes the lock of the run directory dir, which must exist, or
// fails at once if another process holds it.
func lockRun(dir string) (*flock.Flock, error) {
	l := flock.New(filepath.Join(dir, LockFile))
	ok, err := l.TryLock()
	if err != nil {
		return nil, fmt.Errorf("train: %s: %w", dir, err)
	}
	if !ok {
		return nil, fmt.Errorf("train: %s: %w: another process is training there (it holds %s)", dir, ErrLocked, LockFile)
	}
	return l, nil
}

// moveAside renames the run directory dir, whose lock the caller holds, to
// the first free name dir.old-N, and returns that name. Nothing is deleted.
func moveAside(dir string) (string, error) {
	clean := filepath.Clean(dir)
	for n := 1; ; n++ {
		to := fmt.Sprintf("%s.old-%d", clean, n)
		if _, err := os.Lstat(to); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("train: moving %s aside: %w", dir, err)
		}
		if err := os.Rename(clean, to); err != nil {
			return "", fmt.Errorf("train: moving %s aside: %w", dir, err)
		}
		return to, nil
	}
}
