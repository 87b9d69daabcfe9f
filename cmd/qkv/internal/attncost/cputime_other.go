//go:build !unix

package attncost

import "time"

// cpuTime is 0 where getrusage is not there: Result's CPU times are then 0
// and only the wall times measure.
func cpuTime() time.Duration { return 0 }
