//go:build linux

package hugemem

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// alloc maps n bytes rounded up to whole huge pages, plus one huge page of
// slack so that the region can start on a 2 MiB boundary (mmap only
// promises 4 KiB), and advises the aligned part for huge pages.
func alloc(n int) (*Region, error) {
	size := (n + PageSize - 1) &^ (PageSize - 1)
	full, err := unix.Mmap(-1, 0, size+PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("hugemem: map %d bytes: %w", size+PageSize, err)
	}
	off := alignOffset(addr(full))
	aligned := full[off : off+size : off+size]
	r := &Region{b: aligned[:n:n], full: full}
	// EINVAL: this kernel has no transparent huge pages; base pages work.
	if err := unix.Madvise(aligned, unix.MADV_HUGEPAGE); err != nil && !errors.Is(err, unix.EINVAL) {
		_ = unix.Munmap(full)
		return nil, fmt.Errorf("hugemem: advise %d bytes: %w", size, err)
	}
	return r, nil
}

func unmap(b []byte) error { return unix.Munmap(b) }
