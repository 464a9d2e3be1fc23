package adp

import (
	"fmt"
	"sync"
	"time"
)

// watchdog bounds one iteration (Config.Watchdog): the loop records what it
// is doing (enter), and past the bound OnStuck is called once, naming the
// process, its ranks, the iteration and what it was doing. A rank that
// waits in a collective for a peer that never comes hangs rather than
// slows down; the watchdog turns that into a named failure.
type watchdog struct {
	limit   time.Duration // 0: off
	onStuck func(msg string)
	who     string // "process p of n (ranks a to b)"

	mu    sync.Mutex // guards phase and start (the timer's goroutine reads them)
	phase string
	start time.Time
}

// enter records what the loop is doing now.
func (w *watchdog) enter(phase string) {
	if w.limit <= 0 {
		return
	}
	w.mu.Lock()
	w.phase = phase
	w.mu.Unlock()
}

// watch starts the watchdog of iteration it unless idle (an iteration that
// starts with the deployment idle is not bounded: its gather waits,
// legitimately, for process 0 to get work). The returned func stops it
// and, should the watchdog be firing, waits for OnStuck to return, so no
// OnStuck runs once the iteration has returned.
func (w *watchdog) watch(idle bool, it uint64) func() {
	if w.limit <= 0 || idle {
		return func() {}
	}
	w.mu.Lock()
	w.start, w.phase = time.Now(), "the start of its iteration"
	w.mu.Unlock()
	var (
		mu      sync.Mutex
		stopped bool
		fired   bool
	)
	done := make(chan struct{})
	t := time.AfterFunc(w.limit, func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		fired = true
		mu.Unlock()
		defer close(done)
		w.mu.Lock()
		phase, since := w.phase, time.Since(w.start)
		w.mu.Unlock()
		w.onStuck(fmt.Sprintf("adp: watchdog: %s stuck %v in iteration %d, in %s", w.who, since.Round(time.Millisecond), it, phase))
	})
	return func() {
		t.Stop()
		mu.Lock()
		stopped = true
		f := fired
		mu.Unlock()
		if f {
			<-done
		}
	}
}
