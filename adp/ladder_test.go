package adp

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
)

// mode is one arm of seed 004's experiment.
type mode struct {
	name            string
	overlap, charge bool
}

var (
	modeBASE   = mode{"BASE", true, true}
	modeFIX    = mode{"FIX", true, false}
	modeOVLOFF = mode{"OVLOFF", false, false}
)

// ladder is a deployment of context-only simulated ranks with max batch 2.
type ladder struct {
	d     *Deployment
	ranks []*ctxRank
}

// newLadder builds dp ranks; late(i) says whether rank i's retiring
// requests are still resident at the gather (nil: every rank).
func newLadder(t testing.TB, dp int, m mode, p Ablation, late func(int) bool) *ladder {
	t.Helper()
	l := &ladder{}
	ranks := make([]Rank, dp)
	for i := range ranks {
		r := newCtxRank(2, m.overlap, m.charge)
		r.early = late != nil && !late(i)
		l.ranks = append(l.ranks, r)
		ranks[i] = r
	}
	p.Engine.ChargeRetiring = m.charge
	d, err := New(Config{Ablation: p}, ranks)
	require.NoError(t, err)
	l.d = d
	return l
}

func (l *ladder) submit(t testing.TB, n int) []*Handle {
	hs := make([]*Handle, n)
	for i := range hs {
		h, err := l.d.Submit(context.Background(), &executor.Request{PromptTokens: []int32{int32(i % 97), 1, 2, 3, 4, 5, 6, 7}, MaxTokens: 1})
		require.NoError(t, err)
		hs[i] = h
	}
	return hs
}

func (l *ladder) finished() int {
	n := 0
	for _, r := range l.ranks {
		n += r.finished
	}
	return n
}

// routedShare is rank 0's routing share so far, from the deployment's
// metrics: requests routed to rank 0, and to every rank.
func routedShare(d *Deployment) [2]int {
	m := d.Snapshot()
	return [2]int{int(m.Ranks[0].Routed), int(m.Routed)}
}

// k, as in the seed, counts the ranks whose retiring requests are charged at
// the gather (under FIX they are held but not charged, so k = 0).
//
// rungs are the routing shares seed 004 derives for dp ranks of max batch 2:
// 1/dp (k = 0), and for k ranks holding a retiring request at the gather
// 1/(2dp-k) on a penalised rank, 2/(2dp-k) on an unpenalised one.
func rungs(dp int) [][2]int {
	r := [][2]int{{1, dp}}
	for k := 1; k <= dp; k++ {
		r = append(r, [2]int{1, 2*dp - k})
		if k < dp {
			r = append(r, [2]int{2, 2*dp - k})
		}
	}
	return r
}

// onRung reports whether a/b is within dp requests of a rung (rank 0 one
// off, and each other rank one off the total, mid-cycle).
func onRung(dp, a, b int) bool {
	for _, q := range rungs(dp) {
		// |a - b*num/den| <= dp
		if d := a*q[1] - b*q[0]; d <= dp*q[1] && d >= -dp*q[1] {
			return true
		}
	}
	return false
}

// lateRanks returns late(i) for k late ranks, the first k or the last k.
func lateRanks(dp, k int, first bool) func(int) bool {
	return func(i int) bool {
		if first {
			return i < k
		}
		return i >= dp-k
	}
}

// TestLadder runs the saturated context-only workload with k ranks whose
// retiring requests are resident at the gather, and checks at every gather
// the mechanism (each rank is admitted its capacity minus what the policy
// charges; where every rank holds at most one, the shares are exactly the
// rungs), and at the end rank 0's share as read from its log line: under
// BASE 1/(2dp-k) when rank 0 is penalised, 2/(2dp-k) when it is not, 1/dp
// for k = 0; under FIX and OVLOFF 1/dp, with FIX's per-rank counts equal to
// OVLOFF's.
func TestLadder(t *testing.T) {
	for _, dp := range []int{2, 4} {
		for k := 0; k <= dp; k++ {
			for _, first := range []bool{true, false} {
				for _, warm := range []int{0, 2*dp - 1} { // 2dp-1: one rank starts with a lone request
					name := fmt.Sprintf("dp=%d/k=%d/first=%v/warm=%d", dp, k, first, warm)
					routed := map[string][]uint64{}
					for _, m := range []mode{modeBASE, modeFIX, modeOVLOFF} {
						t.Run(name+"/"+m.name, func(t *testing.T) {
							routed[m.name] = runLadderChecked(t, dp, k, first, warm, m)
						})
					}
					require.Equal(t, routed["OVLOFF"], routed["FIX"], "%s: FIX's per-rank request counts equal OVLOFF's exactly", name)
				}
			}
		}
	}
}

func runLadderChecked(t *testing.T, dp, k int, first bool, warm int, m mode) []uint64 {
	late := lateRanks(dp, k, first)
	l := newLadder(t, dp, m, Ablation{}, late)
	total := 40 * 2 * dp
	if warm > 0 {
		l.submit(t, warm)
		_, err := l.d.Step()
		require.NoError(t, err)
		require.NoError(t, l.d.Check())
	}
	l.submit(t, total-warm)
	prev := l.d.Snapshot()
	var satA, satB int
	for it := 0; l.finished() < total; it++ {
		require.Less(t, it, 10*total, "no progress")
		queued := l.d.Snapshot().Queued
		_, err := l.d.Step()
		require.NoError(t, err)
		require.NoError(t, l.d.Check())
		m2 := l.d.Snapshot()
		if queued < 2*dp { // the queue no longer saturates every rank
			prev = m2
			continue
		}
		s := routedShare(l.d)
		satA, satB = s[0], s[1]
		kg, worst := 0, 0 // k at this gather: ranks whose retiring requests are charged
		for i := range m2.Ranks {
			r := &m2.Ranks[i]
			got := int(r.Routed - prev.Ranks[i].Routed)
			charged := 0
			if m.charge {
				charged = r.Retiring
			}
			require.Equal(t, 2-charged, got, "rank %d at iteration %d holds %d retiring", i, it, r.Retiring)
			if charged > 0 {
				kg++
			}
			worst = max(worst, charged)
			if !m.overlap || !late(i) {
				require.Zero(t, r.Retiring, "rank %d: nothing retiring at the gather", i)
			}
		}
		if worst <= 1 && m2.Routed > prev.Routed {
			// The seed's idealisation holds at this gather: its shares are
			// exactly the rungs for kg.
			require.Equal(t, 2*dp-kg, int(m2.Routed-prev.Routed))
			want0 := 2
			if m2.Ranks[0].Retiring == 1 && m.charge {
				want0 = 1
			}
			require.Equal(t, want0, int(m2.Ranks[0].Routed-prev.Ranks[0].Routed))
		}
		prev = m2
	}
	require.NotZero(t, satB, "the run saturated the ranks")
	// Rank 0's routing share from the metrics, within one request.
	num, den := 1, dp
	if m.charge && m.overlap && k > 0 {
		num, den = 2, 2*dp-k
		if late(0) {
			num = 1
		}
	}
	// Rank 0's count may be one off the rung's average, and each of the k
	// late ranks one more, depending on where in its 2,0 cycle the run is.
	require.LessOrEqual(t, abs(satA*den-satB*num), den+num*k, "%s: rank-0 share %d/%d, want %d/%d", m.name, satA, satB, num, den)
	require.True(t, onRung(dp, satA, satB), "rank-0 share %d/%d is on no rung of dp=%d", satA, satB, dp)
	require.Equal(t, total, routedShare(l.d)[1], "every request routed")
	var per []uint64
	for i, r := range l.d.Snapshot().Ranks {
		per = append(per, r.Routed)
		if !m.overlap || !late(i) {
			require.Zero(t, r.GathersRetiring, "rank %d never shows a retiring request at a gather", i)
		} else {
			require.Positive(t, r.GathersRetiring, "rank %d is late", i)
		}
		require.Equal(t, r.Steps, l.d.Snapshot().Iterations, "every rank steps every iteration")
		require.Equal(t, uint64(l.ranks[i].steps), r.Steps)
	}
	require.NoError(t, l.d.Close())
	return per
}

// TestLadderThroughput checks the seed's capacity model: with k penalised
// ranks BASE runs at (2dp-k)/(2dp) of FIX, and FIX at OVLOFF's rate.
func TestLadderThroughput(t *testing.T) {
	for _, dp := range []int{2, 4} {
		for _, k := range []int{1, dp} {
			rate := map[string]float64{}
			for _, m := range []mode{modeBASE, modeFIX, modeOVLOFF} {
				rate[m.name], _ = ladderRate(t, dp, k, m, Ablation{})
			}
			want := float64(2*dp-k) / float64(2*dp)
			require.InEpsilon(t, want, rate["BASE"]/rate["FIX"], 0.03, "dp=%d k=%d", dp, k)
			require.InEpsilon(t, rate["OVLOFF"], rate["FIX"], 0.03, "dp=%d k=%d: FIX at OVLOFF's rate", dp, k)
		}
	}
}

// ladderRate runs the saturated ladder workload (the first k ranks late) to
// completion: requests per virtual second and per-rank routed counts.
func ladderRate(t testing.TB, dp, k int, m mode, p Ablation) (float64, []uint64) {
	l := newLadder(t, dp, m, p, lateRanks(dp, k, true))
	// dp-1 more than whole iterations: the last gather places a partial
	// set, where placement (not admission) decides.
	total := 100*2*dp + dp - 1
	l.submit(t, total)
	deadline := time.Now().Add(testwait.Bound)
	for l.finished() < total {
		require.True(t, time.Now().Before(deadline), "stepped for %v waiting for %d requests to finish (%d did)",
			testwait.Bound, total, l.finished())
		_, err := l.d.Step()
		require.NoError(t, err)
	}
	var per []uint64
	for _, r := range l.d.Snapshot().Ranks {
		per = append(per, r.Routed)
	}
	require.NoError(t, l.d.Close())
	return float64(total) / l.ranks[0].clock.Elapsed().Seconds(), per
}

// TestRetiringOnlyRankNeverBlocks: a rank whose only request is retiring
// keeps stepping until its teardown (a deadline proves it), and a deployment
// with nothing live blocks instead of spinning.
func TestRetiringOnlyRankNeverBlocks(t *testing.T) {
	for _, m := range []mode{modeBASE, modeFIX, modeOVLOFF} {
		t.Run(m.name, func(t *testing.T) {
			l := newLadder(t, 2, m, Ablation{}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- l.d.Run(runCtx) }()

			h := l.submit(t, 1)[0]
			s, err := h.Wait(ctx)
			require.NoError(t, err)
			d, err := s.ReadAll(ctx)
			require.NoError(t, err, "the request must finish before the deadline")
			require.Equal(t, executor.FinishLength, d.FinishReason)

			// Idle now: the loop must block, not spin.
			require.Eventually(t, func() bool { return l.d.Snapshot().IdleWaits > 0 }, 5*time.Second, time.Millisecond)
			it := l.d.Snapshot().Iterations
			time.Sleep(50 * time.Millisecond)
			require.Equal(t, it, l.d.Snapshot().Iterations, "an idle deployment blocks (no busy loop)")

			// And wakes for new work.
			h = l.submit(t, 1)[0]
			s, err = h.Wait(ctx)
			require.NoError(t, err)
			_, err = s.ReadAll(ctx)
			require.NoError(t, err, "the request after idle must finish before the deadline")
			stop()
			require.NoError(t, testwait.Recv(t, done, "Run to return after its context ended"))
		})
	}
}

// TestCancelledWhileQueued: a cancelled queued request is dropped and
// counted; accounting stays exact.
func TestCancelledWhileQueued(t *testing.T) {
	l := newLadder(t, 2, modeFIX, Ablation{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var hs []*Handle
	for i := 0; i < 10; i++ {
		h, err := l.d.Submit(ctx, &executor.Request{PromptTokens: []int32{1, 2}, MaxTokens: 1})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	_, err := l.d.Step() // routes 4 of 10
	require.NoError(t, err)
	require.NoError(t, l.d.Check())
	cancel()
	_, err = l.d.Step()
	require.NoError(t, err)
	require.NoError(t, l.d.Check())
	m := l.d.Snapshot()
	require.Equal(t, uint64(4), m.Routed)
	require.Equal(t, uint64(6), m.Cancelled)
	_, err = hs[9].Wait(testwait.Ctx(t))
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, l.d.Close())
	_, err = l.d.Submit(context.Background(), &executor.Request{PromptTokens: []int32{1}})
	require.ErrorIs(t, err, ErrClosed)
}

func TestNewValidation(t *testing.T) {
	_, err := New(Config{}, nil)
	require.ErrorContains(t, err, "at least one rank")
	_, err = New(Config{}, []Rank{newCtxRank(2, true, false), nil})
	require.ErrorContains(t, err, "rank 1 is nil")
	_, err = New(Config{}, []Rank{newCtxRank(0, true, false)})
	require.ErrorContains(t, err, "rank 0 reports capacity 0")
	_, err = New(Config{MaxPlaced: -1}, []Rank{newCtxRank(2, true, false)})
	require.ErrorContains(t, err, "MaxPlaced must be >= 0, got -1")
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestRunStopsOnRankError: a rank's step error ends Run with an error naming
// the rank, the deployment closes, queued requests fail with ErrClosed, and
// no goroutine is left behind.
func TestRunStopsOnRankError(t *testing.T) {
	before := runtime.NumGoroutine()
	l := newLadder(t, 3, modeFIX, Ablation{}, nil)
	l.ranks[1].failAt = 3
	hs := l.submit(t, 40)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := l.d.Run(ctx)
	require.ErrorContains(t, err, "adp: rank 1: device lost at step 3")
	_, err = hs[len(hs)-1].Wait(ctx)
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, l.d.Check())
	_, err = l.d.Step()
	require.ErrorIs(t, err, ErrClosed)
	// Polled here, not with require.Eventually, which runs its condition on
	// a goroutine of its own.
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; {
		require.True(t, time.Now().Before(deadline), "rank goroutines end with the deployment: %d > %d", runtime.NumGoroutine(), before)
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentClients: many goroutines submit and read streams while Run
// drives the ranks and others read snapshots; every request completes and
// the accounting is exact afterwards.
func TestConcurrentClients(t *testing.T) {
	l := newLadder(t, 4, modeFIX, Ablation{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.d.Run(runCtx) }()
	const clients, each = 8, 25
	errs := make(chan error, clients+1)
	for c := 0; c < clients; c++ {
		go func() {
			for i := 0; i < each; i++ {
				s, err := l.d.SubmitStream(ctx, &executor.Request{PromptTokens: []int32{int32(c), int32(i), 3}, MaxTokens: 1})
				if err == nil {
					_, err = s.ReadAll(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	go func() {
		for ctx.Err() == nil && runCtx.Err() == nil {
			m := l.d.Snapshot()
			if m.Routed > m.Submitted {
				errs <- fmt.Errorf("snapshot routed %d of %d submitted", m.Routed, m.Submitted)
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	for c := 0; c < clients; c++ {
		require.NoError(t, testwait.Recv(t, errs, fmt.Sprintf("client %d of %d to finish its requests", c+1, clients)))
	}
	stop()
	require.NoError(t, testwait.Recv(t, done, "Run to return after its context ended"))
	require.NoError(t, l.d.Check())
	m := l.d.Snapshot()
	require.Equal(t, uint64(clients*each), m.Routed)
	// How the requests spread is timing (a client whose request finished
	// in one step leaves every rank idle, and ties place on rank 0), so
	// only the sum is asserted.
	var sum uint64
	for _, r := range m.Ranks {
		sum += r.Routed
	}
	require.Equal(t, m.Routed, sum)
}
