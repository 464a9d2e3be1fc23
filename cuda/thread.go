package cuda

import (
	"errors"
	"runtime"
	"sync"
)

// ErrClosed is returned by calls on a closed Thread or Device.
var ErrClosed = errors.New("cuda: closed")

// Thread runs functions one at a time on a single goroutine locked to its OS
// thread. The CUDA driver keeps the current context per OS thread, so every call
// that touches a context goes through one Thread.
type Thread struct {
	mu     sync.Mutex // serialises Do; guards closed
	closed bool
	req    chan func() error
	resp   chan error
	done   chan struct{}
}

// StartThread starts the locked goroutine.
func StartThread() *Thread {
	t := &Thread{
		req:  make(chan func() error),
		resp: make(chan error),
		done: make(chan struct{}),
	}
	go t.loop()
	return t
}

func (t *Thread) loop() {
	// Never unlocked: the thread carries CUDA state and exits with the goroutine.
	runtime.LockOSThread()
	defer close(t.done)
	for f := range t.req {
		t.resp <- f()
	}
}

// Do runs f on the locked thread and returns its error. Calls from many
// goroutines are serialised. After Close it returns ErrClosed without running f.
// f must not call Do itself (that would wait for itself forever).
func (t *Thread) Do(f func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	t.req <- f
	return <-t.resp
}

// Close stops the goroutine after any call in progress; it is idempotent.
func (t *Thread) Close() {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		close(t.req)
	}
	t.mu.Unlock()
	<-t.done
}
