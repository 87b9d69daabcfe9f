package fsx

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrCrash is what every file-system operation returns from the moment a
// Fault "crashes".
var ErrCrash = errors.New("injected crash")

// ErrIO is the error of an operation a Fault fails on its own.
var ErrIO = errors.New("injected I/O error")

// Fault is the real file system with faults injected, for tests. With
// CrashAfter = k it performs the first k operations (each create, write,
// sync, close, rename, link, removal, directory sync) and then behaves as
// if the process had been killed: every later operation fails and changes
// nothing, including the writer's own clean-up. With FailAt = k operation k alone
// fails (an I/O error the process lives through). With Space = n, writes
// fail with ENOSPC once n bytes are written, after writing what fits.
type Fault struct {
	CrashAfter, FailAt int   // -1: never
	Space              int64 // -1: unlimited
	// Ops are the operations performed, in order.
	Ops             []string
	Crashed, Failed bool
}

// NoFaults returns a Fault with every fault off.
func NoFaults() *Fault { return &Fault{CrashAfter: -1, FailAt: -1, Space: -1} }

func (f *Fault) op(format string, args ...any) error {
	switch n := len(f.Ops); {
	case f.Crashed || (f.CrashAfter >= 0 && n >= f.CrashAfter):
		f.Crashed = true
		return ErrCrash
	case n == f.FailAt && !f.Failed:
		f.Failed = true
		return ErrIO
	}
	f.Ops = append(f.Ops, fmt.Sprintf(format, args...))
	return nil
}

// MkdirAll is OS.MkdirAll, unless a fault strikes.
func (f *Fault) MkdirAll(dir string) error {
	if err := f.op("mkdir %s", dir); err != nil {
		return err
	}
	return OS{}.MkdirAll(dir)
}

// MkdirTemp is OS.MkdirTemp, unless a fault strikes.
func (f *Fault) MkdirTemp(dir, pattern string) (string, error) {
	if err := f.op("mkdirtemp %s", dir); err != nil {
		return "", err
	}
	return OS{}.MkdirTemp(dir, pattern)
}

// Create is OS.Create, unless a fault strikes; the file's writes, syncs
// and closes are operations too.
func (f *Fault) Create(path string) (File, error) {
	if err := f.op("create %s", path); err != nil {
		return nil, err
	}
	file, err := OS{}.Create(path)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, file: file.(*os.File)}, nil
}

// Rename is OS.Rename, unless a fault strikes.
func (f *Fault) Rename(from, to string) error {
	if err := f.op("rename %s %s", from, to); err != nil {
		return err
	}
	return OS{}.Rename(from, to)
}

// RemoveAll is OS.RemoveAll, unless a fault strikes.
func (f *Fault) RemoveAll(path string) error {
	if err := f.op("remove %s", path); err != nil {
		return err
	}
	return OS{}.RemoveAll(path)
}

// Link is OS.Link, unless a fault strikes.
func (f *Fault) Link(oldname, newname string) error {
	if err := f.op("link %s %s", oldname, newname); err != nil {
		return err
	}
	return OS{}.Link(oldname, newname)
}

// SyncDir is OS.SyncDir, unless a fault strikes.
func (f *Fault) SyncDir(dir string) error {
	if err := f.op("syncdir %s", dir); err != nil {
		return err
	}
	return OS{}.SyncDir(dir)
}

type faultFile struct {
	fs   *Fault
	file *os.File
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.op("write %s %d", f.file.Name(), len(p)); err != nil {
		return 0, err
	}
	if f.fs.Space >= 0 && int64(len(p)) > f.fs.Space {
		n, _ := f.file.Write(p[:f.fs.Space])
		f.fs.Space = 0
		return n, &os.PathError{Op: "write", Path: f.file.Name(), Err: syscall.ENOSPC}
	}
	if f.fs.Space >= 0 {
		f.fs.Space -= int64(len(p))
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
