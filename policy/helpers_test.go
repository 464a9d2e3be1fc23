package policy

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/kvpool"
)

// seedCapacity is seed 000's KV capacity: 29,296 blocks of 16 tokens.
const (
	seedBlocks    = 29_296
	seedBlockSize = 16
)

var testKeys = kvpool.Keys{Model: "m"}

// fakeClock is a virtual clock moved only by the test.
type fakeClock struct{ now time.Time }

func (f *fakeClock) Now() time.Time          { return f.now }
func (f *fakeClock) advance(d time.Duration) { f.now = f.now.Add(d) }

func newClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func newPool(tb testing.TB, blocks int) *kvpool.Pool {
	tb.Helper()
	p, err := kvpool.New(kvpool.Config{NumBlocks: blocks, BlockSize: seedBlockSize})
	require.NoError(tb, err)
	return p
}

// context builds a program's token ids: shared ids 1..shared, then ids
// unique to program i.
func context(i, shared, total int) []int32 {
	t := make([]int32, total)
	for j := range t {
		if j < shared {
			t[j] = int32(1 + j)
		} else {
			t[j] = int32(1_000_000*(i+1) + j)
		}
	}
	return t
}

// rig drives a Controller the way the executor will: every call is followed
// by the Controller's and (where cheap enough) the pool's Check.
type rig struct {
	tb   testing.TB
	c    *Controller
	pool *kvpool.Pool
	clk  *fakeClock
	seqs map[string]kvpool.SeqID // live engine sequences by program
}

func newRig(tb testing.TB, cfg Config, blocks int) *rig {
	tb.Helper()
	clk := newClock()
	cfg.Clock = clk
	pool := newPool(tb, blocks)
	c, err := New(cfg, pool)
	require.NoError(tb, err)
	return &rig{tb: tb, c: c, pool: pool, clk: clk, seqs: map[string]kvpool.SeqID{}}
}

func (r *rig) check() {
	r.tb.Helper()
	require.NoError(r.tb, r.c.Check())
}

// admit asks for a turn of id over toks; when admitted it starts the turn as
// the executor does (prefix lookup, then the whole prompt appended). It
// reports whether the turn runs (false also when blocks ran out: preempted).
func (r *rig) admit(id string, toks []int32) bool {
	r.tb.Helper()
	ok, err := r.c.Admit(id, len(toks), r.pool.PeekPrefix(testKeys, toks))
	require.NoError(r.tb, err)
	r.check()
	if !ok {
		return false
	}
	seq := r.pool.NewSeq(testKeys)
	hit, err := r.pool.MatchPrefix(seq, toks)
	require.NoError(r.tb, err)
	if err := r.pool.Append(seq, toks[hit:]); err != nil {
		require.ErrorIs(r.tb, err, kvpool.ErrOutOfBlocks)
		r.pool.Release(seq)
		require.NoError(r.tb, r.c.Preempted(id))
		r.check()
		return false
	}
	require.NoError(r.tb, r.c.Started(id, seq))
	r.seqs[id] = seq
	r.check()
	return true
}

// grow appends toks to id's running turn; on running out of blocks the turn
// is preempted (false).
func (r *rig) grow(id string, toks []int32) bool {
	r.tb.Helper()
	seq := r.seqs[id]
	if err := r.pool.Append(seq, toks); err != nil {
		if !errors.Is(err, kvpool.ErrOutOfBlocks) {
			require.NoError(r.tb, err)
		}
		require.NoError(r.tb, r.c.Preempted(id))
		r.pool.Release(seq)
		delete(r.seqs, id)
		r.check()
		return false
	}
	require.NoError(r.tb, r.c.Grew(id))
	r.check()
	return true
}

// end finishes id's turn: TurnEnded (pins) before the engine releases.
func (r *rig) end(id string) {
	r.tb.Helper()
	require.NoError(r.tb, r.c.TurnEnded(id))
	if seq, ok := r.seqs[id]; ok {
		r.pool.Release(seq)
		delete(r.seqs, id)
	}
	r.check()
}

func (r *rig) release(id string) {
	r.tb.Helper()
	require.True(r.tb, r.c.Release(id))
	if seq, ok := r.seqs[id]; ok {
		r.pool.Release(seq)
		delete(r.seqs, id)
	}
	r.check()
}

func (r *rig) tick() Decisions {
	r.tb.Helper()
	d := r.c.Tick()
	r.check()
	return d
}

// drained asserts the end state: no programs, nothing pinned or referenced,
// nothing used.
func (r *rig) drained() {
	r.tb.Helper()
	require.Empty(r.tb, r.c.progs)
	require.Empty(r.tb, r.seqs)
	require.Zero(r.tb, r.pool.Referenced(), "blocks still referenced (pinned) with every program ended")
	m := r.c.Metrics()
	require.Zero(r.tb, m.Used)
	require.Zero(r.tb, m.UsedTokens)
	require.Zero(r.tb, m.UsedBlocks)
	require.Zero(r.tb, m.Active+m.Paused+m.Waiting)
	require.NoError(r.tb, r.pool.Check())
	r.check()
}
