//go:build unix

package kernels

import (
	"syscall"
	"time"
)

// processCPUTime is the user+system CPU time of this process so far. On a
// shared machine it counts only the time our threads actually ran, so
// work/CPU-time is a per-core speed that other tenants do not dilute.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
