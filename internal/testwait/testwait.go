// Package testwait bounds the waits of tests: a channel receive, a
// goroutine's result, a polled condition or a context each fail after Bound
// with a message naming what was awaited, instead of hanging until the
// package's timeout. It is no timing assertion: Bound is generous on any
// machine and only turns a hang (a seat released early, a loop that never
// retires) into a named failure. Only tests import it.
package testwait

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Bound is how long any one wait may take.
const Bound = 30 * time.Second

// Ctx is a context that ends Bound from now, or when the test ends.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Bound)
	t.Cleanup(cancel)
	return ctx
}

// Recv receives from ch, failing after Bound with what it awaited.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(Bound)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		require.FailNowf(t, "wait timed out", "waited %v for %s", Bound, what)
		var zero T
		return zero
	}
}

// Within runs f on its own goroutine and returns its result, failing after
// Bound with what it awaited. f must not touch t.
func Within[R any](t testing.TB, what string, f func() R) R {
	t.Helper()
	ch := make(chan R, 1)
	go func() { ch <- f() }()
	return Recv(t, ch, what)
}

// For polls cond every millisecond until it holds, failing after Bound
// naming what it waited for. cond runs on the test's goroutine.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Bound)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNowf(t, "wait timed out", "waited %v for %s", Bound, what)
		}
		time.Sleep(time.Millisecond)
	}
}
