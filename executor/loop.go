package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/turnstile-llm/turnstile/overlap"
)

// StepSpender is implemented by runners that spend simulated time (sim.Runner
// with DeferSpend, sim.Recorder spending on a virtual clock): the engine
// calls SpendStep once per successful step, in step order, on its own
// goroutine when it processes the step's results and before it reads the
// clock to time-stamp them. Spending virtual time there, not from the
// device stream's goroutine inside Execute, makes time under overlap
// deterministic: a step's results carry the time its step ended whatever
// the goroutines' interleaving.
type StepSpender interface {
	SpendStep() error
}

// programPoll is how often an idle Run loop steps while the program policy
// holds turns or programs, so time-based decisions (leases, forced resumes,
// aging) take effect without a wake-up.
const programPoll = 100 * time.Millisecond

// Run is the step loop. It returns nil when ctx ends, after aborting every
// request left and releasing everything, or the runner's error (requests
// likewise aborted). The engine is closed afterwards.
func (e *Engine) Run(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			return e.Close()
		}
		progressed, err := e.Step()
		if err != nil {
			_ = e.Close()
			return err
		}
		if !progressed {
			e.streak = false
			// The program policy decides with time too (leases, forced
			// resumes, aging): while it holds turns or programs, look again
			// now and then, not only when woken.
			var poll *time.Timer
			var pollC <-chan time.Time
			if e.adm.polls(len(e.waiting)) {
				poll = time.NewTimer(programPoll)
				pollC = poll.C
			}
			select {
			case <-e.wake:
			case <-ctx.Done():
			case <-pollC:
			}
			if poll != nil {
				poll.Stop()
			}
		}
	}
}

// Step runs one iteration of the loop without blocking for work: take new
// submissions and aborts, plan and launch the next step, then process the
// steps that must complete (with overlap, all but the one just launched).
// It reports whether anything was launched or processed. Step must not be
// called concurrently with Run or itself.
func (e *Engine) Step() (bool, error) {
	e.drainQueues()
	e.adm.tick()
	if len(e.running) == 0 && len(e.waiting) == 0 && e.pipe.InFlight() == 0 {
		e.publish()
		return false, nil
	}
	progressed := false
	n := e.launched + 1
	st := &e.steps[n%overlap.MaxInFlight]
	st.reset(n)
	if err := e.plan(st); err != nil {
		e.abandonMasks(err)
		return false, err
	}
	e.planMasks(st)
	keep := 0
	if len(st.batch.Seqs) > 0 {
		st.out.Resize(len(st.batch.Seqs))
		if err := e.pipe.Launch(st); err != nil {
			e.abandonMasks(err)
			return false, err
		}
		e.launched = n
		progressed = true
		if e.cfg.Overlap {
			keep = 1
		}
	}
	for e.pipe.InFlight() > keep {
		d, err := e.pipe.Wait()
		if err == nil {
			err = e.process(d)
		}
		if err != nil {
			// No later step's masks will be filled: release its runner.
			e.abandonMasks(err)
			return false, err
		}
		progressed = true
	}
	e.publish()
	return progressed, nil
}

// Close stops the engine: refuses new submissions, aborts every request,
// waits for steps in flight and releases every seat and block. Idempotent.
// Like Step it is loop-owned: with Run active, cancel Run's context instead
// (Run closes the engine on its way out).
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.drainQueues()
	for len(e.waiting) > 0 {
		s := e.waiting[0]
		e.removeWaiting(s)
		e.end(s, FinishAbort)
	}
	for len(e.running) > 0 {
		e.leave(e.running[len(e.running)-1], FinishAbort)
	}
	e.adm.close()
	var first error
	for e.pipe.InFlight() > 0 {
		d, err := e.pipe.Wait()
		if err == nil {
			err = e.process(d)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	e.abandonMasks(errMasksAbandoned)
	e.pipe.Close()
	e.publish()
	return first
}

// drainQueues moves submissions into the waiting queue and applies aborts.
func (e *Engine) drainQueues() {
	e.mu.Lock()
	e.queued, e.submitQ = e.submitQ, e.queued[:0]
	e.aborts, e.abortQ = e.abortQ, e.aborts[:0]
	e.releases, e.releaseQ = e.releaseQ, e.releases[:0]
	closed := e.closed
	e.mu.Unlock()
	for i, s := range e.queued {
		e.m.Submitted++
		if closed {
			e.end(s, FinishAbort)
		} else {
			e.waiting = append(e.waiting, s)
		}
		e.queued[i] = nil
	}
	for i, s := range e.aborts {
		switch s.state {
		case StateWaiting:
			if e.removeWaiting(s) {
				e.end(s, FinishAbort)
			}
		case StateRunning:
			e.leave(s, FinishAbort)
		}
		e.aborts[i] = nil
	}
	for _, id := range e.releases {
		e.adm.release(id)
	}
}

// removeWaiting takes s out of the waiting queue; false if it was not there
// (still in the submit queue: it is aborted when that is drained).
func (e *Engine) removeWaiting(s *seq) bool {
	for i, w := range e.waiting {
		if w == s {
			copy(e.waiting[i:], e.waiting[i+1:])
			e.waiting[len(e.waiting)-1] = nil
			e.waiting = e.waiting[:len(e.waiting)-1]
			return true
		}
	}
	return false
}

// process handles a finished step: its time spent, teardown of what
// retired in it, the runner's timing, then its sampled tokens (deliver).
func (e *Engine) process(d overlap.Done[*stepRecord]) error {
	st := d.Job
	if d.Err != nil {
		return fmt.Errorf("executor: step %d: runner: %w", st.n, d.Err)
	}
	if e.spender != nil {
		if err := e.spender.SpendStep(); err != nil {
			return fmt.Errorf("executor: step %d: spending its time: %w", st.n, err)
		}
	}
	e.processed = st.n
	for _, r := range st.teardown {
		if err := e.seats.Release(r.seat); err != nil {
			return fmt.Errorf("executor: teardown of step %d: %w", st.n, err)
		}
		if r.hasKV {
			e.kv.Release(r.kv)
		}
		e.retiring--
	}
	st.teardown = st.teardown[:0]

	busy := d.End.Sub(d.Start)
	e.m.Steps++
	e.m.RunnerBusy += busy
	e.m.StepTime.Observe(busy)
	if e.streak {
		idle := max(d.Start.Sub(e.lastEnd), 0)
		e.m.RunnerIdle += idle
		e.m.StepIdle.Observe(idle)
	}
	e.lastEnd, e.streak = d.End, true

	if err := e.deliver(st, e.clock.Now()); err != nil {
		return err
	}
	// The next step's masks that waited for these tokens: its forward
	// pass runs meanwhile.
	e.fillPending(st.n)
	return nil
}

// publish copies the loop's metrics for Snapshot.
func (e *Engine) publish() {
	e.m.Running, e.m.Waiting, e.m.Retiring = len(e.running), len(e.waiting), e.retiring
	e.m.SeatsLive, e.m.SeatsRetiring = e.seats.Live(), e.seats.Retiring()
	e.m.KVBlocksUsed = e.kv.Referenced()
	e.m.KVBlocksCached = e.kv.CachedFree()
	e.adm.metrics(&e.m.Programs)
	if e.m.KVBlocksTotal > 0 {
		e.m.KVUsage = float64(e.m.KVBlocksUsed) / float64(e.m.KVBlocksTotal)
	}
	e.mu.Lock()
	e.pub = e.m
	e.mu.Unlock()
}

// Snapshot returns the metrics as of the last step boundary.
func (e *Engine) Snapshot() Metrics {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pub
}
