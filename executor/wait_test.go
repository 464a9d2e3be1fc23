package executor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testWait bounds every wait in this package's tests. It is no timing
// assertion: generous on any machine, it only turns a hang (a seat released
// early, a loop that never retires) into a failure naming what was awaited.
const testWait = 30 * time.Second

// waitCtx is a context that ends testWait from now (or with the test).
func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	return ctx
}

// recvWithin receives from ch, failing after testWait with what it awaited.
func recvWithin[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(testWait)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		require.FailNowf(t, "wait timed out", "waited %v for %s", testWait, what)
		var zero T
		return zero
	}
}

// stepUntil steps s's engine, with Check after each step, until done
// reports true (asked after each step), sleeping a millisecond between
// steps for what other goroutines deliver (aborts from context.AfterFunc);
// it fails after testWait naming what it waited for.
func stepUntil(t testing.TB, s *setup, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		_, err := s.eng.Step()
		require.NoError(t, err)
		require.NoError(t, s.eng.Check())
		if done() {
			return
		}
		if time.Now().After(deadline) {
			require.FailNowf(t, "wait timed out", "stepped the engine for %v waiting for %s", testWait, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFor polls cond (safe to call from the test goroutine while Run runs)
// every millisecond, failing after testWait naming what it waited for.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNowf(t, "wait timed out", "waited %v for %s", testWait, what)
		}
		time.Sleep(time.Millisecond)
	}
}
