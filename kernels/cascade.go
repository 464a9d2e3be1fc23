package kernels

import "fmt"

// AttnGroup is a set of seqs (indices into the seqs slice) whose block tables agree on
// their first SharedBlocks entries, with every member's queries at positions ≥
// SharedBlocks·BlockSize (so the shared run needs no causal mask).
type AttnGroup struct {
	SharedBlocks int32
	Members      []int32
}

// cascade is PagedAttentionGroups' plan and partial states, kept by the
// Workers between calls so that steady-state calls allocate nothing. It
// holds indices only, never caller memory.
type cascade struct {
	seq    []cascSeq   // per seq of the call
	groups []cascGroup // the groups that take the shared pass
	qrows  []int32     // q row of each member query slot, group by group
	tasks  []cascTask  // shared-pass tasks
	order  []int32     // pass 1's tiles: i < len(tasks) is tasks[i], else Workers.tasks[i-len(tasks)]
	merges []cascMerge // pass 2's tiles
	// part is [chunks+1][slots][heads][hd+2]: per (slot, head) softmax
	// states (max, sum, unnormalised acc) of a group's shared chunks, then
	// of the member's tail (at index chunks of its group).
	part  []float32
	chunk int  // floats between one chunk's states and the next
	merge bool // the job in flight is pass 2
}

type cascSeq struct {
	group, member int32 // where the seq was listed (-1: nowhere), for errors
	slot          int32 // its first query slot; -1: plain path
	shared        int32 // blocks the shared pass covers
	chunks        int32 // shared-pass chunks (its tail's state follows them)
}

type cascGroup struct {
	src                                int32 // index in the call's groups
	lead, slot0, slots, shared, chunks int32
}

// cascTask is one shared-pass task: rows [m0, m1) of a group (row m is the
// group's slot m/g, query head g of kv head kvh's GQA group) against its
// shared blocks [b0, b1), writing states at part.
type cascTask struct {
	lead, kvh, m0, m1, b0, b1, slot0 int32
	part                             int
}

// cascMerge is one pass-2 task: the slots [s0, s1) of group g.
type cascMerge struct{ g, s0, s1 int32 }

// cascMaxChunks bounds the split of one shared run across tasks: each chunk
// costs every member row one more state to write and merge.
const cascMaxChunks = 8

// cascMergeFloats is about the state floats one merge task reads.
const cascMergeFloats = 1 << 14

// PagedAttentionGroups computes exactly what PagedAttention computes (same out), reading each
// group's shared run once per group and KV head for all member queries.
//
// Pass 1 runs, side by side, the shared pass and PagedAttention's tasks.
// The shared pass attends every member query of a group, per kv head, to
// the group's shared blocks in one task per tile of rows (member query,
// query head): a small GEMM that reads each shared block once for the
// whole tile. It leaves each row's softmax state (max, sum, unnormalised
// output) in a buffer the Workers own. Members' PagedAttention tasks start
// at block SharedBlocks and leave their state there too; non-members' are
// unchanged. Pass 2 joins each member's states by the log-sum-exp rule and
// normalises. The shared pass is compute-bound and the tails stream
// memory, so interleaving them in one pass overlaps the two (continuing
// the tail from the shared state instead would serialise them). The
// result is the same attention to float rounding: sums run in another
// order and the AVX-512 exp is a polynomial. When a call has too few
// shared-pass tasks to keep the pool busy, each shared run is cut into
// chunks, merged by the same rule.
//
// groups lists disjoint sets of seqs (see AttnGroup); a group with
// SharedBlocks 0 or one member, and every seq in no group, takes the plain
// path. So does a member with a Window shorter than its context (its
// window leaves out some of the shared run); the rest of its group shares
// without it. With no groups this is PagedAttention. The state buffer
// holds (chunks+1)·(member queries)·heads·(HeadDim+2) floats (chunks ≤ 8, 1 when
// there are enough tasks), kept for the next call; groups are read during
// the call only.
func (w *Workers) PagedAttentionGroups(out, q []float32, l *KVLayer, seqs []AttnSeq, groups []AttnGroup, heads int, scale float32) error {
	if len(groups) == 0 {
		return w.PagedAttention(out, q, l, seqs, heads, scale)
	}
	if err := checkAttn(out, q, l, seqs, heads); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	c := &w.casc
	if err := c.check(l, seqs, groups); err != nil {
		return err
	}
	c.plan(l, seqs, groups, heads, cascRows(w.path), w.n)
	if len(c.tasks) == 0 { // no group has rows to share
		w.attnPlain(out, q, l, seqs, heads, scale)
		return nil
	}
	w.tasks = w.tasks[:0]
	for i, s := range seqs {
		w.tasks = appendAttnTasks(w.tasks, i, s, l.KVHeads)
	}
	// Each shared-pass task is followed by an even share of the others, so
	// that the workers are mostly at different kinds of work.
	n1, n2 := len(c.tasks), len(w.tasks)
	c.order = c.order[:0]
	for k := 0; k < n1; k++ {
		c.order = append(c.order, int32(k))
		for t := k * n2 / n1; t < (k+1)*n2/n1; t++ {
			c.order = append(c.order, int32(n1+t))
		}
	}
	w.ensureScratch(max(attnScratch(l, heads/l.KVHeads),
		cascRows(w.path)*(2*l.HeadDim+cascKeys(l.BlockSize)+2)))
	j := job{kind: jobCascade, path: w.path, out: out, q: q, l: l, seqs: seqs, heads: heads, scale: scale}
	c.merge = false
	w.job = j
	w.run(len(c.order))
	c.merge = true
	w.job = j
	w.run(len(c.merges))
	return nil
}

// check validates groups against seqs (already checked by checkAttn) and
// records each seq's group in c.seq.
func (c *cascade) check(l *KVLayer, seqs []AttnSeq, groups []AttnGroup) error {
	c.seq = grow(c.seq, len(seqs))
	for i := range c.seq {
		c.seq[i] = cascSeq{group: -1, member: -1, slot: -1}
	}
	for gi, g := range groups {
		if g.SharedBlocks < 0 {
			return fmt.Errorf("kernels: PagedAttentionGroups group %d has SharedBlocks %d, want ≥ 0", gi, g.SharedBlocks)
		}
		for k, m := range g.Members {
			if m < 0 || int(m) >= len(seqs) {
				return fmt.Errorf("kernels: PagedAttentionGroups group %d member %d is seq %d, outside the %d seqs", gi, k, m, len(seqs))
			}
			if cs := c.seq[m]; cs.group >= 0 {
				return fmt.Errorf("kernels: PagedAttentionGroups group %d member %d is seq %d, already member %d of group %d",
					gi, k, m, cs.member, cs.group)
			}
			c.seq[m].group, c.seq[m].member = int32(gi), int32(k)
			s := seqs[m]
			if first := int64(s.ContextLen) - int64(s.NumQ); int64(g.SharedBlocks)*int64(l.BlockSize) > first {
				return fmt.Errorf("kernels: PagedAttentionGroups group %d member %d (seq %d): %d shared blocks are %d positions, past its first query at position %d",
					gi, k, m, g.SharedBlocks, int64(g.SharedBlocks)*int64(l.BlockSize), first)
			}
			if k == 0 {
				continue
			}
			// checkAttn and the check above put SharedBlocks valid entries in
			// every member's table.
			lead := seqs[g.Members[0]].BlockTable
			for e, b := range s.BlockTable[:g.SharedBlocks] {
				if b != lead[e] {
					return fmt.Errorf("kernels: PagedAttentionGroups group %d member %d (seq %d) has block %d at table entry %d where member 0 (seq %d) has block %d",
						gi, k, m, b, e, g.Members[0], lead[e])
				}
			}
		}
	}
	return nil
}

// plan assigns query slots to the members of groups that share something
// and builds the shared-pass tasks: per group and kv head, tiles of mrows
// rows (a task costs the same for any number of its rows up to mrows, so
// tiles are full and parallelism comes from chunks of the shared run).
func (c *cascade) plan(l *KVLayer, seqs []AttnSeq, groups []AttnGroup, heads, mrows, workers int) {
	group := heads / l.KVHeads
	c.groups, c.qrows, c.tasks, c.merges = c.groups[:0], c.qrows[:0], c.tasks[:0], c.merges[:0]
	tiles := 0
	for gi, g := range groups {
		if g.SharedBlocks == 0 || countShares(seqs, g.Members) < 2 {
			continue
		}
		cg := cascGroup{src: int32(gi), lead: -1, slot0: int32(len(c.qrows)), shared: g.SharedBlocks}
		for _, m := range g.Members {
			s := seqs[m]
			if !seesAll(s) {
				continue // the plain path masks its window
			}
			if cg.lead < 0 {
				cg.lead = m
			}
			c.seq[m].slot, c.seq[m].shared = int32(len(c.qrows)), g.SharedBlocks
			for i := int32(0); i < s.NumQ; i++ {
				c.qrows = append(c.qrows, s.QStart+i)
			}
		}
		cg.slots = int32(len(c.qrows)) - cg.slot0
		if cg.slots == 0 {
			continue
		}
		c.groups = append(c.groups, cg)
		tiles += l.KVHeads * ceilDiv(int(cg.slots)*group, mrows)
	}
	chunks := 1
	if target := 4 * workers; workers > 1 && tiles > 0 && tiles < target {
		chunks = min(ceilDiv(target, tiles), cascMaxChunks)
	}
	state := heads * (l.HeadDim + 2) // floats per slot
	c.chunk = len(c.qrows) * state
	c.part = grow(c.part, (chunks+1)*c.chunk)
	// A chunk is at least one softmax step of keys.
	minBlocks := cascKeys(l.BlockSize) / l.BlockSize
	for gi := range c.groups {
		cg := &c.groups[gi]
		cg.chunks = int32(min(chunks, max(1, int(cg.shared)/minBlocks)))
		rows := int(cg.slots) * group
		for h := 0; h < l.KVHeads; h++ {
			for ch := 0; ch < int(cg.chunks); ch++ {
				b0 := int(cg.shared) * ch / int(cg.chunks)
				b1 := int(cg.shared) * (ch + 1) / int(cg.chunks)
				for m0 := 0; m0 < rows; m0 += mrows {
					c.tasks = append(c.tasks, cascTask{lead: cg.lead, kvh: int32(h), m0: int32(m0), m1: int32(min(m0+mrows, rows)),
						b0: int32(b0), b1: int32(b1), slot0: cg.slot0, part: ch*c.chunk + int(cg.slot0)*state})
				}
			}
		}
		for _, m := range groups[cg.src].Members {
			if c.seq[m].slot >= 0 {
				c.seq[m].chunks = cg.chunks
			}
		}
		per := int32(max(1, cascMergeFloats/state))
		for s0 := int32(0); s0 < cg.slots; s0 += per {
			c.merges = append(c.merges, cascMerge{g: int32(gi), s0: cg.slot0 + s0, s1: cg.slot0 + min(s0+per, cg.slots)})
		}
	}
}

// seesAll reports whether every query of s sees every earlier position:
// no window, or the context within it. Only such a member takes its
// group's shared pass, which is unmasked; one whose window leaves out part
// of the shared run takes the plain path, which masks it (the simplest
// rule that stays exact: sharing stops paying once the shared run leaves
// the window anyway).
func seesAll(s AttnSeq) bool { return s.Window == 0 || s.ContextLen <= s.Window }

// countShares is the number of members that can take the shared pass.
func countShares(seqs []AttnSeq, members []int32) int {
	n := 0
	for _, m := range members {
		if seesAll(seqs[m]) {
			n++
		}
	}
	return n
}

// grow returns s resized to n elements, reallocating only when its
// capacity is short (the contents are not kept).
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// cascadeTile runs tile t of a PagedAttentionGroups pass on worker scratch s.
func (w *Workers) cascadeTile(t int, s []float32) {
	j, c := &w.job, &w.casc
	hd := j.l.HeadDim
	if c.merge {
		m := c.merges[t]
		cCascadeMerge(j.out, c.part, c.chunk, int(c.groups[m.g].chunks)+1, c.qrows, int(m.s0), int(m.s1), j.heads, hd)
		return
	}
	o := int(c.order[t])
	if o < len(c.tasks) {
		k := c.tasks[o]
		cCascadeTask(j.path, j.q, j.l, j.heads, j.seqs[k.lead].BlockTable, int(k.b0), int(k.b1), c.qrows[k.slot0:],
			int(k.m0), int(k.m1), int(k.kvh), j.scale, c.part[k.part:], s)
		return
	}
	task := w.tasks[o-len(c.tasks)]
	sq := j.seqs[task.seq]
	cs := c.seq[task.seq]
	if cs.slot < 0 {
		cAttnTask(j.path, j.out, j.q, j.l, j.heads, sq.BlockTable, sq, task.kvh, task.i0, task.i1, j.scale, s)
		return
	}
	cAttnTail(j.path, j.out, j.q, j.l, j.heads, sq, task.kvh, task.i0, task.i1, j.scale, s,
		int(cs.shared), c.part[int(cs.chunks)*c.chunk+int(cs.slot)*j.heads*(hd+2):])
}
