package sim

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/clock"
)

func TestLockstepTakesTheSlowestRank(t *testing.T) {
	origin := time.Unix(100, 0)
	shared := clock.NewVirtual(origin)
	ls, err := NewLockstep(shared, 3)
	require.NoError(t, err)
	iterations := []struct {
		spend []time.Duration // per rank; 0 is a dummy step
		want  time.Duration
	}{
		{[]time.Duration{2 * time.Millisecond, 5 * time.Millisecond, time.Millisecond}, 5 * time.Millisecond},
		{[]time.Duration{0, 0, 3 * time.Millisecond}, 3 * time.Millisecond},
		{[]time.Duration{0, 0, 0}, 0},
	}
	total := time.Duration(0)
	for n, it := range iterations {
		var wg sync.WaitGroup
		for i, d := range it.spend {
			c, err := ls.Rank(i)
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Two sleeps per step, as a runner charging device then host.
				_ = c.Sleep(context.Background(), d/2)
				_ = c.Sleep(context.Background(), d-d/2)
			}()
		}
		wg.Wait()
		for i, d := range it.spend {
			c, _ := ls.Rank(i)
			require.Equal(t, origin.Add(total+d), c.Now(), "rank %d sees its own progress in iteration %d", i, n)
		}
		got, err := ls.End()
		require.NoError(t, err)
		require.Equal(t, it.want, got)
		total += it.want
		require.Equal(t, origin.Add(total), shared.Now())
		for i := range it.spend {
			c, _ := ls.Rank(i)
			require.Equal(t, shared.Now(), c.Now(), "rank %d realigned", i)
		}
	}

	_, err = NewLockstep(nil, 2)
	require.ErrorContains(t, err, "shared virtual clock")
	_, err = NewLockstep(shared, 0)
	require.ErrorContains(t, err, "0 ranks")
	_, err = ls.Rank(3)
	require.ErrorContains(t, err, "rank 3 outside [0, 3)")
	c, _ := ls.Rank(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, c.Sleep(ctx, time.Second), context.Canceled)
}
