package kernels

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkersHandoff runs many short jobs with every number of taking-part
// helpers, back to back (helpers spinning) and after idle gaps longer than
// the spin budgets (helpers parked), and checks each job's result, which
// the helpers write from Go (run with -race: the hand-off must order the
// job before the helpers and their writes before the caller).
func TestWorkersHandoff(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		calls int
		gap   time.Duration // idle time between rounds of calls
	}{
		{"one worker", 1, 200, 0},
		{"two back to back", 2, 2000, 0},
		{"two parked between calls", 2, 6, 2 * helperSpin},
		{"five back to back", 5, 1000, 0},
		{"five parked between calls", 5, 6, 2 * helperSpin},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := NewWorkers(c.n)
			defer w.Close()
			buf := make([]float32, 4099)
			for i := range buf {
				buf[i] = float32(i % 7)
			}
			var want float32
			for _, v := range buf {
				want += v
			}
			for i := 0; i < c.calls; i++ {
				// Vary the helpers taking part: some sit out a job and
				// must not touch it.
				cores := 1 + i%c.n
				got, err := w.ReadProbe(buf[:len(buf)-i%3], cores)
				require.NoError(t, err)
				exact := want
				for _, v := range buf[len(buf)-i%3:] {
					exact -= v
				}
				require.Equal(t, exact, got, "call %d on %d cores", i, cores)
				if c.gap > 0 {
					time.Sleep(c.gap)
				}
			}
		})
	}
}

// TestWorkersIdleParks checks that an idle pool stops spinning: after a
// call every helper and the caller's hand-off end up parked.
func TestWorkersIdleParks(t *testing.T) {
	w := NewWorkers(3)
	defer w.Close()
	_, err := w.ReadProbe(make([]float32, 1000), 3)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for i := range w.park {
			if !w.park[i].asleep.Load() {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "helpers still spinning long after the spin budget")
	// Parked helpers wake for the next job.
	s, err := w.ReadProbe([]float32{1, 2, 3, 4, 5}, 3)
	require.NoError(t, err)
	require.Equal(t, float32(15), s)
}

// TestWorkersClose checks that Close stops every helper, spinning or
// parked, that later calls fail with ErrClosed, and that Close twice is fine.
func TestWorkersClose(t *testing.T) {
	for _, parked := range []bool{false, true} {
		t.Run(fmt.Sprintf("parked=%v", parked), func(t *testing.T) {
			before := runtime.NumGoroutine()
			w := NewWorkers(4)
			_, err := w.ReadProbe(make([]float32, 100), 4)
			require.NoError(t, err)
			if parked {
				time.Sleep(2 * helperSpin)
			}
			w.Close()
			w.Close()
			_, err = w.ReadProbe(make([]float32, 100), 1)
			require.ErrorIs(t, err, ErrClosed)
			require.ErrorIs(t, w.MatMul(make([]float32, 2), make([]float32, 2), 1, Matrix{Type: F32, Rows: 2, Cols: 2, Data: make([]byte, 16)}), ErrClosed)
			// quit.Wait has returned, so the helpers are past their last
			// statement; give the runtime a moment to retire them. (Not
			// require.Eventually: it counts a goroutine of its own.)
			left := runtime.NumGoroutine() - before
			for i := 0; i < 10000 && left > 0; i++ {
				time.Sleep(time.Millisecond)
				left = runtime.NumGoroutine() - before
			}
			require.LessOrEqual(t, left, 0, "goroutines left running after Close")
		})
	}
}

// A wake that arrives late, after its condition was already consumed,
// must not end the next wait: the sleeper re-checks and parks again. (A
// helper finishing one job can be preempted between its last pending
// decrement and waking the caller, which by then waits for the next job.)
func TestParkerLateWakeDoesNotEndTheWait(t *testing.T) {
	p := parker{ch: make(chan struct{}, 1)}
	var ready atomic.Bool
	returned := make(chan bool, 1)
	go func() {
		p.sleep(ready.Load)
		returned <- ready.Load()
	}()
	waitAsleep := func() {
		for !p.asleep.Load() {
			select {
			case r := <-returned:
				require.FailNow(t, "sleep returned", "ready=%v", r)
			default:
				runtime.Gosched()
			}
		}
	}
	waitAsleep()
	p.wake() // late: the condition does not hold
	waitAsleep()
	ready.Store(true)
	p.wake()
	require.True(t, <-returned, "sleep returned before its condition held")
}

// TestRegionTakes claims one region's tiles from the front (its owner) and
// from the back (thieves) at once and checks that every tile is claimed
// exactly once, whatever the interleaving (run with -race).
func TestRegionTakes(t *testing.T) {
	for _, c := range []struct{ lo, hi, thieves int }{
		{0, 0, 1}, {3, 4, 1}, {0, 1000, 1}, {7, 5000, 3}, {1 << 20, 1<<20 + 999, 2},
	} {
		t.Run(fmt.Sprintf("[%d,%d)/%d", c.lo, c.hi, c.thieves), func(t *testing.T) {
			var r region
			r.set(c.lo, c.hi)
			claims := make([]atomic.Int32, c.hi-c.lo)
			front := make(chan int, 1)
			var done atomic.Int32
			grab := func(back bool) int {
				n := 0
				for {
					i, ok := r.take(back)
					if !ok {
						return n
					}
					if i < c.lo || i >= c.hi {
						t.Errorf("claimed tile %d outside [%d,%d)", i, c.lo, c.hi)
						return n
					}
					claims[i-c.lo].Add(1)
					n++
				}
			}
			go func() { front <- grab(false) }()
			for range c.thieves {
				go func() { grab(true); done.Add(1) }()
			}
			<-front
			for done.Load() < int32(c.thieves) {
				runtime.Gosched()
			}
			for i := range claims {
				require.EqualValues(t, 1, claims[i].Load(), "tile %d", c.lo+i)
			}
			_, ok := r.take(false)
			require.False(t, ok, "an emptied region has no tile left")
		})
	}
}
