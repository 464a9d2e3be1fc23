package adp

// RankState is what one rank reports at the gather point, filled by the rank
// itself (Rank.State, then Rank.Match) between lockstep iterations. Counts are requests,
// tokens are context tokens (prompt plus generated so far). Slices are owned
// by the caller and reused across gathers.
//
// It is plain data with no pointers into the rank: the gather moves it
// between processes as fixed-size int64 rows (Exchange), and the routers
// never know.
type RankState struct {
	// Capacity is the most sequences one step of the rank may hold (its
	// MaxBatchSize); admission fills a rank up to it.
	Capacity int
	// Active requests are admitted and will be scheduled again.
	Active, ActiveTokens int
	// Waiting requests were routed to the rank and are not admitted yet.
	Waiting, WaitingTokens int
	// Retiring requests have produced (or have in flight) their last token:
	// no step will schedule them again, but they hold a seat and KV blocks
	// until the next step's teardown.
	Retiring, RetiringTokens int
	// Hits[j] is how many prompt tokens of pending request j (the requests
	// passed to Rank.Match) are already cached on this rank
	// (kvpool.Pool.PeekPrefix); len(Hits) == len(pending).
	Hits []int
	// Resident[j] reports whether pending request j's program has a request
	// on this rank (waiting, active or retiring); len(Resident) ==
	// len(pending). Aligned with the pending requests like Hits, so the gather's size does not
	// grow with the number of programs a rank holds.
	Resident []bool
}

// Live is the liveness count: every request resident on the rank, retiring
// ones included, since a retiring request still needs the next step's
// teardown.
func (s *RankState) Live() int { return s.Active + s.Waiting + s.Retiring }

// MayBlock is the liveness rule: a rank may block waiting for work only when
// it holds no live request and the deployment's queue is empty. A rank whose
// only requests are retiring must keep stepping, or its teardown (and, with
// collectives, every peer) would wait forever.
func MayBlock(s *RankState, queued int) bool { return s.Live() == 0 && queued == 0 }

// Loads is the gathered, corrected state of every rank: the only place load
// is computed, so every router sees the same correction. Routers consume it
// (Room, Count, Load change as they place requests); it is rebuilt from the
// rank states each iteration. Index i is rank i.
type Loads struct {
	// States are the gathered states (read-only for routers).
	States []RankState
	// Room is admission: how many new requests rank i may take this
	// iteration, Capacity - (Active + Waiting [+ Retiring under
	// Engine.ChargeRetiring]), never below 0.
	Room []int
	// Count and Load are placement: requests and tokens counted on rank i
	// (active and waiting, plus retiring under Engine.ChargeRetiring or
	// PlaceRetiring), grown by each placed request.
	Count, Load []int
	// Retiring is carried separately (metrics; routers may read it).
	Retiring []int
	// Admit is Σ Room: the most requests this iteration may route.
	Admit int
	// Total is Σ Count before placement (the fair-share base).
	Total int
}

// ComputeLoads builds l from states under a, reusing l's slices. It takes
// ownership of nothing: l.States aliases states.
func ComputeLoads(states []RankState, a Ablation, l *Loads) {
	n := len(states)
	l.States = states
	l.Room = resize(l.Room, n)
	l.Count = resize(l.Count, n)
	l.Load = resize(l.Load, n)
	l.Retiring = resize(l.Retiring, n)
	l.Admit, l.Total = 0, 0
	for i := range states {
		s := &states[i]
		charged := s.Active + s.Waiting
		if a.Engine.ChargeRetiring {
			charged += s.Retiring
		}
		room := max(s.Capacity-charged, 0)
		cnt, tok := s.Active+s.Waiting, s.ActiveTokens+s.WaitingTokens
		if a.Engine.ChargeRetiring || a.PlaceRetiring {
			cnt += s.Retiring
			tok += s.RetiringTokens
		}
		l.Room[i], l.Count[i], l.Load[i], l.Retiring[i] = room, cnt, tok, s.Retiring
		l.Admit += room
		l.Total += cnt
	}
}

// FairCap is the fair-share cap for placing n new requests: no rank is
// filled past the even split of everything counted plus n, unless a rank
// already holds more (then that much).
func (l *Loads) FairCap(n int) int {
	dp := len(l.Count)
	if dp == 0 {
		return 0
	}
	c := (l.Total + n + dp - 1) / dp
	for _, v := range l.Count {
		c = max(c, v)
	}
	return c
}

// Less orders ranks for placement: lower token load, then fewer requests,
// then lower index. It is a total order, so routing is deterministic. It
// reads only the placement counts, so retiring work matters only where the
// policy put it there.
func (l *Loads) Less(a, b int) bool {
	switch {
	case l.Load[a] != l.Load[b]:
		return l.Load[a] < l.Load[b]
	case l.Count[a] != l.Count[b]:
		return l.Count[a] < l.Count[b]
	}
	return a < b
}

// place records request tokens on rank r (tokens: the load it adds).
func (l *Loads) place(r, tokens int) {
	l.Room[r]--
	l.Count[r]++
	l.Load[r] += tokens
}

// ok reports whether rank r may take a request under cap: it has
// room, and (when strict) stays within the fair-share cap.
func (l *Loads) ok(r, cap int, strict bool) bool {
	return l.Room[r] > 0 && (!strict || l.Count[r] < cap)
}

func resize(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}
