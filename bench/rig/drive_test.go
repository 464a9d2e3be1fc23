package rig

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
)

// stepper is an engine whose Step reports progress for busy steps, then an
// optional error, then idleness.
type stepper struct {
	busy, steps int
	err         error
}

func (s *stepper) Submit(context.Context, *executor.Request) (*executor.Stream, error) {
	return nil, errors.New("not used")
}
func (s *stepper) Check() error               { return nil }
func (s *stepper) Snapshot() executor.Metrics { return executor.Metrics{} }
func (s *stepper) Step() (bool, error) {
	s.steps++
	if s.steps <= s.busy {
		return true, nil
	}
	return false, s.err
}

func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		e     *stepper
		want  string
		steps int
	}{
		{"idle at once", &stepper{}, "", 1},
		{"three steps of teardown", &stepper{busy: 3}, "", 4},
		{"never idle", &stepper{busy: 1 << 30}, "still busy 1000 steps", maxSettleSteps},
		{"step error", &stepper{busy: 2, err: errors.New("boom")}, "engine step while settling: boom", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Settle(tc.e)
			if tc.want == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.want)
			}
			require.Equal(t, tc.steps, tc.e.steps)
		})
	}
}

func TestIdle(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    executor.Metrics
		want string
	}{
		{"idle", executor.Metrics{Steps: 3, GeneratedTokens: 9}, ""},
		{"running", executor.Metrics{Running: 1, Waiting: 2}, "engine still holds 1 running, 2 waiting, 0 retiring requests"},
		{"retiring", executor.Metrics{Retiring: 1}, "engine still holds 0 running, 0 waiting, 1 retiring requests"},
		{"seat", executor.Metrics{SeatsRetiring: 2}, "leaked seats: 0 live, 2 retiring"},
		{"block", executor.Metrics{KVBlocksUsed: 4}, "leaked KV blocks: 4 still referenced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Idle(tc.m)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
		})
	}
}
