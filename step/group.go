package step

import (
	"fmt"
	"slices"
)

// Group is a set of a batch's sequences whose block tables begin with the
// same SharedBlocks block ids, so they read the same KV bytes for positions
// [0, SharedBlocks·BlockSize). A runner may attend to that shared run once
// for all members (cascade attention: every member query against the shared
// keys at once, then each member's own tail, merged by the log-sum-exp rule)
// or ignore the group: the result is the same attention either way.
//
// Every member's new tokens come after the run (SharedBlocks·BlockSize ≤
// ContextLen − NumTokens), so the shared pass needs no causal mask.
type Group struct {
	// SharedBlocks is the length of the shared run, in blocks (≥ 1).
	SharedBlocks int32
	// First and Count select the members in Batch.GroupSeqs: indices into
	// Batch.Seqs, at least two, each sequence in at most one group.
	First, Count int32
}

// Members returns g's member indices into b.Seqs (a view of b.GroupSeqs).
func (b *Batch) Members(g Group) []int32 { return b.GroupSeqs[g.First : g.First+g.Count] }

// Grouper finds a batch's groups. It keeps its scratch between steps so that
// grouping allocates nothing in steady state; the zero value is ready to use.
// Not safe for concurrent use.
type Grouper struct {
	// MinBlocks is the shortest shared run worth a group, in blocks; 0 or
	// less turns grouping off.
	MinBlocks int32
	rows      []int32 // eligible rows, sorted by block table
	lcp       []int32 // lcp[k]: shared leading blocks of rows[k] and rows[k+1]
	loose     []int32 // rows split left ungrouped (split's stack)
}

// Group fills b.Groups and b.GroupSeqs from the block tables of b.Seqs (any
// previous groups are dropped). bs is the block size in positions.
//
// A sequence can share only the blocks that lie wholly before its first new
// token. Rows are sorted by their tables, so rows with a common leading run
// are adjacent and the common run of a span of rows is the minimum of its
// adjacent common runs. Each row joins at most one group; where sharing is
// nested (a family of rows sharing a long run inside a larger set sharing a
// short one), the span is split where that saves more block reads:
// a group of n members sharing L blocks saves (n−1)·L block reads, and a span
// either forms one group at its minimum run or splits at that minimum into
// sub-spans grouped the same way (the rows they leave alone forming one more
// group at the minimum), whichever saves more. So no two ungrouped rows share
// MinBlocks or more. Members are listed in batch order. Cost: one sort of the
// eligible rows (comparisons stop at the first differing block) and one pass
// over the adjacent pairs.
func (g *Grouper) Group(b *Batch, bs int) {
	b.Groups, b.GroupSeqs = b.Groups[:0], b.GroupSeqs[:0]
	if g.MinBlocks <= 0 || len(b.Seqs) < 2 || bs <= 0 {
		return
	}
	g.rows = g.rows[:0]
	for i := range b.Seqs {
		if eligible(&b.Seqs[i], bs) >= g.MinBlocks {
			g.rows = append(g.rows, int32(i))
		}
	}
	if len(g.rows) < 2 {
		return
	}
	slices.SortFunc(g.rows, func(x, y int32) int {
		a, c := sharable(&b.Seqs[x], bs), sharable(&b.Seqs[y], bs)
		if r := slices.Compare(a, c); r != 0 {
			return r
		}
		return int(x - y) // stable order for equal tables
	})
	g.lcp = g.lcp[:0]
	for k := 0; k+1 < len(g.rows); k++ {
		g.lcp = append(g.lcp, commonRun(sharable(&b.Seqs[g.rows[k]], bs), sharable(&b.Seqs[g.rows[k+1]], bs)))
	}
	g.loose = g.loose[:0]
	g.split(b, 0, len(g.rows))
	for _, gr := range b.Groups { // members in batch order
		slices.Sort(b.Members(gr))
	}
}

// split groups rows[lo:hi] (see Group) and returns the block reads saved.
// Rows it leaves ungrouped are pushed on g.loose.
func (g *Grouper) split(b *Batch, lo, hi int) int64 {
	if hi-lo < 2 {
		if hi-lo == 1 {
			g.loose = append(g.loose, g.rows[lo])
		}
		return 0
	}
	// The span's common run is its smallest adjacent run.
	m := g.lcp[lo]
	for k := lo + 1; k < hi-1; k++ {
		m = min(m, g.lcp[k])
	}
	markG, markS, markL := len(b.Groups), len(b.GroupSeqs), len(g.loose)
	var saved int64
	start := lo
	for k := lo; k < hi; k++ {
		if k == hi-1 || g.lcp[k] == m {
			saved += g.split(b, start, k+1)
			start = k + 1
		}
	}
	whole := int64(0)
	if m >= g.MinBlocks {
		whole = int64(hi-lo-1) * int64(m)
		// Rows the sub-spans left alone still share m blocks with each
		// other (every row of the span does).
		if loose := g.loose[markL:]; len(loose) >= 2 {
			g.add(b, m, loose)
			saved += int64(len(loose)-1) * int64(m)
			g.loose = g.loose[:markL]
		}
	}
	if whole >= saved && whole > 0 { // one pass over the run beats several
		b.Groups, b.GroupSeqs, g.loose = b.Groups[:markG], b.GroupSeqs[:markS], g.loose[:markL]
		g.add(b, m, g.rows[lo:hi])
		return whole
	}
	return saved
}

// add appends a group of members sharing shared blocks.
func (g *Grouper) add(b *Batch, shared int32, members []int32) {
	b.Groups = append(b.Groups, Group{SharedBlocks: shared, First: int32(len(b.GroupSeqs)), Count: int32(len(members))})
	b.GroupSeqs = append(b.GroupSeqs, members...)
}

// eligible is the number of sb's blocks wholly before its first new token.
func eligible(sb *SeqBatch, bs int) int32 {
	return (sb.ContextLen - sb.NumTokens) / int32(bs)
}

// sharable is the part of sb's block table a group may share.
func sharable(sb *SeqBatch, bs int) []int32 {
	return sb.BlockTable[:min(int(eligible(sb, bs)), len(sb.BlockTable))]
}

// commonRun is the number of equal leading entries of a and c.
func commonRun(a, c []int32) int32 {
	n := min(len(a), len(c))
	for i := 0; i < n; i++ {
		if a[i] != c[i] {
			return int32(i)
		}
	}
	return int32(n)
}

// validateGroups checks b.Groups against b.Seqs (see Group); stamp is a
// per-sequence scratch of at least len(b.Seqs) entries, zeroed on return.
func validateGroups(b *Batch, bs int32, stamp []bool) error {
	defer clear(stamp[:len(b.Seqs)])
	for gi, g := range b.Groups {
		if g.SharedBlocks < 1 || g.Count < 2 || g.First < 0 || int(g.First)+int(g.Count) > len(b.GroupSeqs) {
			return fmt.Errorf("step: group %d shares %d blocks among members [%d, %d) of %d group entries; want ≥ 1 block, ≥ 2 members inside the entries",
				gi, g.SharedBlocks, g.First, int(g.First)+int(g.Count), len(b.GroupSeqs))
		}
		members := b.Members(g)
		lead := members[0]
		for _, m := range members {
			if m < 0 || int(m) >= len(b.Seqs) {
				return fmt.Errorf("step: group %d: member %d outside the batch's %d sequences", gi, m, len(b.Seqs))
			}
			if stamp[m] {
				return fmt.Errorf("step: group %d: seq %d is in more than one group (or twice in one)", gi, m)
			}
			stamp[m] = true
			sb := &b.Seqs[m]
			if eligible(sb, int(bs)) < g.SharedBlocks {
				return fmt.Errorf("step: group %d: seq %d (seat %d) has %d blocks before its first new token (context %d, %d new tokens); the group shares %d",
					gi, m, sb.Seat, eligible(sb, int(bs)), sb.ContextLen, sb.NumTokens, g.SharedBlocks)
			}
			if m == lead {
				continue
			}
			if r := commonRun(sb.BlockTable[:g.SharedBlocks], b.Seqs[lead].BlockTable[:g.SharedBlocks]); r < g.SharedBlocks {
				return fmt.Errorf("step: group %d: seq %d (seat %d) has block %d at table entry %d where seq %d has block %d; the group shares %d blocks",
					gi, m, sb.Seat, sb.BlockTable[r], r, lead, b.Seqs[lead].BlockTable[r], g.SharedBlocks)
			}
		}
	}
	return nil
}
