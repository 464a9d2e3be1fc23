package adp

import (
	"cmp"
	"slices"
)

// Pending is what a router sees of one queued request.
type Pending struct {
	Tokens  int    // prompt tokens
	Program string // program id; "" for none
}

// Router places requests on ranks. Route sees only the gathered loads (and,
// through l.States, each rank's prefix hits and programs for the pending requests):
// out[j] is the rank for pending[j], or -1 when no rank has room; it consumes
// l's room as it places. The same loads and requests always give the same
// assignment. A Router keeps scratch space between calls, so one Router
// serves one deployment loop.
type Router interface {
	Route(l *Loads, pending []Pending, out []int)
}

// Needs says which per-request rank information a router reads.
type Needs struct {
	Hits     bool // RankState.Hits: prefix-cache hits
	Resident bool // RankState.Resident: program residency
}

// MatchReader is implemented by routers that read per-request rank
// information. The deployment asks the ranks for it (Rank.Match) only for
// those, and only what they read, since a prefix lookup hashes prompt
// blocks and a residency check scans the rank's requests.
type MatchReader interface {
	Reads() Needs
}

// Reads implements MatchReader: the cache-aware router reads Hits.
func (r *CacheAware) Reads() Needs { return Needs{Hits: true} }

// Reads implements MatchReader: the program-aware router reads Resident.
func (r *ProgramAware) Reads() Needs { return Needs{Resident: true} }

// LoadBalanced is the default router: requests, largest prompt first, go to
// the rank with the least token load (request count, then index break
// ties), never past the fair-share cap while another rank
// with room is under it.
type LoadBalanced struct {
	order []int
}

// Route implements Router.
func (r *LoadBalanced) Route(l *Loads, pending []Pending, out []int) {
	r.order = largestFirst(r.order, pending)
	fair := l.FairCap(min(len(pending), l.Admit))
	for _, j := range r.order {
		out[j] = leastLoaded(l, fair)
		if out[j] >= 0 {
			l.place(out[j], pending[j].Tokens)
		}
	}
}

// leastLoaded is the rank first in Loads.Less order among those with room
// and under the fair cap; if none is under the cap, among those with room;
// -1 if none has room.
func leastLoaded(l *Loads, fair int) int {
	for _, strict := range [2]bool{true, false} {
		best := -1
		for i := range l.Room {
			if l.ok(i, fair, strict) && (best < 0 || l.Less(i, best)) {
				best = i
			}
		}
		if best >= 0 {
			return best
		}
	}
	return -1
}

// CacheAware balances the tokens each rank would actually compute: a
// request costs (prompt tokens not cached on that rank) plus LoadPermille/1000
// times the rank's token load; the cheapest rank with room and under the fair
// cap wins (Loads.Less breaks ties). Placing it adds its uncached tokens to
// the rank's load.
type CacheAware struct {
	// LoadPermille weighs load against cache hits: 1000 means one token of
	// load costs as much as one uncached prompt token; 0 means hits alone
	// decide (load only breaks ties).
	LoadPermille int64
	order        []int
}

// Route implements Router.
func (r *CacheAware) Route(l *Loads, pending []Pending, out []int) {
	r.order = largestFirst(r.order, pending)
	fair := l.FairCap(min(len(pending), l.Admit))
	for _, j := range r.order {
		best, bestNew := -1, 0
		var bestCost int64
		for _, strict := range [2]bool{true, false} {
			for i := range l.Room {
				if !l.ok(i, fair, strict) {
					continue
				}
				fresh := pending[j].Tokens - hit(l, i, j)
				cost := int64(fresh)*1000 + r.LoadPermille*int64(l.Load[i])
				if best < 0 || cost < bestCost || (cost == bestCost && l.Less(i, best)) {
					best, bestCost, bestNew = i, cost, fresh
				}
			}
			if best >= 0 {
				break
			}
		}
		out[j] = best
		if best >= 0 {
			l.place(best, bestNew)
		}
	}
}

// hit is pending request j's cached prompt tokens on rank i (0 when the rank
// reported none).
func hit(l *Loads, i, j int) int {
	h := l.States[i].Hits
	if j < len(h) {
		return max(h[j], 0)
	}
	return 0
}

// ProgramAware keeps a program on its rank: a request whose program is
// resident on a rank (RankState.Resident, or placed earlier in this call)
// goes there while that rank has room; requests of new programs, and of
// programs whose rank is full, go where LoadBalanced would put them, which
// becomes the program's rank for the rest of the call.
type ProgramAware struct {
	order []int
	homes map[string]int
}

// Route implements Router.
func (r *ProgramAware) Route(l *Loads, pending []Pending, out []int) {
	r.order = largestFirst(r.order, pending)
	if r.homes == nil {
		r.homes = make(map[string]int)
	}
	clear(r.homes)
	fair := l.FairCap(min(len(pending), l.Admit))
	for _, j := range r.order {
		p := pending[j].Program
		home := -1
		if p != "" {
			home = r.home(l, j, p)
		}
		if home < 0 || l.Room[home] == 0 {
			home = leastLoaded(l, fair)
			if home >= 0 && p != "" {
				r.homes[p] = home
			}
		}
		out[j] = home
		if home >= 0 {
			l.place(home, pending[j].Tokens)
		}
	}
}

// home is the rank of pending request j's program p: the one it was placed
// on earlier in this call, else, among ranks where it is resident, the first
// in Loads.Less order that has room (or, when none has room, the first),
// else -1.
func (r *ProgramAware) home(l *Loads, j int, p string) int {
	if h, ok := r.homes[p]; ok {
		return h
	}
	best := -1
	for i := range l.States {
		if res := l.States[i].Resident; j >= len(res) || !res[j] {
			continue
		}
		if best < 0 || roomFirst(l, i, best) {
			best = i
		}
	}
	return best
}

// roomFirst orders ranks with room before full ones, then by Loads.Less.
func roomFirst(l *Loads, a, b int) bool {
	if ra, rb := l.Room[a] > 0, l.Room[b] > 0; ra != rb {
		return ra
	}
	return l.Less(a, b)
}

// largestFirst returns the indices of pending, largest prompt first, ties in
// queue order (longest-processing-time-first balances best), reusing order.
func largestFirst(order []int, pending []Pending) []int {
	order = order[:0]
	for j := range pending {
		order = append(order, j)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(pending[b].Tokens, pending[a].Tokens) })
	return order
}
