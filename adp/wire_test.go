package adp

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func wireState() RankState {
	return RankState{Capacity: 8, Active: 3, ActiveTokens: 4000, Waiting: 2, WaitingTokens: 900, Retiring: 1, RetiringTokens: 77,
		Hits: []int{0, 16, 32}, Resident: []bool{true, false, true}}
}

// The wire format round-trips every field exactly.
func TestWireRoundTrip(t *testing.T) {
	s := wireState()
	counts := make([]int64, CountWords)
	s.PutCounts(counts)
	win := make([]int64, MatchWords(4))
	require.NoError(t, s.PutMatches(win, 4))
	var got RankState
	require.NoError(t, got.SetCounts(counts))
	require.NoError(t, got.SetMatches(win, 4))
	require.Equal(t, s, got)

	// An empty report (the router reads neither) stays empty.
	e := RankState{Capacity: 1}
	require.NoError(t, e.PutMatches(win, 4))
	got = RankState{Hits: []int{9}, Resident: []bool{true}}
	require.NoError(t, got.SetMatches(win, 4))
	require.Empty(t, got.Hits)
	require.Empty(t, got.Resident)
}

// Bad rows, as a broken peer would send them, are errors naming the value.
func TestWireRejects(t *testing.T) {
	good := func() []int64 {
		c := make([]int64, CountWords)
		s := wireState()
		s.PutCounts(c)
		return c
	}
	var s RankState
	for _, tc := range []struct {
		name string
		row  []int64
		want string
	}{
		{"short", good()[:3], "3 words, want 7"},
		{"negative active", func() []int64 { c := good(); c[1] = -1; return c }(), "active -1"},
		{"huge tokens", func() []int64 { c := good(); c[6] = 1 << 60; return c }(), "retiring tokens 1152921504606846976"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, s.SetCounts(tc.row), tc.want)
		})
	}
	w := make([]int64, MatchWords(2))
	st := wireState()
	require.ErrorContains(t, st.PutMatches(w, 2), "3 hits and 3 residencies for 2 pending requests")
	require.ErrorContains(t, st.PutMatches(make([]int64, 5), 2), "5 words, want 6")
	w[0] = 3
	require.ErrorContains(t, s.SetMatches(w, 2), "3 hits and 0 residencies for 2 pending requests")
	w[0], w[1], w[4] = 0, 1, 2
	require.ErrorContains(t, s.SetMatches(w, 2), "residency 2, want 0 or 1")
}

// twoProcs is a Collective standing for process p of two, whose peer's
// rows are fixed: enough to check the exchange's layout without MPI.
type twoProcs struct {
	p    int
	peer []int64
	err  error
}

func (c *twoProcs) Rank() int { return c.p }
func (c *twoProcs) Size() int { return 2 }
func (c *twoProcs) AllgatherInt64(local, all []int64) error {
	if c.err != nil {
		return c.err
	}
	rows := [2][]int64{}
	rows[c.p], rows[1-c.p] = local, c.peer
	copy(all, rows[0])
	copy(all[len(local):], rows[1])
	return nil
}

// Exchange places each process's ranks rank-major and decodes every rank.
func TestExchangeLayout(t *testing.T) {
	peer := RankState{Capacity: 2, Active: 1, ActiveTokens: 5}
	peerRow := make([]int64, CountWords)
	peer.PutCounts(peerRow)
	me := wireState()
	var x Exchange
	all := make([]RankState, 2)
	require.NoError(t, x.Counts(&twoProcs{p: 1, peer: peerRow}, []RankState{me}, all))
	require.Equal(t, 1, all[0].Active, "process 0's rank first")
	require.Equal(t, me.ActiveTokens, all[1].ActiveTokens)

	require.ErrorContains(t, x.Counts(&twoProcs{p: 0, peer: peerRow}, []RankState{me}, make([]RankState, 3)),
		"2 processes × 1 local ranks = 2, but the deployment has 3 ranks")
	boom := errors.New("peer gone")
	require.ErrorIs(t, x.Counts(&twoProcs{err: boom}, []RankState{me}, all), boom)
	bad := append([]int64(nil), peerRow...)
	bad[0] = -4
	require.ErrorContains(t, x.Counts(&twoProcs{p: 1, peer: bad}, []RankState{me}, all), "rank 0: adp: rank capacity -4")

	// Local: one process holding every rank is a copy.
	local := []RankState{me, peer}
	got := make([]RankState, 2)
	require.NoError(t, x.Counts(Local{}, local, got))
	require.NoError(t, x.Matches(Local{}, local, got, 3))
	require.Equal(t, me, got[0])
	require.Equal(t, peer.ActiveTokens, got[1].ActiveTokens)
	require.ErrorContains(t, Local{}.AllgatherInt64(make([]int64, 2), make([]int64, 3)), "2 values into 3")
}

// FuzzWire: any row either decodes and re-encodes to itself, or is refused.
func FuzzWire(f *testing.F) {
	f.Add(int64(8), int64(3), int64(4000), int64(2), int64(0), int64(1), int64(7), int64(2), int64(1), int64(5), int64(1))
	f.Fuzz(func(t *testing.T, c0, c1, c2, c3, c4, c5, c6, nh, nr, h0, r0 int64) {
		counts := []int64{c0, c1, c2, c3, c4, c5, c6}
		var s RankState
		if err := s.SetCounts(counts); err == nil {
			back := make([]int64, CountWords)
			s.PutCounts(back)
			require.Equal(t, counts, back)
		}
		const w = 2
		win := []int64{nh, nr, h0, h0 + 1, r0, 1 - r0}
		if err := s.SetMatches(win, w); err == nil {
			back := make([]int64, MatchWords(w))
			require.NoError(t, s.PutMatches(back, w))
			want := make([]int64, MatchWords(w))
			copy(want, win[:2])
			copy(want[2:2+nh], win[2:2+nh])
			copy(want[2+w:2+w+nr], win[2+w:2+w+nr])
			require.Equal(t, want, back, "only the reported entries travel")
		}
	})
}
