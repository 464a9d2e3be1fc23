// Package mmapfile maps a whole file read-only into memory (MAP_SHARED:
// the processes of a host share its pages), the way both model file
// formats (GGUF, safetensors) hand out tensor bytes without a copy.
// Release drops the resident pages of a part of the mapping once a loader
// has copied what it needs.
package mmapfile

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// TooSmallError reports a file shorter than the format's smallest header.
type TooSmallError struct {
	Path      string
	Size, Min int64
}

func (e *TooSmallError) Error() string {
	return fmt.Sprintf("%s is %d bytes (at least %d expected)", e.Path, e.Size, e.Min)
}

// Map maps the file at path read-only (MAP_SHARED: pages come from the page
// cache and are shared by every process mapping the file). A file shorter
// than minSize bytes is a *TooSmallError. The caller owns the mapping and
// releases it with Unmap; the file descriptor is closed before Map returns.
func Map(path string, minSize int64) ([]byte, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < minSize {
		return nil, &TooSmallError{Path: path, Size: size, Min: minSize}
	}
	if size != int64(int(size)) {
		return nil, fmt.Errorf("%s: size %d does not fit in memory", path, size)
	}
	if size == 0 { // mmap refuses empty mappings
		return []byte{}, nil
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return data, nil
}

// Unmap releases a mapping from Map.
func Unmap(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	return syscall.Munmap(data)
}

// Release drops this process's resident pages of b, a part of mapping (a
// mapping from Map), with madvise(MADV_DONTNEED), without unmapping them:
// a later read faults a page back in from the page cache with the same
// contents. Only the whole pages of b that lie inside mapping are dropped
// (none of b outside it, none shared with the bytes around b), so b may be
// any slice. Loaders call it once they have copied b out of the file, so
// that the copy is not counted twice in the process's resident set.
func Release(mapping, b []byte) error {
	if len(mapping) == 0 || len(b) == 0 {
		return nil
	}
	base := uintptr(unsafe.Pointer(&mapping[0]))
	lo, hi := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b))
	lo, hi = max(lo, base), min(hi, base+uintptr(len(mapping)))
	page := uintptr(os.Getpagesize())
	lo, hi = (lo+page-1)&^(page-1), hi&^(page-1)
	if lo >= hi {
		return nil
	}
	if err := syscall.Madvise(mapping[lo-base:hi-base], syscall.MADV_DONTNEED); err != nil {
		return fmt.Errorf("madvise %d bytes: %w", hi-lo, err)
	}
	return nil
}
