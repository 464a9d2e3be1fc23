package clock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestVirtual(t *testing.T) {
	origin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		steps   []time.Duration
		want    time.Duration
		wantErr bool
	}{
		{"none", nil, 0, false},
		{"several", []time.Duration{time.Millisecond, 2 * time.Second, 0}, 2*time.Second + time.Millisecond, false},
		{"negative refused", []time.Duration{time.Second, -time.Nanosecond}, time.Second, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVirtual(origin)
			var err error
			for _, d := range tc.steps {
				if e := v.Advance(d); e != nil {
					err = e
				}
			}
			if tc.wantErr {
				require.ErrorContains(t, err, "-1ns")
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, v.Elapsed())
			require.Equal(t, origin.Add(tc.want), v.Now())
		})
	}
}

func TestVirtualSleep(t *testing.T) {
	v := NewVirtual(time.Unix(0, 0))
	require.NoError(t, v.Sleep(context.Background(), 3*time.Millisecond))
	require.NoError(t, v.Sleep(context.Background(), -time.Second))
	require.Equal(t, 3*time.Millisecond, v.Elapsed())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, v.Sleep(ctx, time.Second), context.Canceled)
	require.Equal(t, 3*time.Millisecond, v.Elapsed(), "a cancelled sleep must not advance")
}

func TestVirtualConcurrent(t *testing.T) {
	v := NewVirtual(time.Unix(0, 0))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := v.Now()
			for range 1000 {
				require.NoError(t, v.Advance(time.Microsecond))
				now := v.Now()
				require.False(t, now.Before(last))
				last = now
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 8000*time.Microsecond, v.Elapsed())
}

func TestReal(t *testing.T) {
	var c Clock = Real{}
	before := time.Now()
	require.NoError(t, c.Sleep(context.Background(), time.Millisecond))
	require.False(t, c.Now().Before(before.Add(time.Millisecond)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, c.Sleep(ctx, time.Hour), context.Canceled)
	require.ErrorIs(t, c.Sleep(ctx, 0), context.Canceled)
}
