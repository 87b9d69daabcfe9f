package memprobe

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRoot writes files (path below the root: content) into a fresh
// directory and returns it.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestProbeLimits: the available memory is the least of
// MemAvailable, the address-space limit less VmSize and each cgroup's
// limit less its usage (v2 and v1, the process's cgroup and its
// ancestors), and it names the limit that applied.
func TestProbeLimits(t *testing.T) {
	const gib = 1 << 30
	meminfo := "MemTotal:       33554432 kB\nMemAvailable:   16777216 kB\n" // 16 GiB
	noLimit := func() (uint64, error) { return math.MaxUint64, nil }
	limitAS := func(n uint64) func() (uint64, error) { return func() (uint64, error) { return n, nil } }
	cases := []struct {
		name   string
		files  map[string]string
		as     func() (uint64, error)
		want   int64
		source []string
	}{
		{"meminfo only", map[string]string{"proc/meminfo": meminfo}, noLimit, 16 * gib, []string{"MemAvailable in /proc/meminfo"}},
		{"nothing readable", nil, func() (uint64, error) { return 0, errors.New("no") }, Default, []string{"no limit could be read"}},
		{"ulimit -v", map[string]string{"proc/meminfo": meminfo, "proc/self/status": "Name: qkv\nVmSize:  1048576 kB\n"}, limitAS(4 * gib),
			3 * gib, []string{"ulimit -v (RLIMIT_AS) 4.0 GiB less", "VmSize"}},
		{"ulimit -v above MemAvailable", map[string]string{"proc/meminfo": meminfo}, limitAS(64 * gib), 16 * gib, []string{"MemAvailable"}},
		{"cgroup v2", map[string]string{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": "0::/user.slice/job\n",
			"sys/fs/cgroup/user.slice/job/memory.max":     "max\n",
			"sys/fs/cgroup/user.slice/job/memory.current": "1000\n",
			"sys/fs/cgroup/user.slice/memory.max":         "2147483648\n",
			"sys/fs/cgroup/user.slice/memory.current":     "1073741824\n",
		}, noLimit, gib, []string{"cgroup /user.slice memory.max 2.0 GiB less memory.current, in /sys/fs/cgroup/user.slice"}},
		{"cgroup v1, the process's cgroup not mounted", map[string]string{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": "5:cpu:/\n4:memory:/docker/abc\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes": "268435456\n",
		}, noLimit, gib / 4, []string{"cgroup / memory.limit_in_bytes 512.0 MiB less memory.usage_in_bytes, in /sys/fs/cgroup/memory"}},
		{"cgroup v1 without a limit", map[string]string{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": "4:cpuacct,memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes": "268435456\n",
		}, noLimit, 16 * gib, []string{"MemAvailable"}},
	}
	for _, c := range cases {
		got := memorySources{root: fakeRoot(t, c.files), rlimitAS: c.as}.available()
		if got.Bytes != c.want {
			t.Errorf("%s: %d bytes (%s), want %d", c.name, got.Bytes, got.Limit, c.want)
		}
		for _, s := range c.source {
			if !strings.Contains(got.Limit, s) {
				t.Errorf("%s: limit %q does not say %q", c.name, got.Limit, s)
			}
		}
	}
}
