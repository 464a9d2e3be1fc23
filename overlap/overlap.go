// Package overlap is the pipelining primitive of the step loop: a "device
// stream" that executes jobs strictly in launch order on one goroutine, so the
// host can plan and launch step n+1 while step n still runs, then wait for n.
//
// The protocol, as the executor uses it:
//
//	launch(n)            // step n starts on the stream
//	plan(n+1)            // its decode inputs for sequences sampled in n are
//	launch(n+1)          //   token futures (step.FutureToken), resolved by
//	wait(n); process(n)  //   the runner from its own per-seat rows
//
// Two consequences the executor builds on (see its package doc):
//
//   - Ordering: every job launched later runs after every job launched
//     earlier, so a resource (seat, KV block) that a job still in flight uses
//     may be handed to a job launched later: the stream orders the accesses.
//   - Retiring: a sequence whose last token comes out of step n (a stop token,
//     seen only when n is processed) may already be in step n+1. It is
//     retiring there: its n+1 output is discarded and its resources are
//     released at n+1's teardown (when n+1 is processed). A finish known in
//     advance (max tokens, context length) is never planned into n+1.
//
// Pipeline also has a synchronous mode (the plain loop, --no-overlap): Launch
// runs the job inline and Wait returns its result, so the caller's loop is
// the same in both modes. It measures, per job, when it started and ended on
// the stream, from which callers derive step time and the stream's idle time
// between jobs. Nothing here allocates per job.
package overlap

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// MaxInFlight is the most jobs launched and not yet waited for: the one
// running and the one launched behind it. Callers double-buffer their job
// storage accordingly.
const MaxInFlight = 2

// ErrClosed is returned by Launch after Close.
var ErrClosed = errors.New("overlap: pipeline closed")

// Done is the outcome of one job.
type Done[T any] struct {
	Job T
	// Err is what the executing function returned.
	Err error
	// Start and End are when the job began and finished executing on the
	// stream (read from the pipeline's time source).
	Start, End time.Time
}

// Pipeline executes jobs of type T in launch order. Launch, Wait, InFlight
// and Close must be called from one goroutine (the host loop).
type Pipeline[T any] struct {
	exec  func(T) error
	now   func() time.Time
	async bool

	// Asynchronous mode: the stream goroutine reads jobs and writes results.
	jobs    chan T
	results chan Done[T]
	wg      sync.WaitGroup
	started bool
	closed  bool

	// Synchronous mode: finished jobs not yet returned by Wait (a ring).
	ring     [MaxInFlight]Done[T]
	ringHead int

	inFlight int
}

// New returns a pipeline that runs exec on each launched job; now is its time
// source (an injected clock's Now). async false is the plain loop: exec runs
// inside Launch. The stream goroutine of an async pipeline starts at the
// first Launch and ends at Close.
func New[T any](exec func(T) error, now func() time.Time, async bool) (*Pipeline[T], error) {
	if exec == nil {
		return nil, errors.New("overlap: nil exec function")
	}
	if now == nil {
		return nil, errors.New("overlap: nil time source")
	}
	return &Pipeline[T]{exec: exec, now: now, async: async}, nil
}

// Async reports whether jobs run on a separate stream goroutine.
func (p *Pipeline[T]) Async() bool { return p.async }

// InFlight is the number of jobs launched and not yet returned by Wait.
func (p *Pipeline[T]) InFlight() int { return p.inFlight }

// Launch starts job behind the jobs already in flight. It fails when
// MaxInFlight jobs are in flight or the pipeline is closed; it never blocks
// in async mode.
func (p *Pipeline[T]) Launch(job T) error {
	if p.closed {
		return ErrClosed
	}
	if p.inFlight >= MaxInFlight {
		return fmt.Errorf("overlap: launch with %d jobs in flight (max %d)", p.inFlight, MaxInFlight)
	}
	p.inFlight++
	if !p.async {
		d := Done[T]{Job: job, Start: p.now()}
		d.Err = p.exec(job)
		d.End = p.now()
		p.ring[(p.ringHead+p.inFlight-1)%MaxInFlight] = d
		return nil
	}
	if !p.started {
		p.start()
	}
	p.jobs <- job // buffered MaxInFlight: never blocks here
	return nil
}

// Wait blocks until the oldest job in flight has finished and returns it.
func (p *Pipeline[T]) Wait() (Done[T], error) {
	if p.inFlight == 0 {
		return Done[T]{}, errors.New("overlap: wait with no job in flight")
	}
	p.inFlight--
	if !p.async {
		d := p.ring[p.ringHead]
		p.ring[p.ringHead] = Done[T]{}
		p.ringHead = (p.ringHead + 1) % MaxInFlight
		return d, nil
	}
	return <-p.results, nil
}

// Close waits for every job in flight to finish (their results are
// discarded) and stops the stream goroutine. A closed pipeline may be
// reopened with Reopen. Close is idempotent.
func (p *Pipeline[T]) Close() {
	if p.closed {
		return
	}
	for p.inFlight > 0 {
		_, _ = p.Wait()
	}
	p.closed = true
	if p.started {
		close(p.jobs)
		p.wg.Wait()
		p.started = false
	}
}

// Reopen makes a closed pipeline usable again (its goroutine restarts at the
// next Launch).
func (p *Pipeline[T]) Reopen() { p.closed = false }

func (p *Pipeline[T]) start() {
	p.jobs = make(chan T, MaxInFlight)
	p.results = make(chan Done[T], MaxInFlight)
	p.started = true
	p.wg.Add(1)
	go p.stream(p.jobs, p.results)
}

// stream is the device stream: one job at a time, in order.
func (p *Pipeline[T]) stream(jobs <-chan T, results chan<- Done[T]) {
	defer p.wg.Done()
	for job := range jobs {
		d := Done[T]{Job: job, Start: p.now()}
		d.Err = p.exec(job)
		d.End = p.now()
		results <- d
	}
}
