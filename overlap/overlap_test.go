package overlap

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"
)

// recorder executes jobs by appending them to a log, failing on job < 0.
type recorder struct {
	mu  sync.Mutex
	log []int
}

func (r *recorder) exec(job int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, job)
	if job < 0 {
		return fmt.Errorf("job %d failed", job)
	}
	return nil
}

func (r *recorder) snapshot() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.log...)
}

// waitDone is p.Wait bounded by testwait.Bound.
func waitDone(t *testing.T, p *Pipeline[int], what string) Done[int] {
	t.Helper()
	type res struct {
		d   Done[int]
		err error
	}
	r := testwait.Within(t, what, func() res { d, err := p.Wait(); return res{d, err} })
	require.NoError(t, r.err, what)
	return r.d
}

func TestPipelineOrder(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			rec := &recorder{}
			p, err := New(rec.exec, time.Now, async)
			require.NoError(t, err)
			require.Equal(t, async, p.Async())
			var got []int
			// The overlapped loop: launch n+1, then wait n.
			require.NoError(t, p.Launch(0))
			for n := 1; n < 50; n++ {
				require.NoError(t, p.Launch(n))
				require.Equal(t, 2, p.InFlight())
				d := waitDone(t, p, fmt.Sprintf("job %d's completion", n-1))
				require.NoError(t, d.Err)
				require.False(t, d.End.Before(d.Start))
				got = append(got, d.Job)
			}
			d := waitDone(t, p, "the last job's completion")
			got = append(got, d.Job)
			require.Equal(t, 0, p.InFlight())
			want := make([]int, 50)
			for i := range want {
				want[i] = i
			}
			require.Equal(t, want, got)
			require.Equal(t, want, rec.snapshot())
			p.Close()
		})
	}
}

func TestPipelineErrors(t *testing.T) {
	tests := []struct {
		name string
		run  func(p *Pipeline[int]) error
		want string
	}{
		{"wait with nothing in flight", func(p *Pipeline[int]) error { _, err := p.Wait(); return err }, "no job in flight"},
		{"third launch", func(p *Pipeline[int]) error {
			_ = p.Launch(1)
			_ = p.Launch(2)
			return p.Launch(3)
		}, "2 jobs in flight (max 2)"},
		{"launch after close", func(p *Pipeline[int]) error { p.Close(); return p.Launch(1) }, "closed"},
		{"exec error surfaces", func(p *Pipeline[int]) error {
			_ = p.Launch(-7)
			d, _ := p.Wait()
			return d.Err
		}, "job -7 failed"},
	}
	for _, tc := range tests {
		for _, async := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/async=%v", tc.name, async), func(t *testing.T) {
				rec := &recorder{}
				p, err := New(rec.exec, time.Now, async)
				require.NoError(t, err)
				defer p.Close()
				require.ErrorContains(t, testwait.Within(t, tc.name, func() error { return tc.run(p) }), tc.want)
			})
		}
	}
	_, err := New[int](nil, time.Now, true)
	require.Error(t, err)
	_, err = New(func(int) error { return nil }, nil, true)
	require.Error(t, err)
}

// TestPipelineOverlaps proves the host runs while a job executes: job 0
// blocks until the host, after launching job 1, releases it.
func TestPipelineOverlaps(t *testing.T) {
	gate := make(chan struct{})
	p, err := New(func(job int) error {
		if job == 0 {
			<-gate
		}
		return nil
	}, time.Now, true)
	require.NoError(t, err)
	require.NoError(t, p.Launch(0))
	require.NoError(t, testwait.Within(t, "Launch(1) while job 0 executes (it must not block behind it)",
		func() error { return p.Launch(1) }))
	close(gate)
	d0 := waitDone(t, p, "job 0's completion")
	d1 := waitDone(t, p, "job 1's completion")
	require.Equal(t, []int{0, 1}, []int{d0.Job, d1.Job})
	require.False(t, d1.Start.Before(d0.End), "jobs must not run concurrently")
	p.Close()
}

func TestPipelineCloseReopenNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	p, err := New(func(int) error { return nil }, time.Now, true)
	require.NoError(t, err)
	for round := range 3 {
		require.NoError(t, p.Launch(round))
		require.NoError(t, p.Launch(round))
		p.Close() // discards both in flight
		require.Equal(t, 0, p.InFlight())
		require.ErrorIs(t, p.Launch(0), ErrClosed)
		p.Reopen()
	}
	p.Close()
	p.Close()
	// Poll by hand: require.Eventually runs its condition on a goroutine.
	for i := 0; i < 1000 && runtime.NumGoroutine() > before; i++ {
		time.Sleep(time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "stream goroutine leaked")
	require.False(t, errors.Is(nil, ErrClosed))
}

func BenchmarkPipelineRoundTrip(b *testing.B) {
	for _, async := range []bool{false, true} {
		b.Run(fmt.Sprintf("async=%v", async), func(b *testing.B) {
			p, err := New(func(int) error { return nil }, time.Now, async)
			require.NoError(b, err)
			defer p.Close()
			require.NoError(b, p.Launch(0))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_ = p.Launch(i)
				_, _ = p.Wait()
			}
			_, _ = p.Wait()
		})
	}
}
