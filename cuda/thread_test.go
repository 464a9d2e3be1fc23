package cuda

import (
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestThreadRunsOnOneOSThread(t *testing.T) {
	th := StartThread()
	var first int
	require.NoError(t, th.Do(func() error { first = syscall.Gettid(); return nil }))

	var wg sync.WaitGroup
	tids := make([]int, 16)
	for g := range tids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				require.NoError(t, th.Do(func() error { tids[g] = syscall.Gettid(); return nil }))
			}
		}()
	}
	wg.Wait()
	for g, tid := range tids {
		require.Equal(t, first, tid, "goroutine %d ran on another OS thread", g)
	}
	th.Close()
	th.Close()
	ran := false
	require.ErrorIs(t, th.Do(func() error { ran = true; return nil }), ErrClosed)
	require.False(t, ran)
}

func TestThreadReturnsError(t *testing.T) {
	th := StartThread()
	defer th.Close()
	want := &Error{Op: "cuInit", Code: 100}
	require.Same(t, want, th.Do(func() error { return want }))
	require.NoError(t, th.Do(func() error { return nil }))
}
