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
	part   []float32   // [chunks][slots][heads][hd+2]: max, sum, acc per (slot, head)
	chunk  int         // floats between one chunk's states and the next
	split  int         // Workers.tasks[:split] are plain tasks, the rest members' tails
	tail   bool        // the job in flight runs the members' tails
}

type cascSeq struct {
	group, member int32 // where the seq was listed (-1: nowhere), for errors
	slot          int32 // its first query slot; -1: plain path
	shared        int32 // blocks the shared pass covered
	chunks        int32 // partial states to merge
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

// cascMaxChunks bounds the split of one shared run across tasks: each chunk
// costs every member row one more state to write and merge.
const cascMaxChunks = 8

// PagedAttentionGroups computes exactly what PagedAttention computes (same out), reading each
// group's shared run once per group and KV head for all member queries.
//
// Phase 1 (the shared pass) attends every member query of a group, for
// each kv head, to the group's shared blocks in one task per tile of rows
// (member query, query head), leaving each row's partial softmax state
// (max, sum, unnormalised output) in a buffer the Workers own. Phase 2 runs
// PagedAttention's tasks, a member's starting at block SharedBlocks from
// that state instead of from nothing; the online-softmax rescale that joins
// one block to the next joins the shared part to the tail, so the result is
// the same attention (to float rounding: the shared pass sums in another
// order and uses the AVX-512 exp polynomial). When a call has too few
// shared-pass tasks to keep the pool busy, each shared run is cut into
// chunks whose states the tail merges by the same rule.
//
// groups lists disjoint sets of seqs (see AttnGroup); a group with
// SharedBlocks 0 or one member, and every seq in no group, takes the plain
// path. With no groups this is PagedAttention.
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
		if c.seq[i].slot < 0 {
			w.tasks = appendAttnTasks(w.tasks, i, s, l.KVHeads)
		}
	}
	c.split = len(w.tasks)
	for i, s := range seqs {
		if c.seq[i].slot >= 0 {
			w.tasks = appendAttnTasks(w.tasks, i, s, l.KVHeads)
		}
	}
	w.ensureScratch(max(attnScratch(l, heads/l.KVHeads),
		cascRows(w.path)*(2*l.HeadDim+cascKeys(l.BlockSize)+2)))
	// Pass 1: the shared runs, with the plain tasks filling in behind them
	// (they need nothing from the shared pass). Pass 2: the members' tails.
	j := job{kind: jobCascade, path: w.path, out: out, q: q, l: l, seqs: seqs, heads: heads, scale: scale}
	c.tail = false
	w.job = j
	w.run(len(c.tasks) + c.split)
	c.tail = true
	w.job = j
	w.run(len(w.tasks) - c.split)
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
	c.groups, c.qrows, c.tasks = c.groups[:0], c.qrows[:0], c.tasks[:0]
	tiles := 0
	for gi, g := range groups {
		if g.SharedBlocks == 0 || len(g.Members) < 2 {
			continue
		}
		cg := cascGroup{src: int32(gi), lead: g.Members[0], slot0: int32(len(c.qrows)), shared: g.SharedBlocks}
		for _, m := range g.Members {
			s := seqs[m]
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
	c.part = grow(c.part, chunks*c.chunk)
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
			c.seq[m].chunks = cg.chunks
		}
	}
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
	if !c.tail {
		if t < len(c.tasks) {
			k := c.tasks[t]
			cCascadeTask(j.path, j.q, j.l, j.heads, j.seqs[k.lead].BlockTable, int(k.b0), int(k.b1), c.qrows[k.slot0:],
				int(k.m0), int(k.m1), int(k.kvh), j.scale, c.part[k.part:], s)
			return
		}
		t -= len(c.tasks)
	} else {
		t += c.split
	}
	task := w.tasks[t]
	sq := j.seqs[task.seq]
	cs := c.seq[task.seq]
	if cs.slot < 0 {
		cAttnTask(j.path, j.out, j.q, j.l, j.heads, sq.BlockTable, sq, task.kvh, task.i0, task.i1, j.scale, s)
		return
	}
	cAttnTail(j.path, j.out, j.q, j.l, j.heads, sq, task.kvh, task.i0, task.i1, j.scale, s,
		int(cs.shared), c.part[int(cs.slot)*j.heads*(j.l.HeadDim+2):], c.chunk, int(cs.chunks))
}
