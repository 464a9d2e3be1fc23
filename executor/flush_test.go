package executor

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFlush: after Step, Flush processes the step left in flight by
// overlap (reporting it did), so nothing is retiring at the next look; with
// overlap off, or with nothing in flight, it reports false. Check passes
// after every call, queued submissions wait for the next Step, and the
// output equals the plain loop's.
func TestFlush(t *testing.T) {
	for _, c := range []struct {
		name    string
		overlap bool
		eos     int
	}{{"overlap/length", true, 0}, {"overlap/eos", true, 3}, {"plain/length", false, 0}, {"plain/eos", false, 3}} {
		t.Run(c.name, func(t *testing.T) {
			s := newSetup(t, opts{mbs: 2, overlap: c.overlap, eosAfter: c.eos})
			ref := newSetup(t, opts{mbs: 2, eosAfter: c.eos})
			var got, want []*Stream
			for i := range 6 {
				for _, x := range []struct {
					s   *setup
					out *[]*Stream
				}{{s, &got}, {ref, &want}} {
					p := greedy()
					p.Seed, p.HasSeed = uint64(i), true
					st, err := x.s.eng.Submit(context.Background(), &Request{Prompt: fmt.Sprintf("collect %d", i), MaxTokens: 1 + i%4, Params: p})
					require.NoError(t, err)
					*x.out = append(*x.out, st)
				}
			}
			flushed := 0
			for it := 0; ; it++ {
				require.Less(t, it, 200, "the engine must drain")
				progressed, err := s.eng.Step()
				require.NoError(t, err)
				require.NoError(t, s.eng.Check())
				ok, err := s.eng.Flush()
				require.NoError(t, err)
				require.NoError(t, s.eng.Check())
				if ok {
					flushed++
				}
				// Nothing is in flight after Flush: no request retires at
				// the next gather, and teardown already happened.
				l := s.eng.RankLoad()
				require.Zero(t, l.Retiring, "iteration %d", it)
				require.Zero(t, s.eng.Snapshot().SeatsRetiring, "iteration %d", it)
				again, err := s.eng.Flush()
				require.NoError(t, err)
				require.False(t, again, "a second Flush has nothing to process")
				if !progressed {
					break
				}
			}
			if c.overlap {
				require.Positive(t, flushed, "overlap leaves a step in flight after Step")
			} else {
				require.Zero(t, flushed, "the plain loop leaves nothing in flight")
			}
			ref.drive(t, 200)
			for i := range got {
				require.Equal(t, readAll(t, want[i]), readAll(t, got[i]), "request %d", i)
			}
			m := s.eng.Snapshot()
			require.Equal(t, uint64(6), m.Finished)
			require.Zero(t, m.Running+m.Waiting+m.Retiring+m.SeatsLive+m.SeatsRetiring+m.KVBlocksUsed)
			require.NoError(t, s.eng.Close())
			require.NoError(t, ref.eng.Close())
		})
	}
}

// TestFlushLeavesQueues: Flush admits nothing: a request submitted
// after Step stays waiting through Flush and is admitted by the next Step.
func TestFlushLeavesQueues(t *testing.T) {
	s := newSetup(t, opts{mbs: 2, overlap: true})
	_, err := s.eng.Submit(context.Background(), &Request{Prompt: "first", MaxTokens: 1, Params: greedy()})
	require.NoError(t, err)
	_, err = s.eng.Step()
	require.NoError(t, err)
	late, err := s.eng.Submit(context.Background(), &Request{Prompt: "second", MaxTokens: 1, Params: greedy()})
	require.NoError(t, err)
	launched := s.eng.Launched()
	ok, err := s.eng.Flush()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, launched, s.eng.Launched(), "Flush launches nothing")
	l := s.eng.RankLoad()
	require.Equal(t, 1, l.Waiting, "the new submission waits for Step")
	require.Zero(t, l.Active+l.Retiring, "the first request finished and was torn down")
	require.NoError(t, s.eng.Check())
	s.drive(t, 20)
	d := readAll(t, late)
	require.Equal(t, FinishLength, d.FinishReason)
	require.NoError(t, s.eng.Close())
}

// TestFlushSeed004: an engine flushed after every step behaves, for
// context-only requests with BASE's charging, like the plain loop: two
// admitted every step, none held by a retiring request.
func TestFlushSeed004(t *testing.T) {
	const n = 8
	s := newSetup(t, opts{mbs: 2, overlap: true, charge: true})
	for i := range n {
		_, err := s.eng.Submit(context.Background(), &Request{Prompt: fmt.Sprintf("c%d", i), MaxTokens: 1, Params: greedy()})
		require.NoError(t, err)
	}
	var perStep []int
	prev := uint64(0)
	for range 4 * n {
		_, err := s.eng.Step()
		require.NoError(t, err)
		_, err = s.eng.Flush()
		require.NoError(t, err)
		require.NoError(t, s.eng.Check())
		m := s.eng.Snapshot()
		perStep = append(perStep, int(m.PromptTokens-prev))
		prev = m.PromptTokens
		if m.Finished == n {
			break
		}
	}
	require.Equal(t, []int{6, 6, 6, 6}, perStep, "a full batch every step: nothing retiring is charged")
	require.NoError(t, s.eng.Close())
}
