//go:build !unix

package kernels

import "time"

// processCPUTime is unavailable here; CPU-time metrics are then skipped.
func processCPUTime() time.Duration { return 0 }
