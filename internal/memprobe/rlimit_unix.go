//go:build unix

package memprobe

import "golang.org/x/sys/unix"

// addressSpaceLimit returns the process's soft address-space limit
// (RLIMIT_AS, ulimit -v); RLIM_INFINITY when there is none.
func addressSpaceLimit() (uint64, error) {
	var r unix.Rlimit
	err := unix.Getrlimit(unix.RLIMIT_AS, &r)
	return uint64(r.Cur), err
}
