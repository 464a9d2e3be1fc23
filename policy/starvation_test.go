package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStarvation: a large program (900 tokens) arrives behind a stream of
// small ones (200 tokens, one 1 s turn each). Capacity 1,024 tokens, no
// buffer: five small ones run (1,000), one more is queued, and each one that
// leaves is replaced by a new arrival, so small ones are always queued; the
// large one fits only when all running ones have left.
//
// With aging, the large program's effective size 900 / (1 + w/τ) must drop
// below a queued small one's 200 / (1 + ws/τ), where ws ≤ Ws, the longest
// any small one waits: that happens after w = 3.5 τ (Ws = 0) and by
// w = τ × (4.5 × (1 + Ws/τ) − 1) = 3.5 τ + 4.5 Ws. From then it heads the
// queue, nothing overtakes it, and the running small ones drain within
// their 1 s turn: it is admitted by 3.5 τ + 4.5 Ws + 1 s + one 50 ms step
// (decisions are made at step boundaries). Without aging (τ = 0) small ones
// always win and it waits for the forced resume.
func TestStarvation(t *testing.T) {
	const (
		step   = 50 * time.Millisecond
		turn   = time.Second
		forced = 10 * time.Minute
	)
	for _, tc := range []struct {
		name   string
		tau    time.Duration
		forced uint64
	}{
		{"aging", 10 * time.Second, 0},
		{"no aging", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallCfg(TokenAccounting, 64)
			cfg.AgingTau, cfg.ForcedResume = tc.tau, forced
			r := newRig(t, cfg, 64) // 1,024 tokens
			var now, maxSmallWait time.Duration
			arrivals := map[string]time.Duration{} // small ones queued, by arrival
			ends := map[string]time.Duration{}     // small ones running, by turn end
			n := 0
			small := func() {
				id := fmt.Sprint("s", n)
				n++
				if r.admitNoKV(id, 200) {
					ends[id] = now + turn
				} else {
					arrivals[id] = now
				}
			}
			// Five small ones staggered by a quarter turn, then one queued.
			for range 5 {
				small()
				now += turn / 4
				r.clk.advance(turn / 4)
			}
			small()
			require.Len(t, arrivals, 1)
			arrived := now
			require.False(t, r.admitNoKV("L", 900))
			var admitted time.Duration
			for admitted == 0 {
				require.Less(t, now, forced+time.Minute, "the large program starved")
				now += step
				r.clk.advance(step)
				for id, e := range ends {
					if e <= now { // its turn is over: it leaves, a new one arrives
						r.end(id)
						r.release(id)
						delete(ends, id)
						small()
					}
				}
				for _, id := range r.tick().Resumed {
					if id == "L" {
						admitted = now - arrived
						continue
					}
					ok, err := r.c.Admit(id, 200, 0)
					require.NoError(t, err)
					require.True(t, ok)
					r.check()
					maxSmallWait = max(maxSmallWait, now-arrivals[id])
					delete(arrivals, id)
					ends[id] = now + turn
				}
			}
			t.Logf("%s: the large program waited %v; small ones served %d, waited at most %v",
				tc.name, admitted, n, maxSmallWait)
			require.Equal(t, tc.forced, r.c.Metrics().ForcedResumes)
			require.Equal(t, admitted, r.c.Metrics().AdmissionWaitMax)
			if tc.tau == 0 {
				require.GreaterOrEqual(t, admitted, forced)
				require.LessOrEqual(t, admitted, forced+step)
				return
			}
			tau := tc.tau.Seconds()
			lower := time.Duration(3.5 * tau * float64(time.Second))
			bound := time.Duration((3.5*tau+4.5*maxSmallWait.Seconds())*float64(time.Second)) + turn + step
			require.Greater(t, admitted, lower)
			require.LessOrEqual(t, admitted, bound)
		})
	}
}

// admitNoKV asks for a turn with no KV behind it (A's accounting needs none).
func (r *rig) admitNoKV(id string, tokens int) bool {
	r.tb.Helper()
	ok, err := r.c.Admit(id, tokens, 0)
	require.NoError(r.tb, err)
	r.check()
	return ok
}
