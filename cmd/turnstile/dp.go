package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnstile-llm/turnstile/adp"
	"github.com/turnstile-llm/turnstile/executor"
)

// maxDP bounds --dp: every rank is an engine with its own KV cache, seats and
// runner in this process.
const maxDP = 64

// dpEngine serves an attention-DP deployment through the server's Engine
// interface: requests are routed by the deployment's one gather point,
// metrics are the ranks' snapshots merged.
type dpEngine struct {
	d       *adp.Deployment
	engines []*executor.Engine
}

// Submit queues r with the deployment and waits until a rank accepted it
// (or refused it: the rank's validation error comes back as from one engine).
func (x *dpEngine) Submit(ctx context.Context, r *executor.Request) (*executor.Stream, error) {
	st, err := x.d.SubmitStream(ctx, r)
	if err != nil {
		return nil, err
	}
	es, ok := st.(*executor.Stream)
	if !ok {
		return nil, fmt.Errorf("serve: rank returned a %T stream, want *executor.Stream", st)
	}
	return es, nil
}

// Snapshot merges every rank's metrics.
func (x *dpEngine) Snapshot() executor.Metrics {
	var m executor.Metrics
	for _, e := range x.engines {
		s := e.Snapshot()
		m.Merge(&s)
	}
	return m
}

// RankSnapshots is every rank's own snapshot, for per-rank /metrics series.
func (x *dpEngine) RankSnapshots() []executor.Metrics {
	out := make([]executor.Metrics, len(x.engines))
	for i, e := range x.engines {
		out[i] = e.Snapshot()
	}
	return out
}

// ReleaseProgram ends program id on whichever rank holds it.
func (x *dpEngine) ReleaseProgram(id string) (found bool, err error) {
	for _, e := range x.engines {
		f, err := e.ReleaseProgram(id)
		if err != nil {
			return false, err // ErrNoPrograms: every rank is built alike
		}
		found = found || f
	}
	return found, nil
}

// ProgramStates sums the ranks' program states.
func (x *dpEngine) ProgramStates() (map[string]int, uint64, uint64) {
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
func (x *dpEngine) Run(ctx context.Context) error { return x.d.Run(ctx) }

// Check verifies the deployment's and every rank's accounting.
func (x *dpEngine) Check() error {
	errs := []error{x.d.Check()}
	for i, e := range x.engines {
		if err := e.Check(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
