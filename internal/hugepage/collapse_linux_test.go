//go:build linux

package hugepage

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestAnonymous(t *testing.T) {
	for _, c := range []struct {
		line   string
		lo, hi uintptr
		ok     bool
	}{
		{"c000000000-c004000000 rw-p 00000000 00:00 0 ", 0xc000000000, 0xc004000000, true},
		{"01b3e000-01b5f000 rw-p 00000000 00:00 0                                  [heap]", 0x1b3e000, 0x1b5f000, true},
		{"7f0000000000-7f0000021000 rw-p 00000000 00:00 0", 0x7f0000000000, 0x7f0000021000, true},
		{"00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon", 0, 0, false},
		{"00651000-00652000 rw-p 00051000 08:02 173521      /usr/bin/dbus-daemon", 0, 0, false},
		{"7ffd5c9f1000-7ffd5ca12000 rw-p 00000000 00:00 0                          [stack]", 0, 0, false},
		{"7f0000000000-7f0000021000 rw-s 00000000 00:05 42  /dev/zero (deleted)", 0, 0, false},
		{"garbage", 0, 0, false},
	} {
		lo, hi, ok := anonymous(c.line)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("anonymous(%q) = %#x, %#x, %v, want %#x, %#x, %v", c.line, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

// TestCollapse moves a touched 16 MiB buffer onto huge pages, its contents
// unchanged, where the kernel can (Linux 6.1, transparent huge pages not
// set to never); where it refuses, Collapse's error says so and the test
// is skipped.
func TestCollapse(t *testing.T) {
	buf := make([]byte, 16<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	before := anonHuge(t)
	moved, err := Collapse()
	if err != nil {
		t.Skipf("the kernel backs nothing with huge pages here: %v", err)
	}
	// The kernel may find fewer free huge pages than the buffer's seven
	// whole blocks, but it refused none outright (err is nil): at least
	// one moved.
	if moved < 2<<20 {
		t.Errorf("Collapse moved %d bytes of a touched 16 MiB buffer, want at least one 2 MiB page", moved)
	}
	if after := anonHuge(t); after < before+2<<20 {
		t.Errorf("AnonHugePages %d -> %d bytes, want at least one 2 MiB page more", before, after)
	}
	for i := range buf {
		if buf[i] != byte(i*7) {
			t.Fatalf("byte %d is %d after Collapse, was %d", i, buf[i], byte(i*7))
		}
	}
}

// anonHuge is the process's anonymous memory on huge pages, in bytes, as
// /proc/self/smaps_rollup reports it.
func anonHuge(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		t.Skipf("no smaps_rollup: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "AnonHugePages:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("smaps_rollup has no AnonHugePages")
	return 0
}
