package policy

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueries: the Controller answers what other packages ask of program
// state (Known, HasTurn, IDs, MostPinned, ByState) at each lifecycle point.
func TestQueries(t *testing.T) {
	r := newRig(t, DefaultConfig(BlockAccounting, 1), 64)
	type want struct {
		known, turn map[string]bool
		pinned      string // "" when none
	}
	assert := func(step string, w want) {
		t.Helper()
		for _, id := range []string{"a", "b", "nope"} {
			require.Equal(t, w.known[id], r.c.Known(id), "%s: Known(%q)", step, id)
			require.Equal(t, w.turn[id], r.c.HasTurn(id), "%s: HasTurn(%q)", step, id)
		}
		var ids []string
		for _, id := range []string{"a", "b"} {
			if w.known[id] {
				ids = append(ids, id)
			}
		}
		require.Equal(t, ids, r.c.IDs(nil), step)
		got, ok := r.c.MostPinned()
		require.Equal(t, w.pinned != "", ok, "%s: MostPinned", step)
		require.Equal(t, w.pinned, got, "%s: MostPinned", step)
	}
	m := r.c.Metrics()
	require.Equal(t, map[string]int{"waiting": 0, "active": 0, "paused": 0}, m.ByState())

	steps := []struct {
		name string
		do   func()
		want want
	}{
		{"a admitted", func() { require.True(t, r.admit("a", context(0, 0, 40))) },
			want{known: map[string]bool{"a": true}, turn: map[string]bool{"a": true}}},
		{"b waits (MaxActive 1)", func() { require.False(t, r.admit("b", context(1, 0, 40))) },
			want{known: map[string]bool{"a": true, "b": true}, turn: map[string]bool{"a": true, "b": true}}},
		{"a between turns, pinned", func() { r.end("a") },
			want{known: map[string]bool{"a": true, "b": true}, turn: map[string]bool{"b": true}, pinned: "a"}},
		{"a released, b resumed", func() { r.release("a"); r.tick() },
			want{known: map[string]bool{"b": true}, turn: map[string]bool{"b": true}}},
		{"b's turn ends unstarted, not pinned", func() { r.end("b") },
			want{known: map[string]bool{"b": true}, pinned: ""}},
	}
	for _, s := range steps {
		s.do()
		assert(s.name, s.want)
	}
	require.Equal(t, map[string]int{"waiting": 0, "active": 1, "paused": 0}, func() map[string]int {
		m := r.c.Metrics()
		return m.ByState()
	}())
	r.release("b")
	assert("all released", want{})
	r.drained()
}

// TestKnownConcurrent: Known may be called from any goroutine while the
// driver admits and ends programs (run under -race).
func TestKnownConcurrent(t *testing.T) {
	r := newRig(t, DefaultConfig(TokenAccounting, 4), 256)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = r.c.Known("p")
			}
		}
	}()
	for range 200 {
		_, err := r.c.Admit("p", 8, 0)
		require.NoError(t, err)
		require.NoError(t, r.c.TurnEnded("p"))
		require.True(t, r.c.Release("p"))
	}
	close(stop)
	wg.Wait()
	require.False(t, r.c.Known("p"))
}
