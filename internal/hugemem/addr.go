package hugemem

import (
	"fmt"
	"unsafe"
)

// addr is the address of b's first byte (len(b) > 0).
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// alignOffset is how many bytes past address a the next PageSize boundary
// lies (0 when a is on one): a mapping only promises 4 KiB alignment, and
// a region starts this far into its mapping.
func alignOffset(a uintptr) int {
	if rem := a % PageSize; rem != 0 {
		return PageSize - int(rem)
	}
	return 0
}

// Float32s views the first n float32 of r (n·4 ≤ len(r.Bytes())).
func Float32s(r *Region, n int) ([]float32, error) { return view[float32](r, n, 4) }

// Uint16s views the first n uint16 of r (n·2 ≤ len(r.Bytes())).
func Uint16s(r *Region, n int) ([]uint16, error) { return view[uint16](r, n, 2) }

func view[T any](r *Region, n, size int) ([]T, error) {
	var b []byte
	if r != nil {
		b = r.Bytes()
	}
	if b == nil {
		return nil, ErrFreed
	}
	if n < 0 || n > len(b)/size {
		return nil, fmt.Errorf("hugemem: view of %d elements of %d bytes in a region of %d bytes", n, size, len(b))
	}
	if n == 0 {
		return []T{}, nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), nil
}
