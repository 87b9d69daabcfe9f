//go:build !linux

package gemm

import "time"

// threadCPUTime reports that the system does not measure a thread's CPU
// time here: bestRate falls back to the wall time.
func threadCPUTime() (time.Duration, bool) { return 0, false }
