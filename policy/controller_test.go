package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/kvpool"
)

// smallCfg: 4,096 tokens of capacity (256 blocks), no buffer or reserve, so
// the arithmetic in the tests is plain token counts.
func smallCfg(arm Accounting, seats int) Config {
	c := DefaultConfig(arm, seats)
	c.Buffer, c.Reserve = 0, 0
	return c
}

func own(i, n int) []int32 { return context(i, 0, n) }

// TestPauseResume: an ACTIVE program's next turn always runs; the overflow
// it causes pauses the smallest ACTING program (its pin released) at the
// step boundary, and the paused program's next turn waits until it fits.
func TestPauseResume(t *testing.T) {
	r := newRig(t, smallCfg(TokenAccounting, 8), 256)
	for i := range 4 {
		require.True(t, r.admit(fmt.Sprint("p", i), own(i, 1000)))
	}
	for i := range 4 {
		r.end(fmt.Sprint("p", i))
	}
	require.Equal(t, 4000.0, r.c.Metrics().Used)
	// p0's second turn: its 1,000 tokens plus 200 of tool output. It is
	// admitted (ACTIVE), but the pool is full of pins: the engine cannot
	// start it and preempts it; A charges it all the same.
	require.False(t, r.admit("p0", own(0, 1200)))
	require.Equal(t, 4200.0, r.c.Metrics().Used)
	d := r.tick()
	// 4,200 > 4,096: pause the smallest ACTING (1,000 each; oldest first).
	require.Equal(t, []string{"p1"}, d.Paused)
	require.Empty(t, d.Resumed, "no resume in the tick that paused")
	info, _ := r.c.Program("p1")
	require.Equal(t, StatePaused, info.State)
	require.False(t, info.Pinned)
	require.Equal(t, 3200.0, r.c.Metrics().Used)
	require.True(t, r.admit("p0", own(0, 1200)), "p1's unpinned blocks made room")

	// p1's next turn (1,100 tokens) waits: 3,200 + 1,100 > 4,096.
	r.clk.advance(time.Second)
	require.False(t, r.admit("p1", own(1, 1100)))
	info, _ = r.c.Program("p1")
	require.Equal(t, StatusReasoning, info.Status)
	require.Empty(t, r.tick().Resumed)
	// p0 finishes and ends: 2,000 used, p1 fits and is resumed at the boundary.
	r.clk.advance(2 * time.Second)
	r.end("p0")
	r.release("p0")
	d = r.tick()
	require.Equal(t, []string{"p1"}, d.Resumed)
	require.True(t, r.admit("p1", own(1, 1100)))
	m := r.c.Metrics()
	require.Equal(t, uint64(1), m.Pauses)
	require.Equal(t, uint64(1), m.Resumes)
	require.Equal(t, 2*time.Second, m.AdmissionWaitMax, "p1's turn waited from its arrival to its resume")
	require.Equal(t, 3100.0, m.Used)
	for _, id := range []string{"p1", "p2", "p3"} {
		r.release(id)
	}
	r.drained()
}

// TestMarkReasoning: with no ACTING program to pause, the smallest REASONING
// one is marked and paused when its turn ends; marks are cleared when used
// falls back under the threshold first.
func TestMarkReasoning(t *testing.T) {
	for _, tc := range []struct {
		name       string
		releaseP2  bool
		wantPaused bool
	}{
		{"paused at turn end", false, true},
		{"unmarked when room frees", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallCfg(TokenAccounting, 8)
			cfg.Buffer = 200
			r := newRig(t, cfg, 256)
			for i := range 3 {
				require.True(t, r.admit(fmt.Sprint("p", i), own(i, 1150)))
			}
			require.True(t, r.grow("p0", own(100, 50)))
			require.True(t, r.grow("p1", own(101, 60)))
			require.True(t, r.grow("p2", own(102, 70)))
			// 1,200 + 1,210 + 1,220 + 3 × 200 = 4,230 > 4,096: mark the
			// smallest (p0); then 4,230 − 1,400 = 2,830 ≤ 4,096.
			d := r.tick()
			require.Equal(t, []string{"p0"}, d.Marked)
			require.Empty(t, d.Paused)
			require.True(t, must2(r.c.Program("p0")).Marked)
			if tc.releaseP2 {
				r.release("p2")
				require.Empty(t, r.tick().Marked)
			}
			require.Equal(t, !tc.releaseP2, must2(r.c.Program("p0")).Marked)
			r.end("p0")
			info := must2(r.c.Program("p0"))
			require.Equal(t, tc.wantPaused, info.State == StatePaused)
			require.Equal(t, !tc.wantPaused, info.Pinned)
			for _, id := range []string{"p0", "p1", "p2"} {
				r.c.Release(id)
				if seq, ok := r.seqs[id]; ok {
					r.pool.Release(seq)
					delete(r.seqs, id)
				}
				r.check()
			}
			r.drained()
		})
	}
}

func must2(i ProgramInfo, ok bool) ProgramInfo {
	if !ok {
		panic("unknown program")
	}
	return i
}

// TestSharedFamily: under B a shared family stays charged while any ACTIVE
// member still references it, and leaves with the last one.
func TestSharedFamily(t *testing.T) {
	r := newRig(t, smallCfg(BlockAccounting, 8), 256)
	// 4 shared blocks + 2 own blocks each (all full: nothing partial to lose
	// at the pin).
	for i := range 2 {
		require.True(t, r.admit(fmt.Sprint("p", i), context(i, 64, 96)))
		r.end(fmt.Sprint("p", i))
	}
	require.True(t, r.admit("p2", context(2, 64, 96)))
	// Distinct: 4 + 3 × 2 = 10 blocks.
	require.Equal(t, 10*16, r.c.Metrics().UsedBlocks)
	r.c.pause(r.c.progs["p0"], r.clk.Now())
	r.check()
	require.Equal(t, 8*16, r.c.Metrics().UsedBlocks, "p0's 2 own blocks leave; the shared 4 stay")
	r.release("p1")
	require.Equal(t, 6*16, r.c.Metrics().UsedBlocks, "p2 still references the family")
	r.end("p2")
	require.Equal(t, 6*16, r.c.Metrics().UsedBlocks, "pinned, still charged")
	r.release("p2")
	require.Equal(t, 0, r.c.Metrics().UsedBlocks)
	r.release("p0")
	r.drained()
}

// TestBEstimateLessPrefixHit: B charges a turn not yet started its context
// in blocks less the whole blocks its prefix-cache hit already holds (they
// are charged where they are referenced), both in used (an admitted turn
// before Started) and in the estimate that decides whether a queued turn
// fits.
func TestBEstimateLessPrefixHit(t *testing.T) {
	for _, tc := range []struct {
		name           string
		tokens, cached int
		wantEst        int // tokens charged before Started
	}{
		{"no hit", 160, 0, 10 * 16},
		{"whole blocks", 160, 64, 6 * 16},
		{"a partial block is not subtracted", 160, 70, 6 * 16},
		{"partial last block of the context", 150, 64, 6 * 16},
		{"all cached", 160, 160, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, smallCfg(BlockAccounting, 8), 256)
			ok, err := r.c.Admit("p", tc.tokens, tc.cached)
			require.NoError(t, err)
			require.True(t, ok, "alone, it runs")
			r.check()
			require.Equal(t, tc.wantEst, r.c.UsedBlocks(), "estimate of the admitted, unstarted turn")
			require.NoError(t, r.c.Preempted("p"))
			r.check()
			require.Equal(t, tc.wantEst, r.c.UsedBlocks(), "a turn preempted before it started keeps its estimate")
			require.True(t, r.c.Release("p"))
			r.drained()
		})
	}
	// The decision: p0's 2,000-token context is pinned (125 blocks of the
	// pool's 256). p1 shares it and adds 1,000 tokens: charged its 63 new
	// blocks it fits (125 + 63 ≤ 256); charged all 188 it would not.
	r := newRig(t, smallCfg(BlockAccounting, 8), 256)
	require.True(t, r.admit("p0", context(0, 2000, 2000)))
	r.end("p0")
	require.Equal(t, 125*16, r.c.UsedBlocks())
	p1 := context(1, 2000, 3000)
	require.Equal(t, 2000, r.pool.PeekPrefix(testKeys, p1), "p1's shared prefix hits p0's pin")
	require.True(t, r.admit("p1", p1), "admitted on its 63 new blocks, not its 188")
	require.Equal(t, (125+63)*16, r.c.UsedBlocks())
	// Without the hit the same turn waits.
	ok, err := r.c.Admit("p2", 3000, 0)
	require.NoError(t, err)
	require.False(t, ok, "188 uncached blocks do not fit beside 188 used")
	r.check()
	r.end("p1")
	require.NoError(t, r.c.TurnEnded("p2")) // withdrawn while it waited
	r.release("p0")
	r.release("p1")
	r.drained()
}

// TestPreempted: a preempted turn's blocks leave B's count and its estimate
// is charged until it starts again; Admit runs it again at once.
func TestPreempted(t *testing.T) {
	r := newRig(t, smallCfg(BlockAccounting, 8), 256)
	require.True(t, r.admit("p", own(0, 100))) // 7 blocks (6 full + 1 partial)
	require.Equal(t, 7*16, r.c.Metrics().UsedBlocks)
	require.NoError(t, r.c.Preempted("p"))
	r.pool.Release(r.seqs["p"])
	delete(r.seqs, "p")
	r.check()
	require.Equal(t, 7*16, r.c.Metrics().UsedBlocks, "charged its estimate: ceil(100/16) = 7 blocks")
	require.Zero(t, r.c.Metrics().DistinctBlocks)
	require.True(t, r.admit("p", own(0, 100)))
	require.Equal(t, 7*16, r.c.Metrics().UsedBlocks)
	r.end("p")
	require.Equal(t, 6*16, r.c.Metrics().UsedBlocks, "the pin holds only the 6 full blocks")
	r.release("p")
	r.drained()
}

// TestQueueOrder: a new program waits behind a paused program with a
// pending turn even when it would fit itself (no overtaking), and is
// admitted after it.
func TestQueueOrder(t *testing.T) {
	cfg := smallCfg(TokenAccounting, 8)
	cfg.Buffer = 500
	r := newRig(t, cfg, 256)
	require.True(t, r.admit("a", own(0, 2000)))
	require.True(t, r.admit("b", own(1, 1000)))
	r.end("a")
	r.end("b")
	require.True(t, r.admit("a", own(0, 2100))) // 2,600 + 1,500 > 4,096
	require.Equal(t, []string{"b"}, r.tick().Paused)
	require.False(t, r.admit("b", own(1, 1100))) // pending: 2,600 + 1,600 > 4,096
	require.False(t, r.admit("n", own(2, 300)), "2,600 + 800 fits, but b's pending turn is ahead")
	require.Empty(t, r.tick().Resumed, "b does not fit and n may not overtake it")
	r.end("a")
	r.release("a")
	require.Equal(t, []string{"b", "n"}, r.tick().Resumed)
	require.True(t, r.admit("b", own(1, 1100)))
	require.True(t, r.admit("n", own(2, 300)))
	r.release("b")
	r.release("n")
	r.drained()
}

// TestSeats: ACTIVE programs never exceed MaxActive.
func TestSeats(t *testing.T) {
	r := newRig(t, smallCfg(BlockAccounting, 2), 256)
	require.True(t, r.admit("a", own(0, 10)))
	require.True(t, r.admit("b", own(1, 10)))
	require.False(t, r.admit("c", own(2, 10)))
	require.Empty(t, r.tick().Resumed)
	r.end("a")
	require.Empty(t, r.tick().Resumed, "an ACTING program keeps its seat")
	r.release("a")
	require.Equal(t, []string{"c"}, r.tick().Resumed)
	require.Equal(t, 2, r.c.Metrics().Active)
	r.release("b")
	r.release("c")
	r.drained()
}

// TestLeaseAndForced: a program idle for its lease ends (its pin released);
// a pending turn that waited ForcedResume is resumed even though it does not
// fit, pausing an ACTING program when the seats are full; a lone program is
// admitted whatever its size.
func TestLeaseAndForced(t *testing.T) {
	cfg := smallCfg(TokenAccounting, 2)
	cfg.Buffer = 200
	cfg.Lease = 10 * time.Minute
	cfg.ForcedResume = 5 * time.Minute
	r := newRig(t, cfg, 256)
	require.True(t, r.admit("big", own(0, 3900)), "alone, 4,100 > 4,096 is admitted")
	r.end("big")
	require.False(t, r.admit("a", own(1, 100)), "4,100 + 300 > 4,096")
	r.clk.advance(5*time.Minute - time.Second)
	require.Empty(t, r.tick().Resumed)
	r.clk.advance(time.Second)
	d := r.tick()
	require.Equal(t, []string{"a"}, d.Resumed)
	require.Equal(t, 1, d.Forced)
	require.True(t, r.admit("a", own(1, 100)))
	// Over the threshold now: big (ACTING) is paused at the next boundary.
	require.Equal(t, []string{"big"}, r.tick().Paused)
	r.end("a")
	// a's turn ended at 5 min; big has been idle since 0: lease 10 min.
	r.clk.advance(5 * time.Minute)
	require.Equal(t, []string{"big"}, r.tick().Expired)
	_, known := r.c.Program("big")
	require.False(t, known)
	r.clk.advance(5 * time.Minute)
	require.Equal(t, []string{"a"}, r.tick().Expired)
	m := r.c.Metrics()
	require.Equal(t, uint64(2), m.Expired)
	require.Equal(t, uint64(1), m.ForcedResumes)
	r.drained()
}

// TestProtocolErrors: calls out of order are refused, naming the program.
func TestProtocolErrors(t *testing.T) {
	r := newRig(t, smallCfg(BlockAccounting, 4), 256)
	require.ErrorIs(t, r.c.Started("x", 0), ErrUnknownProgram)
	require.ErrorIs(t, r.c.TurnEnded("x"), ErrUnknownProgram)
	require.ErrorIs(t, r.c.Grew("x"), ErrUnknownProgram)
	require.False(t, r.c.Release("x"))
	_, err := r.c.Admit("x", 10, 20)
	require.ErrorContains(t, err, `"x" with 10 tokens, 20 cached`)

	require.True(t, r.admit("p", own(0, 40)))
	_, err = r.c.Admit("p", 40, 0)
	require.ErrorContains(t, err, "already has a turn in flight")
	require.ErrorContains(t, r.c.Started("p", r.seqs["p"]), "while sequence")
	r.end("p")
	require.ErrorContains(t, r.c.TurnEnded("p"), `"p" ended a turn while ACTING`)
	require.ErrorContains(t, r.c.Grew("p"), "ACTIVE/ACTING")
	require.ErrorContains(t, r.c.Preempted("p"), "ACTIVE/ACTING")
	ok, err := r.c.Admit("p", 40, 32)
	require.NoError(t, err)
	require.True(t, ok)
	require.ErrorContains(t, r.c.Grew("p"), "without a started sequence")
	require.ErrorIs(t, r.c.Started("p", kvpool.InvalidSeq), kvpool.ErrInvalidSeq)

	// The engine releasing a live sequence behind the policy's back is caught.
	seq := r.pool.NewSeq(testKeys)
	require.NoError(t, r.pool.Append(seq, own(0, 40)))
	require.NoError(t, r.c.Started("p", seq))
	r.check()
	r.pool.Release(seq)
	r.c.Tick()
	require.ErrorContains(t, r.c.Check(), "released by the engine")
}

// TestWithdrawn: a turn withdrawn while it waits: a new program is
// forgotten, a paused one goes back to waiting between turns.
func TestWithdrawn(t *testing.T) {
	r := newRig(t, smallCfg(TokenAccounting, 1), 256)
	require.True(t, r.admit("a", own(0, 10)))
	require.False(t, r.admit("n", own(1, 10)))
	r.end("n")
	_, known := r.c.Program("n")
	require.False(t, known)
	r.end("a")
	r.c.pause(r.c.progs["a"], r.clk.Now())
	r.check()
	require.False(t, r.admit("a", own(0, 20)) && false)
	require.Equal(t, StatusReasoning, must2(r.c.Program("a")).Status)
	r.end("a")
	info := must2(r.c.Program("a"))
	require.Equal(t, StatePaused, info.State)
	require.Equal(t, StatusActing, info.Status)
	r.release("a")
	r.drained()
}

// TestNoAllocs: the step-boundary path allocates nothing in steady state:
// Tick with running turns, and a turn cycle (end, next turn admitted and
// started) of a known program.
func TestNoAllocs(t *testing.T) {
	r := newRig(t, smallCfg(BlockAccounting, 8), 256)
	for i := range 4 {
		require.True(t, r.admit(fmt.Sprint("p", i), context(i, 64, 100)))
	}
	r.end("p3")
	pin := r.c.progs["p3"].handle
	toks := context(3, 64, 100)
	cycle := func() {
		if err := r.c.TurnEnded("p0"); err != nil {
			t.Fatal(err)
		}
		ok, err := r.c.Admit("p0", len(toks), 96)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if err := r.c.Started("p0", r.seqs["p0"]); err != nil {
			t.Fatal(err)
		}
		r.c.Tick()
	}
	cycle() // warm up the reused buffers
	require.Zero(t, testing.AllocsPerRun(100, cycle))
	require.Zero(t, testing.AllocsPerRun(100, func() { r.c.Tick() }))
	require.Equal(t, pin, r.c.progs["p3"].handle)
	r.check()
}

// TestReservedSlotCharged: a future token's slot reserved in a new block
// (kvpool.Pool.Reserve, before its value is known) occupies that block already,
// so B charges it as soon as the growth is observed, not only after Fill.
func TestReservedSlotCharged(t *testing.T) {
	r := newRig(t, smallCfg(BlockAccounting, 8), 256)
	toks := context(0, 0, 32) // two full blocks
	require.True(t, r.admit("p0", toks))
	require.Equal(t, 2*16+r.c.cfg.Reserve, r.c.UsedBlocks())
	seq := r.seqs["p0"]
	require.NoError(t, r.pool.Reserve(seq, 1)) // opens block 3
	require.NoError(t, r.c.Grew("p0"))
	r.check()
	require.Equal(t, 3*16+r.c.cfg.Reserve, r.c.UsedBlocks(), "the reserved slot's block is charged")
	require.NoError(t, r.pool.Fill(seq, []int32{7}))
	require.NoError(t, r.c.Grew("p0"))
	r.check()
	require.Equal(t, 3*16+r.c.cfg.Reserve, r.c.UsedBlocks())
	r.end("p0")
	r.release("p0")
	r.drained()
}
