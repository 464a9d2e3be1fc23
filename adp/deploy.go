package adp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/executor"
)

// Stream is what a routed request's output is read through
// (*executor.Stream satisfies it).
type Stream interface {
	Recv(ctx context.Context) (executor.Delta, error)
	ReadAll(ctx context.Context) (executor.Delta, error)
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
	// Match fills what need asks of s.Hits and s.Resident for pending (the
	// queued requests about to be placed, in order), reusing the slices;
	// a slice not asked for is left empty. The deployment calls it after
	// admission, for routers that read it (MatchReader), so lookups are
	// done only for requests that will be placed.
	Match(s *RankState, pending []*executor.Request, need Needs)
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
	// Ablation holds the experiment switches; the zero value serves.
	Ablation Ablation
	// MaxPlaced is the most queued requests placed per iteration; 0 means
	// the ranks' total capacity (the most one iteration can admit).
	MaxPlaced int
	// Tokens measures a request's prompt for placement; nil means
	// len(PromptTokens), else len(Prompt) (bytes: an upper bound).
	Tokens func(*executor.Request) int
	// Logf, when set, receives diagnostics: a request that a rank in
	// another process refused (its client sees an aborted stream).
	Logf func(format string, args ...any)

	// Comm joins the processes of a deployment whose ranks run in several
	// processes (one per GPU under mpirun); nil is Local{}, every rank in
	// this process. The ranks given to New are this process's, the same
	// number on each: process p holds ranks [p·L, (p+1)·L). Only process 0
	// takes submissions (it runs the front end) and broadcasts each
	// iteration's pending requests; every process gathers the same states and runs
	// the same router, so all place alike without more messages. Output
	// of requests served elsewhere streams back to process 0.
	Comm Comm
	// VerifyPlacement is a debug mode: every iteration that places
	// requests, the processes allgather a hash of their placements and
	// stop with an error naming the process that differs.
	VerifyPlacement bool
	// Watchdog, when > 0, bounds one iteration (the gather, the broadcast
	// and the step) once the deployment has work: past it OnStuck is
	// called once, from the watchdog's goroutine, naming the rank, the
	// iteration and the collective it is stuck in. A rank that waits in a
	// collective for a peer that never comes hangs rather than slows down;
	// the watchdog turns that into a named failure. An iteration that
	// starts with the deployment idle is not bounded: its gather waits,
	// legitimately, for process 0 to get work.
	Watchdog time.Duration
	// OnStuck ends the job (MPI's Abort across processes); required with
	// Watchdog. The deployment cannot unblock a collective itself.
	OnStuck func(msg string)
	// Dummies, when set, has one entry per rank given to New: the dummy
	// step rank i runs when it has nothing to launch, for ranks built here
	// by NewFrontend (a nil entry runs none).
	Dummies []func() error
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
	id     uint64 // wire id (process 0 numbers submissions)
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
// Across processes (Config.Comm) every process runs this loop over its own
// ranks: the gather is one allgather of every rank's counts and every
// process's own words (ProcState), process 0 then broadcasts the aborts,
// program releases and pending requests to place, every process places
// them alike and hands its own ranks theirs, and each iteration's gather
// also brings process 0 the output of requests served elsewhere.
//
// One goroutine drives the loop (Run, or Step from tests); Submit, Snapshot
// and Close's refusal of new work are safe from any goroutine.
type Deployment struct {
	cfg       Config
	router    Router
	ranks     []Rank // this process's
	work      []chan struct{}
	results   chan stepResult
	workers   sync.WaitGroup
	maxPlaced int

	// Loop-owned. local is what this process's ranks report; states is
	// every rank's state as the gather exchanged it (through comm, on the
	// wire format a multi-process deployment uses), the only state routing
	// and liveness read.
	comm        Comm
	proc, procs int // this process, processes
	first       int // the global index of ranks[0]
	local       []RankState
	wire        Exchange
	states      []RankState
	me          ProcState
	ps          []ProcState
	loads       Loads
	queue       []*Handle
	reqs        []*executor.Request
	ids         []uint64
	pending     []Pending
	out         []int
	m           Metrics
	stopped     bool
	stopping    bool
	lastIdle    bool
	x           crossing // the byte wire (more than one process)

	mu       sync.Mutex // guards the fields below
	incoming []*Handle
	releaseQ []*releaseReq
	closed   bool
	pub      Metrics
	remote   []remoteMetrics // process 0: other processes' rank metrics
	wake     chan struct{}

	wmu   sync.Mutex // guards phase and start (the watchdog reads them)
	phase string
	start time.Time
}

type stepResult struct {
	rank int
	busy bool
	err  error
}

// remoteMetrics is a rank's executor metrics as last sent to process 0.
type remoteMetrics struct {
	m  executor.Metrics
	ok bool
}

// rankReport is one rank's executor metrics as they arrived at process 0.
type rankReport struct {
	rank int
	m    executor.Metrics
}

// releaseReq is a program release waiting for the loop (process 0).
type releaseReq struct {
	id        string
	ticket    uint64
	remaining int // processes still to answer
	found     bool
	err       error
	done      chan struct{}
}

// New builds a deployment over ranks (owned by the caller, who closes them
// after the deployment) and starts one goroutine per rank. It gathers once
// to learn every rank's capacity, which must be > 0; across processes
// every process calls New at the same point.
func New(cfg Config, ranks []Rank) (*Deployment, error) {
	if len(ranks) == 0 {
		return nil, errors.New("adp: at least one rank is required")
	}
	for i, r := range ranks {
		if r == nil {
			return nil, fmt.Errorf("adp: rank %d is nil", i)
		}
		if er, ok := r.(*EngineRank); ok && er.e.Ablation() != cfg.Ablation.Engine {
			return nil, fmt.Errorf("adp: rank %d's engine has ablation %+v, the deployment %+v: build every engine with Config.Ablation.Engine",
				i, er.e.Ablation(), cfg.Ablation.Engine)
		}
	}
	if cfg.MaxPlaced < 0 {
		return nil, fmt.Errorf("adp: MaxPlaced must be >= 0, got %d", cfg.MaxPlaced)
	}
	if cfg.Watchdog < 0 {
		return nil, fmt.Errorf("adp: Watchdog %v: must be >= 0", cfg.Watchdog)
	}
	if cfg.Watchdog > 0 && cfg.OnStuck == nil {
		return nil, errors.New("adp: a Watchdog needs OnStuck to end the job")
	}
	if cfg.Dummies != nil && len(cfg.Dummies) != len(ranks) {
		return nil, fmt.Errorf("adp: %d dummy steps for %d ranks", len(cfg.Dummies), len(ranks))
	}
	comm := cfg.Comm
	if comm == nil {
		comm = Local{}
	}
	procs, proc := comm.Size(), comm.Rank()
	if procs < 1 || proc < 0 || proc >= procs {
		return nil, fmt.Errorf("adp: process %d of %d", proc, procs)
	}
	n := procs * len(ranks)
	if n > MaxRanks {
		return nil, fmt.Errorf("adp: %d processes × %d ranks = %d ranks: at most %d", procs, len(ranks), n, MaxRanks)
	}
	d := &Deployment{
		cfg: cfg, router: cfg.Router, ranks: ranks,
		work:    make([]chan struct{}, len(ranks)),
		results: make(chan stepResult, len(ranks)),
		comm:    comm, proc: proc, procs: procs, first: proc * len(ranks),
		local:    make([]RankState, len(ranks)),
		states:   make([]RankState, n),
		ps:       make([]ProcState, procs),
		wake:     make(chan struct{}, 1),
		lastIdle: true,
	}
	if d.router == nil {
		d.router = &LoadBalanced{}
	}
	d.x.init(proc, procs, len(ranks), cfg.Logf)
	if procs > 1 && proc == 0 {
		d.remote = make([]remoteMetrics, n)
	}
	for i, r := range ranks {
		r.State(&d.local[i])
	}
	if err := d.wire.Gather(d.comm, d.local, d.states, &d.me, d.ps, false); err != nil {
		return nil, err
	}
	total := 0
	for i := range d.states {
		if c := d.states[i].Capacity; c <= 0 {
			return nil, fmt.Errorf("adp: rank %d reports capacity %d, must be > 0", i, c)
		}
		total += d.states[i].Capacity
	}
	d.maxPlaced = cfg.MaxPlaced
	if d.maxPlaced == 0 {
		d.maxPlaced = total
	}
	d.m.Ranks = make([]RankMetrics, n)
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

// Ranks is the number of ranks, across every process.
func (d *Deployment) Ranks() int { return len(d.states) }

// Process is this process's index and the number of processes.
func (d *Deployment) Process() (proc, procs int) { return d.proc, d.procs }

// ErrNotFrontEnd is returned by Submit on a process other than 0: only
// process 0 takes requests.
var ErrNotFrontEnd = errors.New("adp: only process 0 of a deployment takes requests")

// Submit queues r; the handle yields its stream once a step routes it.
// Cancelling ctx drops it from the queue (or, once routed, aborts it on its
// rank, across processes too).
func (d *Deployment) Submit(ctx context.Context, r *executor.Request) (*Handle, error) {
	if r == nil {
		return nil, errors.New("adp: nil request")
	}
	if d.proc != 0 {
		return nil, ErrNotFrontEnd
	}
	if ctx == nil {
		ctx = context.Background()
	}
	h := &Handle{ctx: ctx, req: r, done: make(chan struct{}), rank: -1, tokens: d.tokens(r)}
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

// tokens measures r for placement; every process measures alike.
func (d *Deployment) tokens(r *executor.Request) int {
	switch {
	case d.cfg.Tokens != nil:
		return d.cfg.Tokens(r)
	case len(r.PromptTokens) > 0:
		return len(r.PromptTokens)
	default:
		return len(r.Prompt)
	}
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

// errStopped ends Step on every process when one of them stops.
var errStopped = errors.New("adp: a process of the deployment stopped")

// Step runs one lockstep iteration. It reports idle, without stepping any
// rank, when the queue is empty and every rank may block (MayBlock); Run
// then waits for work. Step must not be called concurrently with Run or
// itself; across processes every process calls it the same number of
// times.
func (d *Deployment) Step() (idle bool, err error) {
	if d.stopped {
		return false, ErrClosed
	}
	defer d.watch()()
	if d.proc == 0 {
		d.drain()
	}
	if err := d.localLivenessWait(); err != nil {
		return false, err
	}

	// Gather: one fixed-size exchange of every rank's counts and every
	// process's own words; then the output of requests served elsewhere.
	for i, r := range d.ranks {
		r.State(&d.local[i])
	}
	d.x.poll(d.ranks, d.first, d.local)
	d.me = ProcState{Queued: len(d.queue), Control: d.x.control(), Out: d.x.out(), Open: d.x.open(), Stop: d.stopping}
	d.enter("the gather's allgather (a peer has not entered it)")
	// After an idle iteration the gather waits for process 0 to get work,
	// possibly for hours: it sleeps between polls instead of spinning.
	if err := d.wire.Gather(d.comm, d.local, d.states, &d.me, d.ps, d.lastIdle); err != nil {
		return false, err
	}
	if err := d.gatherOutput(); err != nil {
		return false, err
	}
	for q := range d.ps {
		if d.ps[q].Stop {
			return false, errStopped
		}
	}
	ComputeLoads(d.states, d.cfg.Ablation, &d.loads)
	for i := range d.states {
		rm, s := &d.m.Ranks[i], &d.states[i]
		rm.Active, rm.Waiting, rm.Retiring = s.Active, s.Waiting, s.Retiring
		if s.Retiring > 0 {
			rm.GathersRetiring++
		}
	}
	queued, control, open := d.ps[0].Queued, d.ps[0].Control, 0
	for q := range d.ps {
		open += d.ps[q].Open
	}
	if queued == 0 && control == 0 && open == 0 && d.allMayBlock() {
		d.lastIdle = true
		d.publish()
		return true, nil
	}
	d.lastIdle = false

	// Admit: every process computes the same n from the same rows.
	n := min(queued, d.maxPlaced, d.loads.Admit)
	d.reqs, d.ids, d.pending = d.reqs[:0], d.ids[:0], d.pending[:0]
	if d.proc == 0 {
		for _, h := range d.queue[:n] {
			d.reqs, d.ids = append(d.reqs, h.req), append(d.ids, h.id)
			d.pending = append(d.pending, Pending{Tokens: h.tokens, Program: h.req.ProgramID})
		}
	}
	if (d.procs > 1 && n > 0) || control > 0 {
		d.enter("the bulletin's broadcast (a peer has not entered it)")
		if err := d.broadcast(n); err != nil {
			return false, err
		}
	}

	// Match (for routers that read it) and place.
	if n > 0 {
		if wr, ok := d.router.(MatchReader); ok {
			if need := wr.Reads(); need.Hits || need.Resident {
				for i, r := range d.ranks {
					r.Match(&d.local[i], d.reqs, need)
				}
				d.enter("the match allgather (a peer has not entered it)")
				if err := d.wire.Matches(d.comm, d.local, d.states, d.maxPlaced); err != nil {
					return false, err
				}
			}
		}
		d.out = resize(d.out, n)
		d.router.Route(&d.loads, d.pending, d.out)
		if d.cfg.VerifyPlacement {
			if err := d.verify(n); err != nil {
				return false, err
			}
		}
		d.hand(n)
		clear(d.reqs) // the requests are the handles' (or ranks') now
	}

	// Step every rank of this process at once.
	d.enter("its step")
	for i := range d.ranks {
		d.work[i] <- struct{}{}
	}
	for range d.ranks {
		res := <-d.results
		rm := &d.m.Ranks[d.first+res.rank]
		rm.Steps++
		if !res.busy {
			rm.DummySteps++
		}
		if res.err != nil && err == nil {
			err = fmt.Errorf("adp: rank %d: %w", d.first+res.rank, res.err)
		}
	}
	d.x.stepped()
	d.m.Iterations++
	d.publish()
	return false, err
}

// gatherOutput brings process 0 the output of requests served elsewhere,
// when any process has some (every process knows from the gathered
// words).
func (d *Deployment) gatherOutput() error {
	total := 0
	for q := range d.ps {
		total += d.ps[q].Out
	}
	if d.procs == 1 || total == 0 {
		return nil
	}
	d.enter("the output gather (a peer has not entered it)")
	reports, err := d.x.gatherOutput(d.comm, d.ps)
	if len(reports) > 0 {
		d.mu.Lock()
		for _, r := range reports {
			d.remote[r.rank] = remoteMetrics{m: r.m, ok: true}
		}
		d.mu.Unlock()
	}
	return err
}

// broadcast sends process 0's bulletin (aborts, releases, the n pending
// requests) to every process and applies its control; elsewhere the
// pending requests are the bulletin's.
func (d *Deployment) broadcast(n int) error {
	b, err := d.x.broadcast(d.comm, d.ids, d.reqs)
	if err != nil {
		return err
	}
	if d.proc != 0 {
		if len(b.reqs) != n {
			return fmt.Errorf("adp: bulletin from process 0 has %d requests, this process admits %d", len(b.reqs), n)
		}
		d.reqs, d.ids = append(d.reqs[:0], b.reqs...), append(d.ids[:0], b.ids...)
		d.pending = d.pending[:0]
		for _, q := range d.reqs {
			d.pending = append(d.pending, Pending{Tokens: d.tokens(q), Program: q.ProgramID})
		}
	}
	d.x.apply(b, d.ranks)
	return nil
}

// localLivenessWait is the broken rule (Ablation.LocalLiveness): a process
// whose ranks hold only retiring requests, and nothing queued, waits for
// work of its own before the gather.
func (d *Deployment) localLivenessWait() error {
	if !d.cfg.Ablation.LocalLiveness {
		return nil
	}
	retiring, other := 0, len(d.queue)
	for i, r := range d.ranks {
		r.State(&d.local[i])
		s := &d.local[i]
		retiring += s.Retiring
		other += s.Active + s.Waiting
	}
	if retiring == 0 || other > 0 {
		return nil
	}
	d.enter("its own queue wait (retiring requests not counted for liveness)")
	<-d.wake // nothing else wakes it: the point of the experiment
	return nil
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

// hand gives each placed pending request (the first n) to its rank:
// this process's ranks get theirs; on process 0 a request placed in
// another process becomes a relay its output streams into. Process 0
// keeps the unplaced ones queued in order.
func (d *Deployment) hand(n int) {
	L := len(d.ranks)
	for j := range n {
		r := d.out[j]
		if r < 0 {
			continue
		}
		switch owner := r / L; {
		case d.proc == 0 && owner == 0:
			h := d.queue[j]
			s, err := d.ranks[r].Submit(h.ctx, h.req)
			if err != nil {
				d.m.Refused++
				h.finish(nil, r, fmt.Errorf("adp: rank %d refused the request: %w", r, err))
				continue
			}
			h.finish(s, r, nil)
		case d.proc == 0:
			h := d.queue[j]
			h.finish(d.x.relay(h, d.ids[j], r), r, nil)
		case owner == d.proc:
			d.x.serve(d.ranks[r-d.first], d.ids[j], d.reqs[j])
		}
		// Routed on every process alike (a refusal elsewhere than here
		// travels back as an aborted stream, not as a count).
		rm := &d.m.Ranks[r]
		rm.Routed++
		rm.RoutedTokens += uint64(d.pending[j].Tokens)
		d.m.Routed++
	}
	if d.proc != 0 {
		return
	}
	kept := 0
	for j, h := range d.queue {
		if j < n && d.out[j] >= 0 {
			continue
		}
		d.queue[kept] = h
		kept++
	}
	clear(d.queue[kept:])
	d.queue = d.queue[:kept]
}

// verify allgathers a hash of this iteration's placements and fails when
// any process placed differently (Config.VerifyPlacement).
func (d *Deployment) verify(n int) error {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], d.m.Iterations)
	h.Write(b[:])
	for _, r := range d.out[:n] {
		binary.LittleEndian.PutUint64(b[:], uint64(int64(r)))
		h.Write(b[:])
	}
	mine := [1]int64{int64(h.Sum64())}
	all := make([]int64, d.procs)
	d.enter("the placement check's allgather")
	if err := d.comm.AllgatherInt64(mine[:], all); err != nil {
		return fmt.Errorf("adp: placement check: %w", err)
	}
	for q, v := range all {
		if v != all[0] {
			return fmt.Errorf("adp: placement check at iteration %d: process %d placed %d requests differently from process 0 (hash %x, want %x)",
				d.m.Iterations, q, n, uint64(v), uint64(all[0]))
		}
	}
	return nil
}

// drain moves submissions into the queue and drops cancelled ones
// (process 0).
func (d *Deployment) drain() {
	d.mu.Lock()
	in := d.incoming
	d.incoming = nil
	rel := d.releaseQ
	d.releaseQ = nil
	d.mu.Unlock()
	d.x.addReleases(rel)
	for _, h := range in {
		d.m.Submitted++
		h.id = d.x.nextID()
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
	d.x.watchAborts()
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

// RemoteSnapshot is, on process 0, the executor metrics rank last sent
// from its process (ok false before any arrived, for a rank of this
// process, or on other processes). Safe from any goroutine.
func (d *Deployment) RemoteSnapshot(rank int) (executor.Metrics, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rank < 0 || rank >= len(d.remote) || !d.remote[rank].ok {
		return executor.Metrics{}, false
	}
	return d.remote[rank].m, true
}

// ReleaseProgram ends program id on every rank of every process and
// reports whether any knew it; on process 0, across processes. It waits
// for the loop (the next iteration), or ctx.
func (d *Deployment) ReleaseProgram(ctx context.Context, id string) (bool, error) {
	if d.proc != 0 {
		return false, ErrNotFrontEnd
	}
	req := &releaseReq{id: id, done: make(chan struct{})}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false, ErrClosed
	}
	d.releaseQ = append(d.releaseQ, req)
	d.mu.Unlock()
	d.Wake()
	select {
	case <-req.done:
		return req.found, req.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Run is the lockstep loop: it steps while any rank holds a live request or
// the queue is not empty, and blocks for new work when every rank is idle
// (the liveness rule, applied to all ranks at once since they step
// together). It returns nil when ctx ends (or, across processes, when
// another process stopped), or a rank's error; either way the deployment
// is closed afterwards (the ranks are not). Across processes a process
// whose ctx ended tells the others at the next gather, and all stop there.
func (d *Deployment) Run(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			if d.procs > 1 && !d.stopped {
				d.stopping = true
				if _, err := d.Step(); err != nil && !errors.Is(err, errStopped) {
					_ = d.Close()
					return err
				}
			}
			return d.Close()
		}
		idle, err := d.Step()
		if errors.Is(err, errStopped) {
			return d.Close()
		}
		if err != nil {
			_ = d.Close()
			return err
		}
		if idle {
			d.m.IdleWaits++
			d.publish()
			if d.proc != 0 {
				continue // the next gather waits for process 0
			}
			select {
			case <-d.wake:
			case <-ctx.Done():
			}
		}
	}
}

// Close refuses new submissions, fails every queued handle with ErrClosed,
// ends the relays of requests served elsewhere (abort), and stops the rank
// goroutines. It does not close the ranks. Idempotent; loop-owned (call it
// from the goroutine that runs Step, or after Run).
func (d *Deployment) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	if d.stopped {
		return nil
	}
	if d.proc == 0 {
		d.drain()
	}
	for _, h := range d.queue {
		h.finish(nil, -1, ErrClosed)
		d.m.Cancelled++
	}
	clear(d.queue)
	d.queue = d.queue[:0]
	d.x.close()
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
	if d.proc == 0 {
		if got := m.Routed + m.Refused + m.Cancelled + uint64(len(d.queue)); got != m.Submitted {
			return fmt.Errorf("adp: %d submitted, but %d routed + %d refused + %d cancelled + %d queued = %d",
				m.Submitted, m.Routed, m.Refused, m.Cancelled, len(d.queue), got)
		}
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
	return d.x.check()
}

// enter records what the loop is doing now, for the watchdog.
func (d *Deployment) enter(phase string) {
	if d.cfg.Watchdog <= 0 {
		return
	}
	d.wmu.Lock()
	d.phase = phase
	d.wmu.Unlock()
}

// watch starts the iteration's watchdog (when the deployment had work at
// the last gather); the returned func stops it and, should the watchdog
// be firing, waits for OnStuck to return, so no OnStuck runs once Step has
// returned.
func (d *Deployment) watch() func() {
	if d.cfg.Watchdog <= 0 || d.lastIdle {
		return func() {}
	}
	it := d.m.Iterations
	d.wmu.Lock()
	d.start, d.phase = time.Now(), "the start of its iteration"
	d.wmu.Unlock()
	var (
		mu      sync.Mutex
		stopped bool
		fired   bool
	)
	done := make(chan struct{})
	t := time.AfterFunc(d.cfg.Watchdog, func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		fired = true
		mu.Unlock()
		defer close(done)
		d.wmu.Lock()
		phase, since := d.phase, time.Since(d.start)
		d.wmu.Unlock()
		d.cfg.OnStuck(fmt.Sprintf("adp: watchdog: process %d of %d (ranks %d to %d) stuck %v in iteration %d, in %s",
			d.proc, d.procs, d.first, d.first+len(d.ranks)-1, since.Round(time.Millisecond), it, phase))
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
