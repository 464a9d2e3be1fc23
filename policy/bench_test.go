package policy

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/kvpool"
)

// BenchmarkStepBoundary measures the Controller's work at one step boundary
// with 2,000 programs over 64 ranks' worth of blocks (64 × 29,296 blocks of
// 16 tokens): Tick (observing the growth of 256 running turns by one token
// each), one turn ending (its blocks pinned) and one ACTING program's next
// turn admitted and started (its blocks counted, its pin dropped). Contexts
// are 16,384 tokens sharing 90%. ns/op includes the engine's own kvpool
// work (appends, releases); policy-ns/step is the Controller's calls alone
// (wall), policy-cpu-ns/step the same in thread CPU time, which on a shared
// machine is the figure to read. Goal: ≤ 50 µs per step boundary.
func BenchmarkStepBoundary(b *testing.B) {
	const (
		programs = 2000
		running  = 256
		total    = 16_384
		shared   = 921 * seedBlockSize
	)
	for _, arm := range []Accounting{TokenAccounting, BlockAccounting, PausingAccounting} {
		b.Run(arm.String(), func(b *testing.B) {
			clk := newClock()
			pool, err := kvpool.New(kvpool.Config{NumBlocks: 64 * seedBlocks, BlockSize: seedBlockSize})
			require.NoError(b, err)
			cfg := DefaultConfig(arm, programs)
			cfg.Clock = clk
			c, err := New(cfg, pool)
			require.NoError(b, err)
			ctxs := make([][]int32, programs)
			ids := make([]string, programs)
			seqs := map[string]kvpool.SeqID{}
			var run, acting []string // ACTIVE programs: running turns, between turns
			start := func(id string, toks []int32) {
				seq := pool.NewSeq(testKeys)
				hit, err := pool.MatchPrefix(seq, toks)
				require.NoError(b, err)
				require.NoError(b, pool.Append(seq, toks[hit:]))
				require.NoError(b, c.Started(id, seq))
				seqs[id] = seq
			}
			for i := range programs {
				// Room for the tokens its turns generate: the harness itself
				// does not allocate in the loop.
				ids[i], ctxs[i] = fmt.Sprint("p", i), slices.Grow(context(i, shared, total), 4096)
				ok, err := c.Admit(ids[i], total, pool.PeekPrefix(testKeys, ctxs[i]))
				require.NoError(b, err)
				if ok {
					start(ids[i], ctxs[i])
					run = append(run, ids[i])
				}
			}
			for len(run) > running {
				id := run[0]
				run = run[1:]
				require.NoError(b, c.TurnEnded(id))
				pool.Release(seqs[id])
				delete(seqs, id)
				acting = append(acting, id)
			}
			index := map[string]int{}
			for i, id := range ids {
				index[id] = i
			}
			c.Tick()
			require.NoError(b, c.Check())
			m := c.Metrics()
			b.Logf("arm %v: %d ACTIVE (%d running), %d waiting, used %.0f of %d", arm, m.Active, len(run), m.Waiting, m.Used, m.Capacity)
			tok := []int32{0}
			next := int32(2_000_000_000)
			pending := map[string]bool{} // turns that wait for a resume
			// Time spent in Controller calls: wall, and the thread's CPU time
			// (the machine is shared; CPU time excludes other processes).
			var policy, policyCPU time.Duration
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			_, haveCPU := threadCPU()
			timed := func(f func()) {
				c0, _ := threadCPU()
				t0 := time.Now()
				f()
				policy += time.Since(t0)
				c1, _ := threadCPU()
				policyCPU += c1 - c0
			}
			// turn submits nid's next turn (its context so far) and, when
			// admitted, starts it. Its prefix lookup would find exactly the
			// blocks the program's pin holds, so the engine's sequence is made
			// from the pin without rehashing ~1,040 blocks (kvpool's cost).
			turn := func(nid string) {
				toks := ctxs[index[nid]]
				p := c.progs[nid]
				hit := 0
				if p.handle != kvpool.InvalidSeq {
					hit = pool.Tokens(p.handle)
				}
				var ok bool
				var err error
				timed(func() { ok, err = c.Admit(nid, len(toks), hit) })
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					pending[nid] = true
					return
				}
				delete(pending, nid)
				var seq kvpool.SeqID
				if hit > 0 {
					seq, err = pool.Pin(p.handle)
					require.NoError(b, err)
				} else {
					seq = pool.NewSeq(testKeys)
					hit, err = pool.MatchPrefix(seq, toks)
					require.NoError(b, err)
				}
				require.NoError(b, pool.Append(seq, toks[hit:]))
				seqs[nid] = seq
				timed(func() { err = c.Started(nid, seq) })
				if err != nil {
					b.Fatal(err)
				}
				run = append(run, nid)
			}
			// What timed itself costs (two clock reads of each kind), so
			// the reader can subtract it: ~4 timed calls per step.
			for range 1000 {
				timed(func() {})
			}
			timerCPU := policyCPU / 1000
			policy, policyCPU = 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for _, id := range run {
					next--
					tok[0] = next
					require.NoError(b, pool.Append(seqs[id], tok))
					ctxs[index[id]] = append(ctxs[index[id]], next)
				}
				var d Decisions
				timed(func() { d = c.Tick() })
				for _, id := range d.Resumed {
					if pending[id] {
						turn(id)
					}
				}
				// The oldest running turn ends; the oldest ACTING program's
				// next turn arrives.
				id := run[0]
				run = run[1:]
				var err error
				timed(func() { err = c.TurnEnded(id) })
				if err != nil {
					b.Fatal(err)
				}
				pool.Release(seqs[id])
				delete(seqs, id)
				acting = append(acting, id)
				nid := acting[0]
				acting = acting[1:]
				turn(nid)
			}
			b.ReportMetric(float64(policy.Nanoseconds())/float64(b.N), "policy-ns/step")
			if haveCPU {
				b.ReportMetric(float64(policyCPU.Nanoseconds())/float64(b.N), "policy-cpu-ns/step")
				b.ReportMetric(float64(timerCPU.Nanoseconds()), "timer-cpu-ns/call")
			}
			b.StopTimer()
			require.NoError(b, c.Check())
			m = c.Metrics()
			b.Logf("arm %v after %d steps: %d pauses, %d resumes, %d waiting turns", arm, b.N, m.Pauses, m.Resumes, len(pending))
		})
	}
}
