package adp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/turnstile-llm/turnstile/executor"
)

// Stream is what a routed request's output is read through
// (*executor.Stream satisfies it).
type Stream interface {
	Recv(ctx context.Context) (executor.Delta, error)
	Collect(ctx context.Context) (executor.Delta, error)
}

// Rank is one attention-DP rank as the deployment drives it: its own
// executor (KV pool, seats, runner or device). Step and State are never
// called concurrently with each other; Submit is called only between Steps,
// from the deployment's loop.
type Rank interface {
	// Step runs one lockstep iteration: the rank's next step when it has
	// work, a dummy step when it has none (so a collective inside the
	// step stays matched across ranks). busy reports real work.
	Step() (busy bool, err error)
	// State fills s's counts and capacity at the gather (it leaves Hits
	// and Resident alone).
	State(s *RankState)
	// Match fills what need asks of s.Hits and s.Resident for window (the
	// queued requests about to be placed, in order), reusing the slices;
	// a slice not asked for is left empty. The deployment calls it after
	// admission, for routers that read it (WindowReader), so lookups are
	// done only for requests that will be placed.
	Match(s *RankState, window []*executor.Request, need Needs)
	// Submit hands a routed request to the rank.
	Submit(ctx context.Context, r *executor.Request) (Stream, error)
}

// ErrClosed is returned by Submit after Close, and by Handle.Wait for
// requests still queued when the deployment closed.
var ErrClosed = errors.New("adp: deployment closed")

// Config configures a Deployment.
type Config struct {
	// Router places requests; nil means &LoadBalanced{}.
	Router Router
	// Policy is how the gather counts retiring requests.
	Policy Policy
	// Window is the most queued requests placed per iteration; 0 means
	// the ranks' total capacity (the most one iteration can admit).
	Window int
	// Tokens measures a request's prompt for placement; nil means
	// len(PromptTokens), else len(Prompt) (bytes: an upper bound).
	Tokens func(*executor.Request) int
	// Logf, when set, receives rank 0's line once per iteration:
	// "currank_total_requests = <routed to rank 0>/<routed to all ranks>".
	Logf func(format string, args ...any)
}

// RankMetrics are one rank's counters (since start) and its state at the
// last gather.
type RankMetrics struct {
	Routed, RoutedTokens uint64
	Steps, DummySteps    uint64
	// GathersRetiring counts the gathers at which the rank held a retiring
	// request (how often this rank was the one penalised, over time).
	GathersRetiring uint64
	// At the last gather.
	Active, Waiting, Retiring int
}

// Metrics is a snapshot of the deployment.
type Metrics struct {
	Iterations uint64 // lockstep iterations run
	IdleWaits  uint64 // times the loop found every rank idle and blocked
	Submitted  uint64
	Routed     uint64
	Refused    uint64 // a rank's Submit failed (the handle carries the error)
	Cancelled  uint64 // cancelled while queued
	Queued     int
	Ranks      []RankMetrics
}

// Handle is a request queued in the deployment; Wait returns its stream once
// it is routed.
type Handle struct {
	ctx    context.Context
	req    *executor.Request
	tokens int
	done   chan struct{}
	stream Stream
	rank   int
	err    error
}

// Wait blocks until the request is routed (or refused, cancelled, or the
// deployment closed) or ctx ends.
func (h *Handle) Wait(ctx context.Context) (Stream, error) {
	select {
	case <-h.done:
		return h.stream, h.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Rank is the rank the request was routed to; valid once Wait returned
// without error.
func (h *Handle) Rank() int {
	select {
	case <-h.done:
		return h.rank
	default:
		return -1
	}
}

func (h *Handle) finish(s Stream, rank int, err error) {
	h.stream, h.rank, h.err = s, rank, err
	close(h.done)
}

// Deployment runs N ranks in lockstep behind one global queue. Each
// iteration: gather every rank's state (the only place load is computed),
// admit (how many may enter, per rank's room), place (the router), hand the
// placed requests to their ranks, then step every rank at once, one
// goroutine per rank; the iteration ends when every rank's step has.
//
// One goroutine drives the loop (Run, or Step from tests); Submit, Snapshot
// and Close's refusal of new work are safe from any goroutine.
type Deployment struct {
	cfg     Config
	router  Router
	ranks   []Rank
	work    []chan struct{}
	results chan stepResult
	workers sync.WaitGroup
	window  int

	// Loop-owned. local is what this process's ranks report; states is
	// every rank's state as the gather exchanged it (through comm, on the
	// wire format a multi-process deployment uses), the only state routing
	// and liveness read.
	comm    Collective
	local   []RankState
	wire    Exchange
	states  []RankState
	loads   Loads
	queue   []*Handle
	reqs    []*executor.Request
	pending []Pending
	out     []int
	m       Metrics
	stopped bool

	mu       sync.Mutex // guards the fields below
	incoming []*Handle
	closed   bool
	pub      Metrics
	wake     chan struct{}
}

type stepResult struct {
	rank int
	busy bool
	err  error
}

// New builds a deployment over ranks (owned by the caller, who closes them
// after the deployment) and starts one goroutine per rank. It gathers once
// to learn every rank's capacity, which must be > 0.
func New(cfg Config, ranks []Rank) (*Deployment, error) {
	if len(ranks) == 0 {
		return nil, errors.New("adp: at least one rank is required")
	}
	for i, r := range ranks {
		if r == nil {
			return nil, fmt.Errorf("adp: rank %d is nil", i)
		}
	}
	if cfg.Window < 0 {
		return nil, fmt.Errorf("adp: Window must be >= 0, got %d", cfg.Window)
	}
	d := &Deployment{
		cfg: cfg, router: cfg.Router, ranks: ranks,
		work:    make([]chan struct{}, len(ranks)),
		results: make(chan stepResult, len(ranks)),
		comm:    Local{},
		local:   make([]RankState, len(ranks)),
		states:  make([]RankState, len(ranks)),
		wake:    make(chan struct{}, 1),
	}
	if d.router == nil {
		d.router = &LoadBalanced{}
	}
	total := 0
	for i, r := range ranks {
		r.State(&d.states[i])
		if c := d.states[i].Capacity; c <= 0 {
			return nil, fmt.Errorf("adp: rank %d reports capacity %d, must be > 0", i, c)
		}
		total += d.states[i].Capacity
	}
	d.window = cfg.Window
	if d.window == 0 {
		d.window = total
	}
	d.m.Ranks = make([]RankMetrics, len(ranks))
	d.pub = d.m.clone()
	for i := range ranks {
		d.work[i] = make(chan struct{})
		d.workers.Add(1)
		go d.worker(i)
	}
	return d, nil
}

func (d *Deployment) worker(i int) {
	defer d.workers.Done()
	for range d.work[i] {
		busy, err := d.ranks[i].Step()
		d.results <- stepResult{rank: i, busy: busy, err: err}
	}
}

// Ranks is the number of ranks.
func (d *Deployment) Ranks() int { return len(d.ranks) }

// Submit queues r; the handle yields its stream once a step routes it.
// Cancelling ctx drops it from the queue (or, once routed, aborts it on its
// rank).
func (d *Deployment) Submit(ctx context.Context, r *executor.Request) (*Handle, error) {
	if r == nil {
		return nil, errors.New("adp: nil request")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	h := &Handle{ctx: ctx, req: r, done: make(chan struct{}), rank: -1}
	if d.cfg.Tokens != nil {
		h.tokens = d.cfg.Tokens(r)
	} else if len(r.PromptTokens) > 0 {
		h.tokens = len(r.PromptTokens)
	} else {
		h.tokens = len(r.Prompt)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	d.incoming = append(d.incoming, h)
	d.mu.Unlock()
	d.Wake()
	return h, nil
}

// SubmitStream is Submit, then Wait with ctx: it returns once a step has
// routed the request (for callers that want a stream, like a server).
func (d *Deployment) SubmitStream(ctx context.Context, r *executor.Request) (Stream, error) {
	h, err := d.Submit(ctx, r)
	if err != nil {
		return nil, err
	}
	return h.Wait(ctx)
}

// Wake makes a blocked Run loop look for work again.
func (d *Deployment) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Step runs one lockstep iteration. It reports idle, without stepping any
// rank, when the queue is empty and every rank may block (MayBlock); Run
// then waits for work. Step must not be called concurrently with Run or
// itself.
func (d *Deployment) Step() (idle bool, err error) {
	if d.stopped {
		return false, ErrClosed
	}
	d.drain()

	// Gather: one fixed-size exchange of every rank's counts.
	for i, r := range d.ranks {
		r.State(&d.local[i])
	}
	if err := d.wire.Counts(d.comm, d.local, d.states); err != nil {
		return false, err
	}
	Gather(d.states, d.cfg.Policy, &d.loads)
	for i := range d.states {
		rm, s := &d.m.Ranks[i], &d.states[i]
		rm.Active, rm.Waiting, rm.Retiring = s.Active, s.Waiting, s.Retiring
		if s.Retiring > 0 {
			rm.GathersRetiring++
		}
	}
	if len(d.queue) == 0 && d.allMayBlock() {
		d.publish()
		return true, nil
	}

	// Admit, match (for routers that read it) and place.
	n := min(len(d.queue), d.window, d.loads.Admit)
	if n > 0 {
		d.reqs, d.pending = d.reqs[:0], d.pending[:0]
		for _, h := range d.queue[:n] {
			d.reqs = append(d.reqs, h.req)
			d.pending = append(d.pending, Pending{Tokens: h.tokens, Program: h.req.ProgramID})
		}
		if wr, ok := d.router.(WindowReader); ok {
			if need := wr.Reads(); need.Hits || need.Resident {
				for i, r := range d.ranks {
					r.Match(&d.local[i], d.reqs, need)
				}
				if err := d.wire.Window(d.comm, d.local, d.states, d.window); err != nil {
					return false, err
				}
			}
		}
		d.out = resize(d.out, n)
		d.router.Route(&d.loads, d.pending, d.out)
		d.hand(n)
		clear(d.reqs) // the requests are the handles' (or ranks') now
	}
	if d.cfg.Logf != nil {
		d.cfg.Logf("currank_total_requests = %d/%d", d.m.Ranks[0].Routed, d.m.Routed)
	}

	// Step every rank at once.
	for i := range d.ranks {
		d.work[i] <- struct{}{}
	}
	for range d.ranks {
		res := <-d.results
		rm := &d.m.Ranks[res.rank]
		rm.Steps++
		if !res.busy {
			rm.DummySteps++
		}
		if res.err != nil && err == nil {
			err = fmt.Errorf("adp: rank %d: %w", res.rank, res.err)
		}
	}
	d.m.Iterations++
	d.publish()
	return false, err
}

// allMayBlock: every rank may block (no live request anywhere).
func (d *Deployment) allMayBlock() bool {
	for i := range d.states {
		if !MayBlock(&d.states[i], 0) {
			return false
		}
	}
	return true
}

// hand submits the placed requests among the first n queued to their
// ranks, keeping the rest queued in order.
func (d *Deployment) hand(n int) {
	kept := 0
	for j, h := range d.queue {
		if j >= n || d.out[j] < 0 {
			d.queue[kept] = h
			kept++
			continue
		}
		r := d.out[j]
		s, err := d.ranks[r].Submit(h.ctx, h.req)
		if err != nil {
			d.m.Refused++
			h.finish(nil, r, fmt.Errorf("adp: rank %d refused the request: %w", r, err))
			continue
		}
		rm := &d.m.Ranks[r]
		rm.Routed++
		rm.RoutedTokens += uint64(h.tokens)
		d.m.Routed++
		h.finish(s, r, nil)
	}
	clear(d.queue[kept:])
	d.queue = d.queue[:kept]
}

// drain moves submissions into the queue and drops cancelled ones.
func (d *Deployment) drain() {
	d.mu.Lock()
	in := d.incoming
	d.incoming = nil
	d.mu.Unlock()
	for _, h := range in {
		d.m.Submitted++
		d.queue = append(d.queue, h)
	}
	kept := 0
	for _, h := range d.queue {
		if err := h.ctx.Err(); err != nil {
			d.m.Cancelled++
			h.finish(nil, -1, err)
			continue
		}
		d.queue[kept] = h
		kept++
	}
	clear(d.queue[kept:])
	d.queue = d.queue[:kept]
}

func (d *Deployment) publish() {
	d.m.Queued = len(d.queue)
	d.mu.Lock()
	d.m.copyInto(&d.pub)
	d.mu.Unlock()
}

func (m *Metrics) clone() Metrics {
	c := *m
	c.Ranks = append([]RankMetrics(nil), m.Ranks...)
	return c
}

// copyInto copies m into dst, reusing dst.Ranks.
func (m *Metrics) copyInto(dst *Metrics) {
	ranks := append(dst.Ranks[:0], m.Ranks...)
	*dst = *m
	dst.Ranks = ranks
}

// Snapshot returns the metrics as of the last iteration.
func (d *Deployment) Snapshot() Metrics {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pub.clone()
}

// Run is the lockstep loop: it steps while any rank holds a live request or
// the queue is not empty, and blocks for new work when every rank is idle
// (the liveness rule, applied to all ranks at once since they step
// together). It returns nil when ctx ends, or a rank's error; either way the
// deployment is closed afterwards (the ranks are not).
func (d *Deployment) Run(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			return d.Close()
		}
		idle, err := d.Step()
		if err != nil {
			_ = d.Close()
			return err
		}
		if idle {
			d.m.IdleWaits++
			d.publish()
			select {
			case <-d.wake:
			case <-ctx.Done():
			}
		}
	}
}

// Close refuses new submissions, fails every queued handle with ErrClosed
// and stops the rank goroutines. It does not close the ranks. Idempotent;
// loop-owned (call it from the goroutine that runs Step, or after Run).
func (d *Deployment) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	if d.stopped {
		return nil
	}
	d.drain()
	for _, h := range d.queue {
		h.finish(nil, -1, ErrClosed)
		d.m.Cancelled++
	}
	clear(d.queue)
	d.queue = d.queue[:0]
	d.stopped = true
	for _, c := range d.work {
		close(c)
	}
	d.workers.Wait()
	d.publish()
	return nil
}

// Check verifies the deployment's accounting: every submitted request is
// routed, refused, cancelled or still queued, exactly once; the per-rank
// routed counts add up; no queued request appears twice; the last gather
// left every rank's room within [0, capacity]. Loop-owned.
func (d *Deployment) Check() error {
	m := &d.m
	if got := m.Routed + m.Refused + m.Cancelled + uint64(len(d.queue)); got != m.Submitted {
		return fmt.Errorf("adp: %d submitted, but %d routed + %d refused + %d cancelled + %d queued = %d",
			m.Submitted, m.Routed, m.Refused, m.Cancelled, len(d.queue), got)
	}
	var sum uint64
	for i := range m.Ranks {
		sum += m.Ranks[i].Routed
	}
	if sum != m.Routed {
		return fmt.Errorf("adp: ranks were routed %d requests in all, the deployment counted %d", sum, m.Routed)
	}
	for i, room := range d.loads.Room {
		if c := d.states[i].Capacity; room < 0 || room > c {
			return fmt.Errorf("adp: rank %d has room %d outside [0, capacity %d]", i, room, c)
		}
	}
	seen := make(map[*Handle]bool, len(d.queue))
	for _, h := range d.queue {
		if seen[h] {
			return fmt.Errorf("adp: a request is queued twice")
		}
		seen[h] = true
	}
	return nil
}
