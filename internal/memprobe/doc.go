// Package memprobe reads how much memory the process can still allocate:
// MemAvailable of /proc/meminfo, the address-space limit (ulimit -v) less
// the process's VmSize, and each enclosing cgroup's memory limit less its
// usage (v1 and v2), the least of them (Probe). config.MemoryLimit checks
// a model's memory estimate against it unless --max-memory (or
// config.SetMemoryLimit) sets a limit; the command line prints it.
package memprobe
