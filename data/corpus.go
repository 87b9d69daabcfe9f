package data

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// DefaultCorpus is the text the chars task reads when no data is named:
// the Go standard library's net/http package, whose source every machine
// that builds qkv has (see ResolveCorpus for the go: form).
const DefaultCorpus = "go:net/http"

// MaxCorpusChars bounds a corpus, so that a character's position fits the
// ids' index arithmetic everywhere and a mistaken path (a disk image) is an
// error, not hours of reading: 2^32 characters, 8 GiB of ids.
const MaxCorpusChars = 1 << 32

// maxCorpusSymbols bounds the distinct characters of a corpus: ids are
// uint16, and the chars vocabulary adds its special tokens to them.
const maxCorpusSymbols = 1<<16 - 8

// readChunk is the buffer the files are read through: the text is never
// held whole, only its ids.
const readChunk = 1 << 20

// Corpus is a text read as characters: the files a data spec names, joined
// in sorted order. It holds one 2-byte id per character, never the text:
// ids number the distinct characters in the order they first occur, so the
// text can be read in one pass, and a task (chars) renumbers them into its
// vocabulary. A Corpus is immutable and safe for concurrent use.
type Corpus struct {
	// Spec is the data spec as given (DefaultCorpus for "").
	Spec string
	// Files are the files read, in the order they were joined.
	Files []string
	// SHA256 is the hex SHA-256 of the joined bytes: it tells whether a
	// resumed run reads the text it started on.
	SHA256 string
	// Bytes is the length of the joined text in bytes.
	Bytes int64
	// ids holds the characters as indices into symbols.
	ids []uint16
	// symbols are the distinct characters, in order of first occurrence;
	// first[i] is the position of symbols[i]'s first occurrence.
	symbols []rune
	first   []int
}

// Len returns the number of characters.
func (c *Corpus) Len() int { return len(c.ids) }

// ResolveCorpus returns the files spec names, in the order they are joined:
//
//   - "go:PKG" (DefaultCorpus is "go:net/http"): the non-test .go files of
//     the standard-library package PKG in the Go toolchain's GOROOT, as
//     `go env GOROOT` gives it (runtime.GOROOT() if there is no go
//     command), sorted by name;
//   - a file: that file;
//   - a directory: the regular files directly in it, sorted by name
//     (subdirectories are not read);
//   - otherwise a glob (filepath.Match syntax): the regular files it
//     matches, sorted.
//
// It fails, naming spec, when a path does not exist, or a directory or glob
// has no regular file.
func ResolveCorpus(spec string) ([]string, error) {
	if spec == "" {
		spec = DefaultCorpus
	}
	if pkg, ok := strings.CutPrefix(spec, "go:"); ok {
		return goPackageFiles(spec, pkg)
	}
	if info, err := os.Stat(spec); err == nil {
		if !info.IsDir() {
			return []string{spec}, nil
		}
		entries, err := os.ReadDir(spec)
		if err != nil {
			return nil, fmt.Errorf("data: corpus %s: %w", spec, err)
		}
		var files []string
		for _, e := range entries {
			if e.Type().IsRegular() {
				files = append(files, filepath.Join(spec, e.Name()))
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("data: corpus %s: the directory holds no regular file", spec)
		}
		return files, nil
	}
	if !strings.ContainsAny(spec, "*?[") {
		return nil, fmt.Errorf("data: corpus %s: no such file or directory (want a file, a directory, a glob or go:PACKAGE)", spec)
	}
	matches, err := filepath.Glob(spec)
	if err != nil {
		return nil, fmt.Errorf("data: corpus %s: %w", spec, err)
	}
	var files []string
	for _, m := range matches {
		if info, err := os.Stat(m); err == nil && info.Mode().IsRegular() {
			files = append(files, m)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("data: corpus %s: the glob matches no regular file", spec)
	}
	slices.Sort(files)
	return files, nil
}

// goPackageFiles returns the non-test .go files of the standard-library
// package pkg.
func goPackageFiles(spec, pkg string) ([]string, error) {
	if pkg == "" || filepath.IsAbs(pkg) || slices.Contains(strings.Split(pkg, "/"), "..") {
		return nil, fmt.Errorf("data: corpus %s: want go: followed by a standard-library package path such as net/http", spec)
	}
	root, err := goroot()
	if err != nil {
		return nil, fmt.Errorf("data: corpus %s: %w", spec, err)
	}
	dir := filepath.Join(root, "src", filepath.FromSlash(pkg))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data: corpus %s: %w", spec, err)
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if e.Type().IsRegular() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			files = append(files, filepath.Join(dir, name))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("data: corpus %s: %s holds no non-test .go file", spec, dir)
	}
	return files, nil
}

// goroot returns the GOROOT of the go command on PATH, the toolchain that
// builds qkv, and runtime.GOROOT() where there is none (a copied binary).
func goroot() (string, error) {
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		if root := strings.TrimSpace(string(out)); root != "" {
			return root, nil
		}
	}
	//lint:ignore SA1019 the fallback for a machine without the go command
	if root := runtime.GOROOT(); root != "" {
		return root, nil
	}
	return "", errors.New("no Go toolchain found (go env GOROOT failed and the binary records no GOROOT)")
}

// corpusCache keeps the corpora this process read, so that resolving a
// configuration again (the CLI validates it, then trains it) does not read
// the text again. An entry is reused only while every file keeps its size
// and modification time.
var corpusCache struct {
	sync.Mutex
	entries map[string]*cachedCorpus
}

type cachedCorpus struct {
	stamp  string
	corpus *Corpus
}

// LoadCorpus reads the corpus spec names (see ResolveCorpus). The text must
// be UTF-8 without NUL bytes (a NUL marks a binary file), non-empty, and
// within MaxCorpusChars characters of at most 65,528 distinct ones. It holds
// two bytes per character and reads the files through a 1 MiB buffer,
// so its memory is twice the text's length in characters.
func LoadCorpus(spec string) (*Corpus, error) {
	if spec == "" {
		spec = DefaultCorpus
	}
	files, err := ResolveCorpus(spec)
	if err != nil {
		return nil, err
	}
	stamp, err := stampOf(files)
	if err != nil {
		return nil, fmt.Errorf("data: corpus %s: %w", spec, err)
	}
	corpusCache.Lock()
	defer corpusCache.Unlock()
	if e, ok := corpusCache.entries[spec]; ok && e.stamp == stamp {
		return e.corpus, nil
	}
	c, err := readCorpus(spec, files)
	if err != nil {
		return nil, err
	}
	if corpusCache.entries == nil {
		corpusCache.entries = map[string]*cachedCorpus{}
	}
	corpusCache.entries[spec] = &cachedCorpus{stamp: stamp, corpus: c}
	return c, nil
}

// stampOf identifies the files' current contents cheaply: names, sizes and
// modification times.
func stampOf(files []string) (string, error) {
	var b strings.Builder
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%s\x00", f, info.Size(), info.ModTime().Format(time.RFC3339Nano))
	}
	return b.String(), nil
}

func readCorpus(spec string, files []string) (*Corpus, error) {
	c := &Corpus{Spec: spec, Files: files}
	// A character takes at least a byte: sized by the files, the ids never
	// grow by doubling, which would briefly hold three times their size.
	var size int64
	for _, name := range files {
		if info, err := os.Stat(name); err == nil {
			size += info.Size()
		}
	}
	c.ids = make([]uint16, 0, min(size, MaxCorpusChars))
	index := map[rune]uint16{}
	var ascii [utf8.RuneSelf]uint16
	hash := sha256.New()
	buf := make([]byte, readChunk+utf8.UTFMax)
	for _, name := range files {
		if err := c.readFile(name, buf, index, &ascii, hash); err != nil {
			if name == spec { // the error names it already
				return nil, fmt.Errorf("data: corpus %w", err)
			}
			return nil, fmt.Errorf("data: corpus %s: %w", spec, err)
		}
	}
	if len(c.ids) == 0 {
		return nil, fmt.Errorf("data: corpus %s: the text is empty (%s)", spec, count(len(files), "file"))
	}
	c.SHA256 = hex.EncodeToString(hash.Sum(nil))
	c.ids = slices.Clip(c.ids)
	return c, nil
}

// readFile appends the characters of the file name to c. index holds the
// ids of the characters seen so far, ascii the same for ASCII plus one (0:
// not seen yet), the lookup that keeps reading a gigabyte to seconds.
func (c *Corpus) readFile(name string, buf []byte, index map[rune]uint16, ascii *[utf8.RuneSelf]uint16, hash io.Writer) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	var offset int64 // of buf[0] in the file
	carry := 0       // bytes of an incomplete character kept from the last read
	for {
		n, err := io.ReadFull(f, buf[carry:carry+readChunk])
		end := carry + n
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return fmt.Errorf("%s: %w", name, err)
		}
		hash.Write(buf[carry:end])
		c.Bytes += int64(n)
		if len(c.ids)+end > MaxCorpusChars { // a character takes a byte at least
			return fmt.Errorf("%s: the corpus exceeds %d characters", name, MaxCorpusChars)
		}
		ids, i := c.ids, 0 // in locals, so that the loop keeps them in registers
		for i < end {
			if b := buf[i]; b < utf8.RuneSelf {
				// The common case, an ASCII character seen before, without
				// the map; NUL is never seen, a binary file refused below.
				if id := ascii[b]; id != 0 {
					ids = append(ids, id-1)
					i++
					continue
				}
				if b == 0 {
					return fmt.Errorf("%s: byte %d is NUL: a binary file, not text", name, offset+int64(i))
				}
			}
			r, size := rune(buf[i]), 1
			if r >= utf8.RuneSelf {
				if !eof && !utf8.FullRune(buf[i:end]) {
					break // the rest of this character comes with the next read
				}
				if r, size = utf8.DecodeRune(buf[i:end]); r == utf8.RuneError && size <= 1 {
					return fmt.Errorf("%s: byte %d is not valid UTF-8: the corpus must be UTF-8 text", name, offset+int64(i))
				}
			}
			id, ok := index[r]
			if !ok {
				if len(c.symbols) == maxCorpusSymbols {
					return fmt.Errorf("%s: more than %d distinct characters", name, maxCorpusSymbols)
				}
				id = uint16(len(c.symbols))
				index[r] = id
				if r < utf8.RuneSelf {
					ascii[r] = id + 1
				}
				c.symbols = append(c.symbols, r)
				c.first = append(c.first, len(ids))
			}
			ids = append(ids, id)
			i += size
		}
		c.ids = ids
		carry = copy(buf, buf[i:end])
		offset += int64(i)
		if eof {
			if carry > 0 { // unreachable: at EOF every byte is decoded above
				return fmt.Errorf("%s: byte %d: truncated UTF-8", name, offset)
			}
			return nil
		}
	}
}
