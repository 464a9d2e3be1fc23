package adp

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnstile-llm/turnstile/executor"
)

// MaxRanks bounds the ranks of one Frontend: every rank is an engine with
// its own KV cache, seats and runner in this process, and a goroutine.
const MaxRanks = 64

// Frontend serves an attention-DP deployment of executor engines through
// the single-engine interface a server uses (Submit, Snapshot, programs,
// Run, Check): requests are routed by the deployment's one gather point,
// metrics are the ranks' snapshots merged.
type Frontend struct {
	d       *Deployment
	engines []*executor.Engine
}

// NewFrontend builds the deployment of engines (one rank each, sharing one
// prompt-chain cache) under cfg. The engines must be built alike; each
// must still be unstarted (the deployment steps them).
func NewFrontend(cfg Config, engines []*executor.Engine) (*Frontend, error) {
	if len(engines) < 1 || len(engines) > MaxRanks {
		return nil, fmt.Errorf("adp: %d engines: want 1 to %d", len(engines), MaxRanks)
	}
	ranks := make([]Rank, len(engines))
	chains := &Chains{}
	for i, e := range engines {
		if e == nil {
			return nil, fmt.Errorf("adp: engine %d is nil", i)
		}
		ranks[i] = NewEngineRank(e, nil, chains)
	}
	d, err := New(cfg, ranks)
	if err != nil {
		return nil, err
	}
	return &Frontend{d: d, engines: engines}, nil
}

// Submit queues r with the deployment and waits until a rank accepted it
// (or refused it: the rank's validation error comes back as from one engine).
func (x *Frontend) Submit(ctx context.Context, r *executor.Request) (*executor.Stream, error) {
	st, err := x.d.SubmitStream(ctx, r)
	if err != nil {
		return nil, err
	}
	es, ok := st.(*executor.Stream)
	if !ok {
		return nil, fmt.Errorf("adp: rank returned a %T stream, want *executor.Stream", st)
	}
	return es, nil
}

// Snapshot merges every rank's metrics.
func (x *Frontend) Snapshot() executor.Metrics {
	var m executor.Metrics
	for _, e := range x.engines {
		s := e.Snapshot()
		m.Merge(&s)
	}
	return m
}

// RankSnapshots is every rank's own snapshot, for per-rank metric series.
func (x *Frontend) RankSnapshots() []executor.Metrics {
	out := make([]executor.Metrics, len(x.engines))
	for i, e := range x.engines {
		out[i] = e.Snapshot()
	}
	return out
}

// ReleaseProgram ends program id on whichever rank holds it.
func (x *Frontend) ReleaseProgram(id string) (found bool, err error) {
	for _, e := range x.engines {
		f, err := e.ReleaseProgram(id)
		if err != nil {
			return false, err // executor.ErrNoPrograms: every rank is built alike
		}
		found = found || f
	}
	return found, nil
}

// ProgramStates sums the ranks' program states; nil without a program
// policy.
func (x *Frontend) ProgramStates() (map[string]int, uint64, uint64) {
	var total map[string]int
	var pauses, resumes uint64
	for _, e := range x.engines {
		m, p, r := e.ProgramStates()
		if m == nil {
			return nil, 0, 0
		}
		if total == nil {
			total = map[string]int{}
		}
		for k, v := range m {
			total[k] += v
		}
		pauses += p
		resumes += r
	}
	return total, pauses, resumes
}

// Run is the deployment's lockstep loop.
func (x *Frontend) Run(ctx context.Context) error { return x.d.Run(ctx) }

// Check verifies the deployment's and every rank's accounting.
func (x *Frontend) Check() error {
	errs := []error{x.d.Check()}
	for i, e := range x.engines {
		if err := e.Check(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
