//go:build linux

package policy

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPU is the calling OS thread's CPU time (CLOCK_THREAD_CPUTIME_ID):
// on this shared machine wall time also counts other processes' turns.
// The caller locks its goroutine to the thread.
func threadCPU() (time.Duration, bool) {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano()), errno == 0
}
