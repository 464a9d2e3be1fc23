package server

import "sync"

// bound counts the engine requests in flight against a maximum.
type bound struct {
	max int
	mu  sync.Mutex
	n   int
}

// hold takes n places, or none when that would exceed the bound.
func (b *bound) hold(n int) (*hold, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n+n > b.max {
		return nil, false
	}
	b.n += n
	return &hold{b: b, freed: make([]bool, n)}, true
}

func (b *bound) inFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// hold is one HTTP request's places in a bound, one per choice. Each is
// freed once: when the engine is done with its choice, or when the handler
// returns, whichever comes first.
type hold struct {
	b     *bound
	freed []bool // under b.mu
}

// free frees choice i's place, if it still holds it. Flag and count change
// under one lock, so free never returns before the place is free, whoever
// freed it (a flag set first and counted later would let the answer's last
// event reach its client while its place still looked taken).
func (h *hold) free(i int) {
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if !h.freed[i] {
		h.freed[i] = true
		h.b.n--
	}
}

// freeAll frees every place still held.
func (h *hold) freeAll() {
	for i := range h.freed {
		h.free(i)
	}
}

// freeWhen frees choice i's place when ended closes; it gives up when
// stop closes (the handler returned and freed it).
func (h *hold) freeWhen(i int, ended, stop <-chan struct{}) {
	select {
	case <-ended:
		h.free(i)
	case <-stop:
	}
}
