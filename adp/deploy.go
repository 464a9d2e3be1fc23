package adp

import (
	"context"
	"errors"
	"fmt"
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

// Deployment runs N ranks in lockstep behind one global queue. Each
// iteration (Step): gather every rank's state and every process's words,
// decide from them alone (the only place load is computed), broadcast
// process 0's bulletin, match, place, hand the placed requests to their
// ranks, then step every rank at once, one goroutine per rank; the
// iteration ends when every rank's step has.
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
	maxPlaced int
	ranks     []Rank // this process's
	work      []chan struct{}
	results   chan stepResult
	workers   sync.WaitGroup

	// Loop-owned. local is what this process's ranks report; states is
	// every rank's state as the gather exchanged it (through comm, on the
	// wire format a multi-process deployment uses) and ps every process's
	// words: the rows the decision is computed from.
	comm        Comm
	proc, procs int // this process, processes
	first       int // the global index of ranks[0]
	local       []RankState
	wire        Exchange
	states      []RankState
	me          ProcState
	ps          []ProcState
	dec         decision
	queue       []*Handle // process 0's, in submission order
	pend        pendingReqs
	m           Metrics
	stopped     bool
	stopping    bool
	lastIdle    bool     // the last decision was idle: the next gather may wait long
	x           crossing // the byte wire (more than one process)

	in    inbox // submissions and releases, from any goroutine
	board board // published metrics, for any goroutine
	wd    watchdog
}

type stepResult struct {
	rank int
	busy bool
	err  error
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
	first := proc * len(ranks)
	d := &Deployment{
		cfg: cfg, router: cfg.Router, ranks: ranks,
		work:    make([]chan struct{}, len(ranks)),
		results: make(chan stepResult, len(ranks)),
		comm:    comm, proc: proc, procs: procs, first: first,
		local:    make([]RankState, len(ranks)),
		states:   make([]RankState, n),
		ps:       make([]ProcState, procs),
		lastIdle: true,
		in:       inbox{wake: make(chan struct{}, 1)},
		wd: watchdog{limit: cfg.Watchdog, onStuck: cfg.OnStuck,
			who: fmt.Sprintf("process %d of %d (ranks %d to %d)", proc, procs, first, first+len(ranks)-1)},
	}
	if d.router == nil {
		d.router = &LoadBalanced{}
	}
	d.x.init(proc, procs, len(ranks), cfg.Logf)
	if procs > 1 && proc == 0 {
		d.board.remote = make([]remoteMetrics, n)
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
	d.board.pub = d.m.clone()
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
			case <-d.in.wake:
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
	d.in.close()
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
	for i, room := range d.dec.loads.Room {
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
