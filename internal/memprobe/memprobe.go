package memprobe

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Default is the memory Probe reports where no limit can be read (no
// /proc/meminfo): generous, so that a limit based on it refuses only the
// absurd.
const Default int64 = 64 << 30

// Available is the memory the process can still allocate: the least of
// the machine's available memory, the room left under the process's
// address-space limit and under its cgroup's memory limit.
type Available struct {
	// Bytes is the least of the limits.
	Bytes int64
	// Limit names the limit that sets Bytes, e.g. "MemAvailable in
	// /proc/meminfo".
	Limit string
}

// memorySources are where Probe reads its limits: the root of
// the file system holding /proc and /sys/fs/cgroup, and the address-space
// limit's reader. Tests point them at fake files.
type memorySources struct {
	root     string
	rlimitAS func() (uint64, error)
}

var sources = memorySources{root: "/", rlimitAS: addressSpaceLimit}

// Probe returns the memory the process can still allocate and
// the limit that sets it: MemAvailable of /proc/meminfo, the address-space
// limit (RLIMIT_AS, ulimit -v) less the process's VmSize, and the memory
// limit less the usage of the process's cgroup and each of its ancestors
// (cgroup v2 memory.max and memory.current, or v1 memory.limit_in_bytes
// and memory.usage_in_bytes). A process in a container sees the
// machine's MemAvailable but is killed at its cgroup's limit. Where none
// can be read it is Default.
func Probe() Available { return sources.available() }

func (s memorySources) available() Available {
	best := Available{Bytes: Default, Limit: "the default of " + FormatBytes(float64(Default)) + " (no limit could be read)"}
	found := false
	take := func(n int64, limit string) {
		if !found || n < best.Bytes {
			best, found = Available{Bytes: max(n, 0), Limit: limit}, true
		}
	}
	if kb, ok := s.field("proc/meminfo", "MemAvailable:"); ok {
		take(kb*1024, "MemAvailable in /proc/meminfo")
	}
	if as, err := s.rlimitAS(); err == nil && as < math.MaxInt64 /* RLIM_INFINITY is MaxUint64 or MaxInt64 */ {
		used, _ := s.field("proc/self/status", "VmSize:")
		take(int64(as)-used*1024, "ulimit -v (RLIMIT_AS) "+FormatBytes(float64(as))+" less the process's VmSize")
	}
	for _, c := range s.cgroupLimits() {
		take(c.Bytes, c.Limit)
	}
	return best
}

// field returns the number in kB after name in the file rel (below the
// root), as /proc/meminfo and /proc/self/status write them.
func (s memorySources) field(rel, name string) (int64, bool) {
	f, err := os.Open(filepath.Join(s.root, rel))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == name {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			return kb, err == nil && kb >= 0 && kb <= math.MaxInt64/1024
		}
	}
	return 0, false
}

// cgroupLimits returns the room left under the memory limit of the
// process's cgroup (from /proc/self/cgroup) and of each of its ancestors
// that has one. A cgroup whose directory is not there (a container sees
// its own cgroup as the root of /sys/fs/cgroup) is skipped.
func (s memorySources) cgroupLimits() []Available {
	b, err := os.ReadFile(filepath.Join(s.root, "proc/self/cgroup"))
	if err != nil {
		return nil
	}
	var out []Available
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir, limitFile, usageFile := "sys/fs/cgroup", "memory.max", "memory.current" // v2: "0::/path"
		if parts[0] != "0" || parts[1] != "" {
			if !slices.Contains(strings.Split(parts[1], ","), "memory") {
				continue
			}
			dir, limitFile, usageFile = "sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
		}
		for p := path.Clean("/" + parts[2]); ; p = path.Dir(p) {
			d := filepath.Join(s.root, dir, p)
			limit, lerr := readInt(filepath.Join(d, limitFile))
			usage, uerr := readInt(filepath.Join(d, usageFile))
			if lerr == nil && uerr == nil {
				out = append(out, Available{Bytes: limit - usage,
					Limit: fmt.Sprintf("cgroup %s %s %s less %s, in /%s", p, limitFile, FormatBytes(float64(limit)), usageFile, filepath.Join(dir, p))})
			}
			if p == "/" {
				break
			}
		}
	}
	return out
}

// readInt reads a file holding one integer, as cgroup files do; "max"
// (no limit) is an error.
func readInt(name string) (int64, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// FormatBytes writes n bytes with a binary unit, e.g. "1.5 GiB".
func FormatBytes(n float64) string {
	const units = "KMGTPEZY"
	if n < 1024 {
		return fmt.Sprintf("%.0f B", n)
	}
	i := -1
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", n, units[i])
}
