package executor

import (
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"
)

// stepUntil steps s's engine, with Check after each step, until done
// reports true (asked after each step), sleeping a millisecond between
// steps for what other goroutines deliver (aborts from context.AfterFunc);
// it fails after testwait.Bound naming what it waited for.
func stepUntil(t testing.TB, s *setup, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound)
	for {
		_, err := s.eng.Step()
		require.NoError(t, err)
		require.NoError(t, s.eng.Check())
		if done() {
			return
		}
		if time.Now().After(deadline) {
			require.FailNowf(t, "wait timed out", "stepped the engine for %v waiting for %s", testwait.Bound, what)
		}
		time.Sleep(time.Millisecond)
	}
}
