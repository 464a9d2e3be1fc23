package adp

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testWait bounds every wait in this package's tests. It is no timing
// assertion: generous on any machine, it only turns a hang (a seat released
// early, a deployment that never goes idle) into a failure naming what was awaited.
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
