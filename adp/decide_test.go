package adp

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
)

// TestDecide: each rule of the decision, from the rows alone.
func TestDecide(t *testing.T) {
	free := RankState{Capacity: 2}
	type want struct {
		stop, idle, bulletin bool
		output, admit        int
		match                Needs
	}
	cases := []struct {
		name      string
		states    []RankState
		procs     []ProcState
		router    Router
		maxPlaced int
		want      want
	}{
		{"nothing anywhere: idle", []RankState{free, free}, []ProcState{{}}, &LoadBalanced{}, 4,
			want{idle: true}},
		{"only retiring on a rank: it must step", []RankState{free, st(2, 0, 1, 5)}, []ProcState{{}}, &LoadBalanced{}, 4,
			want{}},
		{"output sent at this gather: an output gather, which delivers it, so idle may follow", []RankState{free, free},
			[]ProcState{{}, {Out: 7}}, &LoadBalanced{}, 4,
			want{output: 7, idle: true}},
		{"a release answer awaited: not idle", []RankState{free, free}, []ProcState{{Open: 1}, {}}, &LoadBalanced{}, 4,
			want{}},
		{"control alone: a bulletin, nothing placed", []RankState{free}, []ProcState{{Control: 2}}, &LoadBalanced{}, 4,
			want{bulletin: true}},
		{"one process places without a bulletin", []RankState{free, free}, []ProcState{{Queued: 3}}, &LoadBalanced{}, 4,
			want{admit: 3}},
		{"across processes placing needs the bulletin", []RankState{free, free}, []ProcState{{Queued: 3}, {}}, &LoadBalanced{}, 4,
			want{admit: 3, bulletin: true}},
		{"admit bounded by room", []RankState{st(2, 1, 0, 5), st(2, 2, 0, 5)}, []ProcState{{Queued: 9}}, &LoadBalanced{}, 8,
			want{admit: 1}},
		{"admit bounded by MaxPlaced", []RankState{free, free}, []ProcState{{Queued: 9}}, &LoadBalanced{}, 2,
			want{admit: 2}},
		{"no room: nothing placed, ranks still step", []RankState{st(1, 1, 0, 5)}, []ProcState{{Queued: 9}}, &LoadBalanced{}, 8,
			want{}},
		{"cache-aware reads hits", []RankState{free}, []ProcState{{Queued: 1}}, &CacheAware{}, 4,
			want{admit: 1, match: Needs{Hits: true}}},
		{"program-aware reads residency", []RankState{free}, []ProcState{{Queued: 1}}, &ProgramAware{}, 4,
			want{admit: 1, match: Needs{Resident: true}}},
		{"nothing to place: no match report", []RankState{st(1, 1, 0, 5)}, []ProcState{{Queued: 1}}, &CacheAware{}, 4,
			want{}},
		{"a process stops: nothing else decided, its output still gathered", []RankState{free, free},
			[]ProcState{{Queued: 3}, {Out: 5, Stop: true}}, &LoadBalanced{}, 4,
			want{stop: true, output: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dec decision
			decide(c.states, c.procs, c.router, c.maxPlaced, Ablation{}, &dec)
			got := want{stop: dec.stop, idle: dec.idle, bulletin: dec.bulletin, output: dec.output, admit: dec.admit, match: dec.match}
			require.Equal(t, c.want, got)
			require.Empty(t, dec.placements, "placements come from place")
			var l Loads
			ComputeLoads(c.states, Ablation{}, &l)
			require.Equal(t, l, dec.loads, "the decision's loads are ComputeLoads'")
		})
	}
}

// TestDecidePlace: place routes the admitted requests on the decision's
// loads, consuming their room.
func TestDecidePlace(t *testing.T) {
	states := []RankState{st(4, 2, 0, 10), st(4, 0, 0, 10)}
	var dec decision
	decide(states, []ProcState{{Queued: 3}}, &LoadBalanced{}, 8, Ablation{}, &dec)
	require.Equal(t, 3, dec.admit)
	dec.place(&LoadBalanced{}, reqs(30, 20, 10))
	require.Equal(t, []int{1, 0, 1}, dec.placements)
	require.Equal(t, []int{1, 2}, dec.loads.Room)
}

// fuzzIn reads a fuzzer's bytes as small numbers; past the end it reads 0.
type fuzzIn []byte

func (in *fuzzIn) next(n int) int {
	if len(*in) == 0 {
		return 0
	}
	v := int((*in)[0]) % n
	*in = (*in)[1:]
	return v
}

// fuzzRows are one iteration's rows as every process would hold them:
// the gather's (states' counts, procs), the bulletin's pending requests
// (process 0's queue head) and each rank's match report for them (in
// states' Hits and Resident).
type fuzzRows struct {
	states  []RankState
	procs   []ProcState
	pending []Pending
}

func readRows(in *fuzzIn, procs, perProc int) fuzzRows {
	r := fuzzRows{states: make([]RankState, procs*perProc), procs: make([]ProcState, procs)}
	for q := range r.procs {
		r.procs[q] = ProcState{Queued: in.next(24), Control: in.next(3), Out: in.next(4) * 100, Open: in.next(3), Stop: in.next(16) == 1}
	}
	r.pending = make([]Pending, r.procs[0].Queued)
	for j := range r.pending {
		r.pending[j] = Pending{Tokens: in.next(256) + 1, Program: fmt.Sprintf("p%d", in.next(5))}
	}
	for i := range r.states {
		s := &r.states[i]
		s.Capacity = in.next(16) + 1
		s.Active, s.Waiting, s.Retiring = in.next(9), in.next(5), in.next(9)
		tok := in.next(64) + 1
		s.ActiveTokens, s.WaitingTokens, s.RetiringTokens = s.Active*tok, s.Waiting*tok, s.Retiring*tok
		for j := range r.pending {
			s.Hits = append(s.Hits, in.next(r.pending[j].Tokens+1))
			s.Resident = append(s.Resident, in.next(3) == 0)
		}
	}
	return r
}

// simProc is one simulated process: the rows it keeps across iterations
// (as a Deployment keeps its gathered states), its router and decision.
type simProc struct {
	states []RankState
	router Router
	dec    decision
}

// iterate runs decide and place on rows as a process does: the gather
// brings the counts (the match report of an earlier iteration stays in
// the states, as SetCounts leaves it), the match allgather the reports the
// decision asks for, the bulletin the pending requests.
func (p *simProc) iterate(rows fuzzRows, maxPlaced int, a Ablation) {
	if p.states == nil {
		p.states = make([]RankState, len(rows.states))
	}
	for i := range rows.states {
		src, dst := &rows.states[i], &p.states[i]
		hits, res := dst.Hits, dst.Resident
		*dst = *src
		dst.Hits, dst.Resident = hits, res
	}
	decide(p.states, rows.procs, p.router, maxPlaced, a, &p.dec)
	if p.dec.admit == 0 {
		return
	}
	if need := p.dec.match; need.Hits || need.Resident {
		for i := range p.states {
			s, src := &p.states[i], &rows.states[i]
			s.Hits, s.Resident = s.Hits[:0], s.Resident[:0]
			if need.Hits {
				s.Hits = append(s.Hits, src.Hits[:p.dec.admit]...)
			}
			if need.Resident {
				s.Resident = append(s.Resident, src.Resident[:p.dec.admit]...)
			}
		}
	}
	p.dec.place(p.router, append([]Pending(nil), rows.pending[:p.dec.admit]...))
}

// value is the decision as processes must agree on it: everything but
// the rows its loads alias (no placements, nil or empty, are one value).
func (p *simProc) value() decision {
	v := p.dec
	v.loads.States = nil
	if len(v.placements) == 0 {
		v.placements = nil
	}
	return v
}

// FuzzDecide: the iteration's decision is a function of the rows alone.
// Simulated processes, each with its own history (earlier iterations
// decided from other rows leave stale buffers in its decision, stale match
// reports in its states and scratch in its router), decide and place from
// the same rows and must reach the same value, one that keeps the rules.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{0, 0, 0}, []byte{})
	f.Add([]byte{1, 1, 3, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 40, 1, 30, 2, 20, 3, 8, 2, 1, 1, 8, 9, 9, 9, 4, 0, 0, 0, 8}, []byte{7, 7, 7, 7})
	f.Add([]byte{3, 2, 4, 1, 5, 9, 0, 0, 0, 0, 0, 0, 0, 1, 200, 2, 1, 7, 0, 2, 1, 3, 9, 9, 1, 0, 1, 2, 3, 4, 5, 6, 7}, []byte{1, 2, 3, 200, 100, 50, 9, 8, 7, 6, 5, 4, 3, 2, 1})
	f.Add([]byte{2, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []byte{5, 0, 5, 0, 5, 0, 5, 0, 5, 0, 5, 0, 5})
	f.Fuzz(func(t *testing.T, data, history []byte) {
		in := fuzzIn(data)
		procs, perProc := in.next(4)+1, in.next(3)+1
		maxPlaced := in.next(12) + 1
		flags := in.next(256)
		a := Ablation{Engine: executor.Ablation{ChargeRetiring: flags&1 != 0}, PlaceRetiring: flags&2 != 0}
		kind := in.next(3)
		rows := readRows(&in, procs, perProc)

		const sims = 3
		var want decision
		for p := range sims {
			sp := &simProc{router: [...]Router{&LoadBalanced{}, &CacheAware{LoadPermille: int64(flags)}, &ProgramAware{}}[kind]}
			h := fuzzIn(history)
			for range p { // process p has run p earlier iterations, each from other rows
				sp.iterate(readRows(&h, procs, perProc), maxPlaced, a) // past its end, history reads zeros: rows too
			}
			sp.iterate(rows, maxPlaced, a)
			if p == 0 {
				want = sp.value()
				continue
			}
			require.Equal(t, want, sp.value(), "process %d decided otherwise", p)
		}

		// The value keeps the rules.
		front, dp := rows.procs[0], procs*perProc
		if procs == 1 {
			require.Zero(t, want.output, "one process: no output gather")
		}
		switch {
		case want.stop:
			require.False(t, want.idle || want.bulletin, "a stop decides nothing else")
			require.Zero(t, want.admit)
		case want.idle:
			require.Zero(t, front.Queued+front.Control)
			require.Zero(t, want.admit)
			for i := range rows.states {
				require.True(t, MayBlock(&rows.states[i], 0), "idle with rank %d live", i)
			}
		default:
			require.Equal(t, min(front.Queued, maxPlaced, want.loads.Admit), want.admit)
			require.Equal(t, procs > 1 && want.admit > 0 || front.Control > 0, want.bulletin)
		}
		require.Len(t, want.placements, want.admit)
		for j, r := range want.placements {
			require.True(t, r >= 0 && r < dp, "pending request %d on rank %d of %d with room for it", j, r, dp)
		}
	})
}
