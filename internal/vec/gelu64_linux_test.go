package vec

import (
	"syscall"
	"testing"
	"unsafe"
)

// pageEnd returns n float64 ending where a page of an inaccessible one
// begins, so that reading or writing one element past them faults.
func pageEnd(t *testing.T, n int) []float64 {
	t.Helper()
	size := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[size:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	page := unsafe.Slice((*float64)(unsafe.Pointer(&mem[0])), size/8)
	return page[len(page)-n:]
}

// TestGELU64PageEnd: on each path, rows that end at an inaccessible page
// are read and written to their last element and no further: AVX-512's
// masked loads and stores of the last block do not fault (a fault in the
// assembly ends the test binary).
func TestGELU64PageEnd(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		for n := 1; n <= 17; n++ {
			x, dy, y := pageEnd(t, n), pageEnd(t, n), pageEnd(t, n)
			for i := range x {
				x[i], dy[i] = float64(i)-8, 1
			}
			GELU64(y, x)
			GELUGrad64(y, x, dy)
		}
	})
}
