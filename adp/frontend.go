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
// metrics are the ranks' snapshots merged. Across processes (Config.Comm)
// each process builds a Frontend over its own engines and runs it; only
// process 0's takes requests, and its metrics carry every rank (those
// elsewhere as last sent to it).
type Frontend struct {
	d       *Deployment
	engines []*executor.Engine
}

// NewFrontend builds the deployment of engines (one rank each, sharing one
// prompt-chain cache) under cfg; across processes, engines are this
// process's ranks. The engines must be built alike (on every process);
// each must still be unstarted (the deployment steps them).
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
		var dummy func() error
		if cfg.Dummies != nil && i < len(cfg.Dummies) {
			dummy = cfg.Dummies[i]
		}
		ranks[i] = NewEngineRank(e, dummy, chains)
	}
	d, err := New(cfg, ranks)
	if err != nil {
		return nil, err
	}
	return &Frontend{d: d, engines: engines}, nil
}

// Process is this process's index and the number of processes.
func (x *Frontend) Process() (proc, procs int) { return x.d.Process() }

// Ranks is the number of ranks across every process.
func (x *Frontend) Ranks() int { return x.d.Ranks() }

// Deployment is the lockstep loop behind the front end (for its metrics).
func (x *Frontend) Deployment() *Deployment { return x.d }

// Submit queues r with the deployment and waits until a rank accepted it
// (or refused it: the rank's validation error comes back as from one
// engine). Across processes a request is validated here first, against
// this process's engine (every rank is built alike), so a bad one is
// refused before it travels.
func (x *Frontend) Submit(ctx context.Context, r *executor.Request) (*executor.Stream, error) {
	if proc, procs := x.d.Process(); proc != 0 {
		return nil, ErrNotFrontEnd
	} else if procs > 1 {
		if err := x.engines[0].Validate(r); err != nil {
			return nil, err
		}
	}
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
	for _, s := range x.RankSnapshots() {
		m.Merge(&s)
	}
	return m
}

// RankSnapshots is every rank's own snapshot, for per-rank metric series;
// a rank in another process contributes what it last sent (zero before
// its first).
func (x *Frontend) RankSnapshots() []executor.Metrics {
	proc, procs := x.d.Process()
	L := len(x.engines)
	out := make([]executor.Metrics, procs*L)
	for i := range out {
		if i/L == proc {
			out[i] = x.engines[i-proc*L].Snapshot()
		} else {
			out[i], _ = x.d.RemoteSnapshot(i)
		}
	}
	return out
}

// ReleaseProgram ends program id on whichever rank holds it; across
// processes, through the deployment's next iteration.
func (x *Frontend) ReleaseProgram(id string) (found bool, err error) {
	if _, procs := x.d.Process(); procs > 1 {
		return x.d.ReleaseProgram(context.Background(), id)
	}
	for _, e := range x.engines {
		f, err := e.ReleaseProgram(id)
		if err != nil {
			return false, err // executor.ErrNoPrograms: every rank is built alike
		}
		found = found || f
	}
	return found, nil
}

// ProgramStates sums the ranks' program states (those in other processes
// as last sent); nil without a program policy.
func (x *Frontend) ProgramStates() (map[string]int, uint64, uint64) {
	if m, _, _ := x.engines[0].ProgramStates(); m == nil {
		return nil, 0, 0 // every rank is built alike
	}
	var total map[string]int
	var pauses, resumes uint64
	for _, s := range x.RankSnapshots() {
		m, p, r := s.Programs.ByState(), s.Programs.Pauses, s.Programs.Resumes
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
