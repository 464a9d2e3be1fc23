// Package hugemem allocates the large, long-lived buffers of the CPU runner
// (model weights, the KV cache) outside the Go heap, in anonymous memory
// 2 MiB aligned and advised for transparent huge pages. model.LoadLlama
// copies the weights a step streams there unless model.LlamaOptions.Mmap
// keeps them in the file mapping.
//
// Why: a decode step streams every weight once and attention reads KV
// blocks scattered over the cache. With 4 KiB pages each step misses the
// TLB tens of thousands of times, and on a virtual machine every miss is a
// two-level page walk. Measured on the 110M model (BF16 weights, 2 cores,
// one sequence), weights read through the GGUF file mapping decoded at
// ~250 tok/s, copied to the Go heap at ~380 and to 2 MiB pages at ~430.
package hugemem

import (
	"errors"
	"fmt"
	"sync"
)

// PageSize is the huge page size the regions are aligned and sized to.
const PageSize = 2 << 20

// Region is n bytes of zeroed memory outside the Go heap: the garbage
// collector never scans or moves it, and C may keep pointers into it.
// It is valid until Free; the owner must call Free exactly once (later
// calls do nothing).
type Region struct {
	// mu orders Free against a cleanup's Free on another goroutine (the
	// owners register one in case they are dropped without Close).
	mu   sync.Mutex
	b    []byte // the caller's n bytes
	full []byte // the whole mapping, for Free; nil on the heap fallback
}

// Alloc returns a region of n bytes (n > 0). Where the OS offers
// transparent huge pages the region is 2 MiB aligned and advised for them;
// when the advice is refused (huge pages disabled) the region still works
// with base pages.
func Alloc(n int) (*Region, error) {
	if n <= 0 {
		return nil, fmt.Errorf("hugemem: Alloc(%d): want a positive size", n)
	}
	if n > maxBytes {
		return nil, fmt.Errorf("hugemem: Alloc(%d): larger than %d bytes", n, maxBytes)
	}
	return alloc(n)
}

// maxBytes bounds one region (1 TiB): sizes past it are a caller's error,
// not a request to make of the OS.
const maxBytes = 1 << 40

// Bytes returns the region's n bytes; nil after Free.
func (r *Region) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b
}

// Free returns the region to the OS. Slices of it must not be used after.
func (r *Region) Free() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.b == nil {
		return nil
	}
	r.b = nil
	full := r.full
	r.full = nil
	if full == nil {
		return nil
	}
	if err := unmap(full); err != nil {
		return fmt.Errorf("hugemem: free %d bytes: %w", len(full), err)
	}
	return nil
}

// ErrFreed is returned by views of a freed region.
var ErrFreed = errors.New("hugemem: region freed")
