//go:build !linux

package hugemem

// alloc falls back to the Go heap where huge pages are not offered.
func alloc(n int) (*Region, error) { return &Region{b: make([]byte, n)}, nil }

func unmap([]byte) error { return nil }
