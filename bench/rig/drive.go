package rig

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/turnstile-llm/turnstile/executor"
)

// Engine is what a driver needs of the engine (executor.Engine satisfies it).
type Engine interface {
	Submit(ctx context.Context, r *executor.Request) (*executor.Stream, error)
	Step() (bool, error)
	Check() error
	Snapshot() executor.Metrics
}

// Drain takes what st has produced so far without blocking, passing each
// delta to seen; it returns the final delta when the request finished, else
// nil.
func Drain(st *executor.Stream, seen func(d *executor.Delta)) (*executor.Delta, error) {
	for {
		d, ok, err := st.TryRecv()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("stream ended without a final delta")
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, nil
		}
		seen(&d)
		if d.FinishReason != executor.FinishNone {
			return &d, nil
		}
	}
}

// DefaultMaxSteps bounds a driver's engine steps when its run sets no
// bound: a guard against a livelock, far above any row's steps.
const DefaultMaxSteps = 10_000_000

// maxSettleSteps bounds Settle: a finished workload leaves at most one
// step of teardown per request in flight, far below this.
const maxSettleSteps = 1000

// Settle steps e until it is idle, so requests still retiring (their
// finish learnt when their last step was processed) are torn down before
// the audit; their time is not part of the measurement.
func Settle(e Engine) error {
	for range maxSettleSteps {
		progressed, err := e.Step()
		if err != nil {
			return fmt.Errorf("engine step while settling: %w", err)
		}
		if !progressed {
			return nil
		}
	}
	return fmt.Errorf("engine still busy %d steps after the last request finished", maxSettleSteps)
}

// Idle audits an engine's metrics m after a driver settled it: no request
// running, waiting or retiring, and no seat or KV block held. The error is
// the reason, for the driver's audit.
func Idle(m executor.Metrics) error {
	switch {
	case m.Running+m.Waiting+m.Retiring != 0:
		return fmt.Errorf("engine still holds %d running, %d waiting, %d retiring requests", m.Running, m.Waiting, m.Retiring)
	case m.SeatsLive+m.SeatsRetiring != 0:
		return fmt.Errorf("leaked seats: %d live, %d retiring", m.SeatsLive, m.SeatsRetiring)
	case m.KVBlocksUsed != 0:
		return fmt.Errorf("leaked KV blocks: %d still referenced", m.KVBlocksUsed)
	}
	return nil
}
