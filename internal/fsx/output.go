package fsx

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The writer of every file qkv outputs (plots, profiles, JSON, checkpoint
// files) follows one rule: nothing of the user's is touched that they did
// not name, and nothing they named is lost. So it
//
//   - writes only regular files: a path that exists as a device, FIFO,
//     socket or directory is refused, never replaced (as root, replacing
//     /dev/null with a PNG would break the machine);
//   - writes through a symbolic link to the regular file it names, leaving
//     the link in place: the user named the link to mean its file, as a
//     shell's > does, and replacing the link with a file would lose it. A
//     link that resolves to no file, or to anything but a regular file, is
//     refused;
//   - replaces a file atomically, keeping its permissions: a temporary
//     file next to it, synced, renamed over it, the directory synced;
//   - writes a multi-file output all or none (WriteFiles);
//   - checks every write, flush, sync, close and rename;
//   - refuses a name whose extension is not the format written.

// ErrRefused is wrapped by the error of a write refused for the name it was
// given, before anything is written: a path that exists and is not a
// regular file (nor a link to one), an extension other than the format
// written, or two files of one output naming the same file.
var ErrRefused = errors.New("output refused")

// ErrUnsynced is wrapped by the error of a write whose files are in place,
// renamed over their names, but whose directory could not be synced: the
// new files are current, and a crash may still undo the renames.
var ErrUnsynced = errors.New("written but not synced")

// refused is an error wrapping ErrRefused with its own message.
type refused string

func (e refused) Error() string              { return string(e) }
func (e refused) Is(target error) bool       { return target == ErrRefused }
func refusedf(format string, a ...any) error { return refused(fmt.Sprintf(format, a...)) }

// Output is one file of an output.
type Output struct {
	Path string // the name given; see WriteFiles for what it may be
	// Ext, if set, is the extension Path must end in (in any case), e.g.
	// ".png": the format Write writes. Empty for a file whose name qkv
	// chooses, or whose format has no extension of its own (a CPU profile).
	Ext string
	// Write writes the file's content; an error makes the output fail.
	Write func(io.Writer) error
}

// WriteFile writes one output file; see WriteFiles.
func WriteFile(path, ext string, write func(io.Writer) error) error {
	return WriteFiles(Output{Path: path, Ext: ext, Write: write})
}

// WriteFiles writes outs all or none. Every name is checked first (see
// CheckOutput) and every file is written to a synced temporary file; only
// then are they renamed over their names, and should a rename fail the
// files already renamed are put back as they were. On error no temporary
// file is left and every file that existed before holds its old content,
// unless the error wraps ErrUnsynced (all were renamed). A crash (of the
// process or the machine) leaves each file whole, old or new.
func WriteFiles(outs ...Output) (err error) {
	ps := make([]*Pending, 0, len(outs))
	defer func() {
		if err != nil {
			for _, p := range ps {
				p.Abort()
			}
		}
	}()
	for _, o := range outs {
		p, err := Create(o.Path, o.Ext)
		if err != nil {
			return err
		}
		for _, q := range ps {
			if q.target == p.target {
				p.Abort()
				return fmt.Errorf("%s: %w", p.path, refusedf("names the same file as %s: the files of an output must differ", q.path))
			}
		}
		ps = append(ps, p)
		if err := o.Write(p); err != nil {
			return fmt.Errorf("%s: %w", o.Path, err)
		}
	}
	return commit(ps)
}

// CheckOutput returns the error a write to path would be refused with (see
// ErrRefused), or nil: for a command to refuse a flag before it works
// towards the file. ext is as in Output.
func CheckOutput(path, ext string) error {
	if _, err := target(path, ext); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// target returns the file a write to path replaces or creates: path
// itself, or the regular file a symbolic link at path resolves to.
func target(path, ext string) (string, error) {
	if path == "" {
		return "", refusedf("no file name")
	}
	if base := filepath.Base(path); base == "." || base == ".." || strings.HasSuffix(path, string(filepath.Separator)) {
		return "", refusedf("no file name, only a directory")
	}
	if ext != "" && !strings.EqualFold(filepath.Ext(path), ext) {
		got := "no extension"
		if e := filepath.Ext(path); e != "" {
			got = "the extension " + e
		}
		return "", refusedf("has %s: the file written is %s, give a name ending in %s", got, strings.ToUpper(ext[1:]), ext)
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		dir := filepath.Dir(path)
		switch d, err := os.Stat(dir); {
		case errors.Is(err, fs.ErrNotExist):
			return "", refusedf("the directory %s does not exist", dir)
		case err != nil:
			return "", err
		case !d.IsDir():
			return "", refusedf("%s is not a directory", dir)
		}
		return path, nil
	}
	if err != nil {
		return "", err
	}
	to := path
	if fi.Mode()&fs.ModeSymlink != 0 {
		if to, err = filepath.EvalSymlinks(path); err != nil {
			return "", refusedf("is a symbolic link that resolves to no file (%v); qkv writes only through links to regular files", err)
		}
		if fi, err = os.Stat(to); err != nil {
			return "", err
		}
	}
	if !fi.Mode().IsRegular() {
		what := fileKind(fi.Mode())
		if to != path {
			what = "a symbolic link to " + to + ", which is " + what
		}
		return "", refusedf("is %s, not a regular file; qkv writes only regular files", what)
	}
	return to, nil
}

// fileKind names the kind of file of a mode that is not a regular file's.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "a special file (mode " + m.String() + ")"
}

// Pending is an output file being written, for content that is streamed
// (a CPU profile): a temporary file next to the file it will replace, which
// Commit puts in place and Abort removes. As for every output file, a
// failed write is kept and fails Commit, even if the writer ignored it.
type Pending struct {
	path   string // as named
	target string // the file replaced: path, or the file a link at path names
	tmp    *file
	done   bool // committed or aborted
}

// Create starts writing the output file path, refusing it as CheckOutput
// does. Its errors, and those of Commit and WriteFiles, begin with the path
// as named.
func Create(path, ext string) (*Pending, error) {
	to, err := target(path, ext)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := createFile(filepath.Join(filepath.Dir(to), TempName(filepath.Base(to))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Pending{path: path, target: to, tmp: tmp}, nil
}

// Write writes b to the temporary file.
func (p *Pending) Write(b []byte) (int, error) { return p.tmp.Write(b) }

// Commit syncs and closes the file, checking every step, and renames it
// over its name. On error the name keeps what it held.
func (p *Pending) Commit() error {
	err := commit([]*Pending{p})
	if err != nil {
		p.Abort() // nothing once renamed
	}
	return err
}

// Abort removes the temporary file, unless Commit put it in place. It may
// be deferred, and called more than once.
func (p *Pending) Abort() {
	if !p.done {
		p.done = true
		p.tmp.discard()
	}
}

// commit closes ps and renames them over their targets, all or none: before
// the renames each target that exists is hard-linked to a backup, which a
// failed rename puts back. A single file needs no backup, its rename being
// atomic; where hard links are not supported a target gets none, and
// should a later rename fail it keeps its new content.
func commit(ps []*Pending) error {
	for _, p := range ps {
		if err := p.tmp.finish(); err != nil {
			return fmt.Errorf("%s: %w", p.path, err)
		}
	}
	backups := make([]string, len(ps))
	existed := make([]bool, len(ps))
	defer func() {
		for _, b := range backups {
			if b != "" {
				Current.RemoveAll(b)
			}
		}
	}()
	for i, p := range ps {
		fi, err := os.Lstat(p.target)
		existed[i] = err == nil
		if existed[i] && !fi.Mode().IsRegular() { // it changed since Create
			return fmt.Errorf("%s: %w", p.path, refusedf("is now %s, not a regular file; qkv writes only regular files", fileKind(fi.Mode())))
		}
		if existed[i] { // a private file stays private
			if err := os.Chmod(p.tmp.path, fi.Mode().Perm()); err != nil {
				return fmt.Errorf("%s: %w", p.path, err)
			}
		}
		if existed[i] && len(ps) > 1 {
			b := filepath.Join(filepath.Dir(p.target), TempName(filepath.Base(p.target)))
			if Current.Link(p.target, b) == nil {
				backups[i] = b
			}
		}
	}
	for i, p := range ps {
		if err := Current.Rename(p.tmp.path, p.target); err != nil {
			for j := i - 1; j >= 0; j-- {
				switch {
				case backups[j] != "":
					// Kept if this fails: then the old content's only copy.
					Current.Rename(backups[j], ps[j].target)
					backups[j] = ""
				case !existed[j]:
					Current.RemoveAll(ps[j].target)
				}
			}
			return fmt.Errorf("%s: %w", p.path, err)
		}
		p.done = true
	}
	synced := map[string]bool{}
	for _, p := range ps {
		if dir := filepath.Dir(p.target); !synced[dir] {
			synced[dir] = true
			if err := Current.SyncDir(dir); err != nil {
				return fmt.Errorf("%s: %w: %w", p.path, ErrUnsynced, err)
			}
		}
	}
	return nil
}
