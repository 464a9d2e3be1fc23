package adp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
)

// st builds a rank state: capacity, active, retiring, tokens per request.
func st(capacity, active, retiring, tokPer int) RankState {
	return RankState{Capacity: capacity, Active: active, ActiveTokens: active * tokPer,
		Retiring: retiring, RetiringTokens: retiring * tokPer}
}

func TestGatherCounts(t *testing.T) {
	states := []RankState{
		{Capacity: 4, Active: 1, ActiveTokens: 10, Waiting: 1, WaitingTokens: 5, Retiring: 2, RetiringTokens: 20},
		{Capacity: 2, Active: 2, ActiveTokens: 8, Retiring: 1, RetiringTokens: 3},
	}
	cases := []struct {
		name        string
		p           Ablation
		room, count []int
		load        []int
		admit       int
	}{
		{"FIX: retiring excluded from admission and load", Ablation{}, []int{2, 0}, []int{2, 2}, []int{15, 8}, 2},
		{"BASE: retiring charged everywhere", Ablation{Engine: executor.Ablation{ChargeRetiring: true}}, []int{0, 0}, []int{4, 3}, []int{35, 11}, 0},
		{"PlaceRetiring: load only, admission unchanged", Ablation{PlaceRetiring: true}, []int{2, 0}, []int{4, 3}, []int{35, 11}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var l Loads
			ComputeLoads(states, c.p, &l)
			require.Equal(t, c.room, l.Room)
			require.Equal(t, c.count, l.Count)
			require.Equal(t, c.load, l.Load)
			require.Equal(t, []int{2, 1}, l.Retiring, "retiring is carried separately")
			require.Equal(t, c.admit, l.Admit)
		})
	}
}

func TestMayBlock(t *testing.T) {
	cases := []struct {
		name   string
		s      RankState
		queued int
		want   bool
	}{
		{"idle and empty queue", RankState{Capacity: 2}, 0, true},
		{"only retiring: must step to tear down", RankState{Capacity: 2, Retiring: 1}, 0, false},
		{"active", RankState{Capacity: 2, Active: 1}, 0, false},
		{"waiting", RankState{Capacity: 2, Waiting: 1}, 0, false},
		{"idle but queue not empty", RankState{Capacity: 2}, 3, false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, MayBlock(&c.s, c.queued), c.name)
	}
}

func route(r Router, states []RankState, p Ablation, pending []Pending) ([]int, *Loads) {
	var l Loads
	ComputeLoads(states, p, &l)
	out := make([]int, len(pending))
	r.Route(&l, pending[:min(len(pending), l.Admit)], out[:min(len(pending), l.Admit)])
	for j := l.Admit; j < len(pending); j++ {
		out[j] = -1
	}
	return out, &l
}

func reqs(tokens ...int) []Pending {
	p := make([]Pending, len(tokens))
	for i, t := range tokens {
		p[i].Tokens = t
	}
	return p
}

func TestLoadBalanced(t *testing.T) {
	cases := []struct {
		name    string
		states  []RankState
		p       Ablation
		pending []Pending
		want    []int
	}{
		{"all tied: lowest index first, then alternate", []RankState{st(2, 0, 0, 0), st(2, 0, 0, 0)},
			Ablation{}, reqs(8, 8, 8, 8), []int{0, 1, 0, 1}},
		{"lighter token load wins", []RankState{st(4, 1, 0, 100), st(4, 1, 0, 10)},
			Ablation{}, reqs(8), []int{1}},
		{"equal tokens: fewer requests wins", []RankState{
			{Capacity: 4, Active: 2, ActiveTokens: 20}, {Capacity: 4, Active: 1, ActiveTokens: 20}},
			Ablation{}, reqs(8), []int{1}},
		{"FIX: retiring work does not count for placement", []RankState{st(4, 1, 3, 10), st(4, 1, 0, 10)},
			Ablation{}, reqs(8), []int{0}},
		{"PlaceRetiring: retiring work counts for placement", []RankState{st(4, 1, 1, 10), st(4, 1, 0, 10)},
			Ablation{PlaceRetiring: true}, reqs(8), []int{1}},
		{"largest prompt placed first", []RankState{st(4, 0, 0, 0), st(4, 0, 0, 0)},
			Ablation{}, reqs(5, 50, 7), []int{1, 0, 1}},
		{"full rank skipped", []RankState{st(2, 2, 0, 1), st(2, 0, 0, 0)},
			Ablation{}, reqs(8, 8, 8), []int{1, 1, -1}},
		{"BASE: retiring charged leaves no room", []RankState{st(2, 0, 2, 8), st(2, 0, 1, 8)},
			Ablation{Engine: executor.Ablation{ChargeRetiring: true}}, reqs(8, 8), []int{1, -1}},
		{"FIX: the same ranks have full room", []RankState{st(2, 0, 2, 8), st(2, 0, 1, 8)},
			Ablation{}, reqs(8, 8, 8, 8), []int{0, 1, 0, 1}},
		{"fair cap keeps a light rank from taking everything", []RankState{
			{Capacity: 8, Active: 2, ActiveTokens: 2}, {Capacity: 8, Active: 2, ActiveTokens: 400}},
			Ablation{}, reqs(10, 10, 10, 10), []int{0, 0, 1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, l := route(&LoadBalanced{}, c.states, c.p, c.pending)
			require.Equal(t, c.want, got)
			for i := range l.Room {
				require.GreaterOrEqual(t, l.Room[i], 0)
			}
			again, _ := route(&LoadBalanced{}, c.states, c.p, c.pending)
			require.Equal(t, got, again, "deterministic")
		})
	}
}

// TestFairCap: the fair share of everything counted plus n new requests
// rounds up (a rank may take the remainder), and never cuts below what a
// rank already holds.
func TestFairCap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count []int
		n     int
		want  int
	}{
		{"no ranks", nil, 3, 0},
		{"even split", []int{0, 0}, 4, 2},
		{"remainder rounds up", []int{0, 0}, 3, 2},
		{"remainder with load", []int{1, 0}, 2, 2},
		{"one over a multiple", []int{2, 2, 2}, 1, 3},
		{"a rank above the share", []int{5, 0}, 1, 5},
		{"nothing to place", []int{1, 2}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Loads{Count: tc.count}
			for _, c := range tc.count {
				l.Total += c
			}
			require.Equal(t, tc.want, l.FairCap(tc.n))
		})
	}
}

func TestCacheAware(t *testing.T) {
	withHits := func(s RankState, hits ...int) RankState { s.Hits = hits; return s }
	cases := []struct {
		name    string
		r       *CacheAware
		states  []RankState
		pending []Pending
		want    []int
	}{
		{"cached rank wins against moderate load",
			&CacheAware{LoadPermille: 100},
			[]RankState{withHits(st(4, 1, 0, 10), 0), withHits(st(4, 1, 0, 50), 96)},
			reqs(100), []int{1}},
		{"heavy load outweighs the hit",
			&CacheAware{LoadPermille: 1000},
			[]RankState{withHits(st(4, 1, 0, 10), 0), withHits(st(4, 1, 0, 500), 96)},
			reqs(100), []int{0}},
		{"equal cost: Loads.Less breaks the tie (lower index)",
			&CacheAware{LoadPermille: 0},
			[]RankState{withHits(st(4, 0, 0, 0), 32, 0), withHits(st(4, 0, 0, 0), 32, 0)},
			reqs(64, 64), []int{0, 1}},
		{"per-request hits: each goes where it is cached",
			&CacheAware{LoadPermille: 0},
			[]RankState{withHits(st(4, 0, 0, 0), 0, 48), withHits(st(4, 0, 0, 0), 48, 0)},
			reqs(64, 64), []int{1, 0}},
		{"cached rank without room is skipped",
			&CacheAware{LoadPermille: 0},
			[]RankState{withHits(st(1, 1, 0, 0), 60), withHits(st(4, 0, 0, 0), 0)},
			reqs(64), []int{1}},
		{"total not a multiple of dp: the cached rank keeps its request (fair cap 2, not 1)",
			&CacheAware{LoadPermille: 0},
			[]RankState{withHits(st(4, 1, 0, 10), 64, 0), withHits(st(4, 0, 0, 0), 0, 0)},
			reqs(64, 8), []int{0, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _ := route(c.r, c.states, Ablation{}, c.pending)
			require.Equal(t, c.want, got)
			again, _ := route(c.r, c.states, Ablation{}, c.pending)
			require.Equal(t, got, again, "deterministic")
		})
	}
}

func TestProgramAware(t *testing.T) {
	pend := func(ps ...string) []Pending {
		out := make([]Pending, len(ps))
		for i, p := range ps {
			out[i] = Pending{Tokens: 10, Program: p}
		}
		return out
	}
	cases := []struct {
		name    string
		states  []RankState
		progs   [][]string // programs resident on each rank
		pending []Pending
		want    []int
	}{
		{"resident program sticks to its rank even when heavier",
			[]RankState{st(4, 0, 0, 0), st(4, 2, 0, 100)}, [][]string{nil, {"a"}},
			pend("a", "a"), []int{1, 1}},
		{"home full: least loaded, then the new home for the rest of the call",
			[]RankState{st(4, 1, 0, 10), st(2, 2, 0, 10), st(4, 0, 0, 0)}, [][]string{nil, {"a"}, nil},
			pend("a", "a"), []int{2, 2}},
		{"new programs spread like LoadBalanced and stick within the call",
			[]RankState{st(4, 0, 0, 0), st(4, 0, 0, 0)}, [][]string{nil, nil},
			pend("x", "y", "x", "y"), []int{0, 1, 0, 1}},
		{"no program id: least loaded under the fair cap",
			[]RankState{st(4, 1, 0, 30), st(4, 0, 0, 0)}, [][]string{{"a"}, nil},
			pend("", "", ""), []int{1, 1, 0}},
		{"program resident on three ranks: the one with room, then the lighter",
			[]RankState{st(2, 2, 0, 1), st(4, 1, 0, 50), st(4, 1, 0, 20)}, [][]string{{"a"}, {"a"}, {"a"}},
			pend("a"), []int{2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i := range c.states {
				for _, q := range c.pending {
					res := false
					for _, p := range c.progs[i] {
						res = res || p == q.Program
					}
					c.states[i].Resident = append(c.states[i].Resident, res)
				}
			}
			r := &ProgramAware{}
			got, _ := route(r, c.states, Ablation{}, c.pending)
			require.Equal(t, c.want, got)
			again, _ := route(r, c.states, Ablation{}, c.pending)
			require.Equal(t, got, again, "deterministic, also when the router is reused")
		})
	}
}
