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
