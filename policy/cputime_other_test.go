//go:build !linux

package policy

import "time"

// threadCPU is unavailable here: the benchmark reports wall time only.
func threadCPU() (time.Duration, bool) { return 0, false }
