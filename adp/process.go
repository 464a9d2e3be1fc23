package adp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ProcessConfig configures a ProcessLoop.
type ProcessConfig struct {
	// Collective joins this process to its peers (one rank each); required.
	Collective Collective
	// Watchdog, when > 0, bounds one iteration (the liveness wait, the
	// gather and the step): past it OnStuck is called once, from the
	// watchdog's goroutine, with the rank, the iteration and what the rank
	// is stuck in. A rank that waits in a collective for a peer that never
	// comes hangs rather than slows down; the watchdog turns that into a
	// named failure.
	Watchdog time.Duration
	// OnStuck ends the job (MPI's Abort across processes); required with
	// Watchdog. The loop cannot unblock a collective itself.
	OnStuck func(msg string)
	// LocalLiveness is an experiment switch that restores the broken
	// liveness rule: a rank whose requests are all retiring counts itself
	// idle and waits for new work of its own before the next gather,
	// instead of entering the gather its peers wait in. Never for serving.
	LocalLiveness bool
}

// ProcessLoop drives this process's rank of a deployment whose ranks run
// one per process: every iteration it gathers every rank's counts (one
// fixed-size allgather, the only point load and liveness are computed) and
// steps its rank, a dummy step when the rank has no work, so the
// collectives inside a step stay matched. The whole deployment is idle only
// when no rank holds a live request (retiring ones included): every process
// decides that from the same gathered rows, so all stop together.
//
// Requests reach the rank through its own Submit (placing them across
// processes, rank 0 broadcasting the window, is not built here).
type ProcessLoop struct {
	cfg   ProcessConfig
	rank  Rank
	x     Exchange
	local [1]RankState
	all   []RankState
	iter  uint64

	mu    sync.Mutex // guards phase and start (the watchdog reads them)
	phase string
	start time.Time
	wake  chan struct{}
}

// NewProcessLoop runs rank r as this process's share of the deployment.
func NewProcessLoop(cfg ProcessConfig, r Rank) (*ProcessLoop, error) {
	if cfg.Collective == nil {
		return nil, errors.New("adp: ProcessConfig.Collective is required")
	}
	if r == nil {
		return nil, errors.New("adp: process loop needs a rank")
	}
	if cfg.Watchdog < 0 {
		return nil, fmt.Errorf("adp: Watchdog %v: must be >= 0", cfg.Watchdog)
	}
	if cfg.Watchdog > 0 && cfg.OnStuck == nil {
		return nil, errors.New("adp: a Watchdog needs OnStuck to end the job")
	}
	return &ProcessLoop{cfg: cfg, rank: r, all: make([]RankState, cfg.Collective.Size()), wake: make(chan struct{}, 1)}, nil
}

// Wake tells a rank waiting for work of its own (LocalLiveness) that some
// arrived. Safe from any goroutine.
func (p *ProcessLoop) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// States are the rows of the last gather, every rank's (read-only).
func (p *ProcessLoop) States() []RankState { return p.all }

// Iterations is the number of completed iterations.
func (p *ProcessLoop) Iterations() uint64 { return p.iter }

// enter records what the loop is doing now, for the watchdog.
func (p *ProcessLoop) enter(phase string) {
	p.mu.Lock()
	p.phase = phase
	p.mu.Unlock()
}

// Step runs one iteration and reports whether the whole deployment is idle
// (no live request on any rank), in which case it did not step the rank.
// Every process must call Step the same number of times.
func (p *ProcessLoop) Step(ctx context.Context) (idle bool, err error) {
	p.mu.Lock()
	p.start = time.Now()
	p.mu.Unlock()
	stop := p.watch()
	defer stop()

	p.rank.State(&p.local[0])
	if p.cfg.LocalLiveness {
		if s := &p.local[0]; s.Active+s.Waiting == 0 {
			// The broken rule: retiring requests are not counted, so the
			// rank thinks it is idle and waits for work of its own.
			p.enter("its own queue wait (retiring requests not counted for liveness)")
			select {
			case <-p.wake:
			case <-ctx.Done():
				return false, ctx.Err()
			}
			p.rank.State(&p.local[0])
		}
	}
	p.enter("the gather's allgather (a peer has not entered it)")
	if err := p.x.Counts(p.cfg.Collective, p.local[:], p.all); err != nil {
		return false, err
	}
	live := false
	for i := range p.all {
		if p.all[i].Live() > 0 {
			live = true
			break
		}
	}
	if !live {
		p.iter++
		return true, nil
	}
	p.enter("its step")
	if _, err := p.rank.Step(); err != nil {
		return false, fmt.Errorf("adp: rank %d: %w", p.cfg.Collective.Rank(), err)
	}
	p.iter++
	return false, nil
}

// RunUntilIdle steps until the whole deployment is idle or ctx ends.
func (p *ProcessLoop) RunUntilIdle(ctx context.Context) error {
	for {
		idle, err := p.Step(ctx)
		if err != nil {
			return err
		}
		if idle {
			return nil
		}
	}
}

// watch starts the iteration's watchdog; the returned func stops it and,
// should the watchdog be firing, waits for OnStuck to return, so no
// OnStuck runs once Step has returned.
func (p *ProcessLoop) watch() func() {
	if p.cfg.Watchdog <= 0 {
		return func() {}
	}
	it := p.iter
	var (
		mu      sync.Mutex
		stopped bool
		fired   bool
	)
	done := make(chan struct{})
	t := time.AfterFunc(p.cfg.Watchdog, func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		fired = true
		mu.Unlock()
		defer close(done)
		p.mu.Lock()
		phase, since := p.phase, time.Since(p.start)
		p.mu.Unlock()
		p.cfg.OnStuck(fmt.Sprintf("adp: watchdog: rank %d of %d stuck %v in iteration %d, in %s",
			p.cfg.Collective.Rank(), p.cfg.Collective.Size(), since.Round(time.Millisecond), it, phase))
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
