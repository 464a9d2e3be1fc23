package policy

import (
	"fmt"
	"math"
	"slices"

	"github.com/turnstile-llm/turnstile/kvpool"
)

// Check verifies every invariant and returns the first violation. It
// recomputes both accountings from scratch (the distinct blocks also through
// kvpool.Pool.DistinctBlocks over the ACTIVE programs' sequences), so it is
// O(programs + pool) and allocates; tests call it after every lifecycle event
// and Tick. Growth the engine made since the last Grew or Tick is reported as
// unobserved.
//
//   - each program is in exactly one state, and in exactly the containers of
//     that state: no program is both ACTIVE and PAUSED;
//   - only ACTIVE programs hold handles or counted blocks; only ACTIVE ACTING
//     programs hold pins, so every pinned block belongs to an ACTIVE program;
//   - counted blocks equal the handle's block table;
//   - the token sums, the per-block counts, distinct count and estimates equal a
//     from-scratch recomputation; |ACTIVE| ≤ MaxActive;
//   - with no program left nothing is pinned and used is 0 under both.
func (c *Controller) Check() error {
	if c.m.lost > 0 {
		return fmt.Errorf("policy: %d live sequences were released by the engine without Preempted or TurnEnded", c.m.lost)
	}
	var nActive, sumR, sumA, sumEst, nMarked, nLease int
	var nQueue [numClasses]int
	// Scratch kept between Checks: tests call Check after every event.
	handles, counted := c.chk.handles[:0], c.chk.counted[:0]
	defer func() { c.chk.handles, c.chk.counted = handles[:0], clear0(counted) }()
	for id, p := range c.progs {
		if p.id != id {
			return fmt.Errorf("policy: program %q filed under %q", p.id, id)
		}
		inLease := p.links[linkLease].list != nil
		if inLease {
			nLease++
		}
		if p.state != StateActive {
			if p.handle != kvpool.InvalidSeq || p.live || len(p.blocks) > 0 || p.est != 0 || p.marked {
				return fmt.Errorf("policy: %v program %q holds sequence %d (live %v), %d counted blocks, estimate %d, marked %v",
					p.state, id, p.handle, p.live, len(p.blocks), p.est, p.marked)
			}
			if p.hIdx >= 0 || p.rIdx >= 0 {
				return fmt.Errorf("policy: %v program %q is in an ACTIVE container (heap %d, reasoning %d)", p.state, id, p.hIdx, p.rIdx)
			}
			cls := c.class(p)
			if p.state == StateWaiting && !p.pending {
				return fmt.Errorf("policy: WAITING program %q has no pending turn", id)
			}
			if p.links[linkQueue].list != &c.queues[cls] {
				return fmt.Errorf("policy: %v program %q (pending %v) is not in resume class %d", p.state, id, p.pending, cls)
			}
			nQueue[cls]++
			if inLease != (cls == classActing) {
				return fmt.Errorf("policy: %v program %q (pending %v): in lease list %v", p.state, id, p.pending, inLease)
			}
			continue
		}
		// ACTIVE.
		nActive++
		if p.pending || p.links[linkQueue].list != nil {
			return fmt.Errorf("policy: program %q is both ACTIVE and queued (pending %v)", id, p.pending)
		}
		switch p.status {
		case StatusReasoning:
			sumR += p.tokens
			sumEst += p.est
			if p.rIdx < 0 || p.rIdx >= len(c.reasoning) || c.reasoning[p.rIdx] != p || p.hIdx >= 0 || inLease {
				return fmt.Errorf("policy: REASONING program %q misfiled (reasoning %d, heap %d, lease %v)", id, p.rIdx, p.hIdx, inLease)
			}
			if p.marked {
				nMarked++
			}
			want := 0
			if !p.live {
				want = c.estBlocks(p) * c.bs
			}
			if p.est != want {
				return fmt.Errorf("policy: program %q is charged estimate %d tokens, want %d", id, p.est, want)
			}
		case StatusActing:
			sumA += p.tokens
			if p.hIdx < 0 || p.hIdx >= len(c.acting) || c.acting[p.hIdx] != p || p.rIdx >= 0 || !inLease || p.live || p.marked || p.est != 0 {
				return fmt.Errorf("policy: ACTING program %q misfiled (heap %d, reasoning %d, lease %v, live %v, marked %v, est %d)",
					id, p.hIdx, p.rIdx, inLease, p.live, p.marked, p.est)
			}
		default:
			return fmt.Errorf("policy: ACTIVE program %q has status %v", id, p.status)
		}
		if p.handle == kvpool.InvalidSeq {
			if len(p.blocks) > 0 || p.live {
				return fmt.Errorf("policy: program %q counts %d blocks without a sequence", id, len(p.blocks))
			}
			continue
		}
		if !c.pool.Valid(p.handle) {
			return fmt.Errorf("policy: program %q holds released sequence %d (live %v)", id, p.handle, p.live)
		}
		if bl := c.pool.Blocks(p.handle); !slices.Equal(bl, p.blocks) {
			return fmt.Errorf("policy: program %q counts %d blocks but sequence %d holds %d (unobserved growth?)",
				id, len(p.blocks), p.handle, len(bl))
		}
		handles = append(handles, p.handle)
		counted = append(counted, p)
	}
	for i, p := range c.reasoning {
		// Every ACTIVE program was found at its index above and the counts
		// agree, so a stale entry shows here as a wrong index or state.
		if p.rIdx != i || p.state != StateActive || p.status != StatusReasoning {
			return fmt.Errorf("policy: reasoning list entry %d (%q) is stale", i, p.id)
		}
	}
	for i, p := range c.acting {
		if p.hIdx != i || p.state != StateActive || p.status != StatusActing {
			return fmt.Errorf("policy: acting heap entry %d (%q) is stale", i, p.id)
		}
		if i > 0 && less(p, c.acting[(i-1)/2]) {
			return fmt.Errorf("policy: acting heap order broken at %d (%q)", i, p.id)
		}
	}
	if b := c.blocked; b != nil && (c.progs[b.id] != b || b.state == StateActive) {
		return fmt.Errorf("policy: blocked head %q is not queued (%v)", b.id, b.state)
	}
	for cls := range c.queues {
		if err := checkList(&c.queues[cls], nQueue[cls]); err != nil {
			return fmt.Errorf("policy: resume class %d: %w", cls, err)
		}
	}
	if err := checkList(&c.lease, nLease); err != nil {
		return fmt.Errorf("policy: lease list: %w", err)
	}
	for p := c.lease.head; p != nil; p = p.links[linkLease].next {
		if next := p.links[linkLease].next; next != nil && next.lastActive.Before(p.lastActive) {
			return fmt.Errorf("policy: lease list out of order at %q", p.id)
		}
	}
	distinct, err := c.recount(counted)
	if err != nil {
		return err
	}
	if pd := c.pool.DistinctBlocks(handles); distinct != c.distinct || pd != c.distinct {
		return fmt.Errorf("policy: %d distinct blocks counted; recomputed %d, kvpool.Pool.DistinctBlocks %d", c.distinct, distinct, pd)
	}
	switch {
	case nActive != c.nActive || len(c.reasoning)+len(c.acting) != nActive:
		return fmt.Errorf("policy: %d ACTIVE programs counted (%d reasoning + %d acting), %d found",
			c.nActive, len(c.reasoning), len(c.acting), nActive)
	case nActive > c.cfg.MaxActive:
		return fmt.Errorf("policy: %d ACTIVE programs exceed the %d seats", nActive, c.cfg.MaxActive)
	case sumR != c.sumReasoning || sumA != c.sumActing:
		return fmt.Errorf("policy: token sums reasoning %d / acting %d, recomputed %d / %d", c.sumReasoning, c.sumActing, sumR, sumA)
	case sumEst != c.sumEst:
		return fmt.Errorf("policy: block estimates %d tokens, recomputed %d", c.sumEst, sumEst)
	case nMarked != c.nMarked:
		return fmt.Errorf("policy: %d marked counted, %d found", c.nMarked, nMarked)
	}
	if len(c.progs) == 0 && (c.UsedTokens() != 0 || c.UsedBlocks() != 0 || c.distinct != 0 || len(handles) != 0) {
		return fmt.Errorf("policy: no programs left but used tokens %v, blocks %d, %d distinct blocks, %d handles",
			c.UsedTokens(), c.UsedBlocks(), c.distinct, len(handles))
	}
	if u := c.UsedTokens(); math.IsNaN(u) || u < 0 {
		return fmt.Errorf("policy: used tokens is %v", u)
	}
	return nil
}

// checkList verifies a plist's links and length.
func checkList(l *plist, want int) error {
	n := 0
	var prev *program
	for p := l.head; p != nil; p = p.links[l.kind].next {
		k := p.links[l.kind]
		if k.list != l || k.prev != prev {
			return fmt.Errorf("links broken at %q", p.id)
		}
		prev = p
		if n++; n > want {
			return fmt.Errorf("more than %d members (cycle?)", want)
		}
	}
	if n != want || l.n != want || l.tail != prev {
		return fmt.Errorf("%d linked, length %d, %d members expected", n, l.n, want)
	}
	return nil
}

// recount recomputes the per-block counts from the counted programs' block
// lists into scratch and compares them with the maintained ones. Only the
// blocks involved are visited: together with Σ refs (maintained) equal to
// Σ list lengths, matching counts on them mean every other block counts 0.
func (c *Controller) recount(counted []*program) (int, error) {
	if c.chk.refs == nil {
		c.chk.refs = make([]int32, len(c.refs))
	}
	refs := c.chk.refs // all zero between calls
	distinct, total := 0, 0
	for _, p := range counted {
		for _, b := range p.blocks {
			if refs[b] == 0 {
				distinct++
			}
			refs[b]++
		}
		total += len(p.blocks)
	}
	// Compare and zero the scratch in one pass: a block is compared at its
	// first visit; later visits find 0 and skip it.
	var err error
	for _, p := range counted {
		for _, b := range p.blocks {
			if n := refs[b]; n > 0 && n != c.refs[b] && err == nil {
				err = fmt.Errorf("policy: block %d counted for %d ACTIVE programs, recomputed %d", b, c.refs[b], n)
			}
			refs[b] = 0
		}
	}
	if err != nil {
		return 0, err
	}
	if total != c.refsSum {
		return 0, fmt.Errorf("policy: %d block references counted, %d in ACTIVE programs' lists", c.refsSum, total)
	}
	return distinct, nil
}

// clear0 empties s, dropping its pointers for the collector.
func clear0(s []*program) []*program {
	clear(s)
	return s[:0]
}
