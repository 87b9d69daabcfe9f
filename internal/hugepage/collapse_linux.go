//go:build linux

package hugepage

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

const (
	hugePage = 2 << 20
	// madvCollapse is MADV_COLLAPSE (Linux 6.1), which syscall lacks.
	madvCollapse = 25
)

// Collapse backs with huge pages each 2 MiB block of the process's private
// anonymous read-write memory (Go's heap arenas among it) of which at least
// three quarters is resident, and returns the bytes it moved. A block
// mostly unused (the runtime's reserve of an arena, pages it returned to
// the kernel) is left alone: it would grow the process by up to 2 MiB.
// Blocks the kernel refuses (an older kernel, transparent huge pages set
// to never, no huge page free) are left as they are; when no block moved,
// the error is the first refusal, for a caller that wants to say why.
func Collapse() (moved int64, err error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	vec := make([]byte, hugePage/os.Getpagesize()) // mincore's byte a page
	minResident := len(vec) * 3 / 4
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		lo, hi, ok := anonymous(sc.Text())
		if !ok {
			continue
		}
		for at := (lo + hugePage - 1) &^ (hugePage - 1); at+hugePage <= hi; at += hugePage {
			if resident(at, vec) < minResident {
				continue
			}
			if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, at, hugePage, madvCollapse); e != 0 {
				if err == nil {
					err = &os.SyscallError{Syscall: "madvise(MADV_COLLAPSE)", Err: e}
				}
				continue
			}
			moved += hugePage
		}
	}
	if moved > 0 {
		err = nil
	}
	return moved, err
}

// anonymous returns the range of a line of /proc/self/maps that is private,
// readable and writable memory backed by no file.
func anonymous(line string) (lo, hi uintptr, ok bool) {
	f := bytes.Fields([]byte(line))
	if len(f) < 5 || string(f[1]) != "rw-p" || len(f) > 5 && string(f[5]) != "[heap]" {
		return 0, 0, false
	}
	r := bytes.SplitN(f[0], []byte("-"), 2)
	if len(r) != 2 {
		return 0, 0, false
	}
	l, err1 := strconv.ParseUint(string(r[0]), 16, 64)
	h, err2 := strconv.ParseUint(string(r[1]), 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uintptr(l), uintptr(h), true
}

// resident counts the small pages of the huge page at at that are in
// memory (mincore).
func resident(at uintptr, vec []byte) int {
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, at, hugePage, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
