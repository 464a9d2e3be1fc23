// Package mmapfile maps a whole file read-only into memory, the way both
// model file formats (GGUF, safetensors) hand out tensor bytes without a
// copy.
package mmapfile

import (
	"fmt"
	"os"
	"syscall"
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

// Release drops this process's resident pages of a mapping from Map
// (madvise MADV_DONTNEED) without unmapping it: a later read faults the
// page back in from the page cache with the same contents. Loaders call
// it after copying what they need out of the file, so that the copied
// bytes are not counted twice in the process's resident set.
func Release(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if err := syscall.Madvise(data, syscall.MADV_DONTNEED); err != nil {
		return fmt.Errorf("madvise %d bytes: %w", len(data), err)
	}
	return nil
}
