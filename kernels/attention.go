package kernels

import "fmt"

// KVLayer is one layer's paged KV cache: K and V are float32
// [NumBlocks][KVHeads][BlockSize][HeadDim]. Position p of a sequence lives
// in block table[p/BlockSize], slot p%BlockSize.
type KVLayer struct {
	K, V                                   []float32
	NumBlocks, KVHeads, BlockSize, HeadDim int
}

// Validate checks the shape against the slice lengths.
func (l *KVLayer) Validate() error {
	if l.NumBlocks <= 0 || l.KVHeads <= 0 || l.BlockSize <= 0 || l.HeadDim <= 0 {
		return fmt.Errorf("kernels: KVLayer shape blocks=%d kvHeads=%d blockSize=%d headDim=%d must be positive",
			l.NumBlocks, l.KVHeads, l.BlockSize, l.HeadDim)
	}
	n := l.NumBlocks * l.KVHeads * l.BlockSize * l.HeadDim
	if len(l.K) != n || len(l.V) != n {
		return fmt.Errorf("kernels: KVLayer needs K and V of %d floats, got K=%d V=%d", n, len(l.K), len(l.V))
	}
	return nil
}

// checkTable verifies that blockTable covers positions [0, upTo) with valid
// block ids.
func (l *KVLayer) checkTable(blockTable []int32, upTo int) error {
	need := ceilDiv(upTo, l.BlockSize)
	if len(blockTable) < need {
		return fmt.Errorf("kernels: block table has %d blocks, %d positions need %d", len(blockTable), upTo, need)
	}
	for i, b := range blockTable[:need] {
		if b < 0 || int(b) >= l.NumBlocks {
			return fmt.Errorf("kernels: block table entry %d is block %d, layer has %d", i, b, l.NumBlocks)
		}
	}
	return nil
}

// KVWrite stores one sequence's new tokens: k and v are [len(positions)]
// [KVHeads*HeadDim]; token i goes to position positions[i] through
// blockTable.
func KVWrite(l *KVLayer, k, v []float32, positions []int32, blockTable []int32) error {
	if err := l.Validate(); err != nil {
		return err
	}
	row := l.KVHeads * l.HeadDim
	if len(k) != len(positions)*row || len(v) != len(positions)*row {
		return fmt.Errorf("kernels: KVWrite of %d tokens needs k and v of %d floats, got k=%d v=%d",
			len(positions), len(positions)*row, len(k), len(v))
	}
	for i, p := range positions {
		if p < 0 {
			return fmt.Errorf("kernels: KVWrite position %d (token %d) is negative", p, i)
		}
		bi := int(p) / l.BlockSize
		if bi >= len(blockTable) || blockTable[bi] < 0 || int(blockTable[bi]) >= l.NumBlocks {
			return fmt.Errorf("kernels: KVWrite position %d needs block table entry %d (table %d long, layer %d blocks)",
				p, bi, len(blockTable), l.NumBlocks)
		}
	}
	hd := l.HeadDim
	for i, p := range positions {
		blk, slot := int(blockTable[int(p)/l.BlockSize]), int(p)%l.BlockSize
		for h := 0; h < l.KVHeads; h++ {
			dst := ((blk*l.KVHeads+h)*l.BlockSize + slot) * hd
			src := i*row + h*hd
			copy(l.K[dst:dst+hd], k[src:src+hd])
			copy(l.V[dst:dst+hd], v[src:src+hd])
		}
	}
	return nil
}

// AttnSeq describes one sequence of an attention batch: its queries are q
// rows QStart..QStart+NumQ-1, at positions ContextLen-NumQ..ContextLen-1,
// and its keys are positions 0..ContextLen-1 (already written) reached
// through BlockTable.
type AttnSeq struct {
	QStart, NumQ, ContextLen int32
	BlockTable               []int32
}

type attnTask struct {
	seq, kvh, i0, i1 int
}

// attnQueryTile is the most queries of one sequence in one task: small
// enough to split long prefills across cores, large enough that a K/V block
// is reused by many queries while it is in cache.
const attnQueryTile = 16

// PagedAttention computes causal multi-head attention for every sequence:
// out[row][h] = Σ_p softmax_p(scale·q[row][h]·K[p]) V[p] over the positions
// p ≤ the query's own, where query head h reads kv head h/(heads/KVHeads)
// (GQA). q and out are [rows][heads*HeadDim]. The softmax is computed online
// block by block; each K/V block is read once per group of query heads.
// Work is split into (sequence, kv head, query tile) tasks. Sequences'
// query rows must not overlap; rows of out no sequence covers are left
// untouched.
func (w *Workers) PagedAttention(out, q []float32, l *KVLayer, seqs []AttnSeq, heads int, scale float32) error {
	if err := checkAttn(out, q, l, seqs, heads); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.attnPlain(out, q, l, seqs, heads, scale)
	return nil
}

// checkAttn validates PagedAttention's arguments.
func checkAttn(out, q []float32, l *KVLayer, seqs []AttnSeq, heads int) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if heads <= 0 || heads%l.KVHeads != 0 {
		return fmt.Errorf("kernels: PagedAttention heads=%d is not a positive multiple of kvHeads=%d", heads, l.KVHeads)
	}
	row := heads * l.HeadDim
	if len(q)%row != 0 || len(out) != len(q) {
		return fmt.Errorf("kernels: PagedAttention q has %d floats and out %d, want equal multiples of heads*headDim = %d",
			len(q), len(out), row)
	}
	rows := len(q) / row
	for i, s := range seqs {
		if s.NumQ < 0 || s.QStart < 0 || int(s.QStart)+int(s.NumQ) > rows {
			return fmt.Errorf("kernels: PagedAttention seq %d queries [%d, %d) outside the %d q rows", i, s.QStart, s.QStart+s.NumQ, rows)
		}
		if s.ContextLen < s.NumQ {
			return fmt.Errorf("kernels: PagedAttention seq %d has context %d shorter than its %d queries", i, s.ContextLen, s.NumQ)
		}
		if err := l.checkTable(s.BlockTable, int(s.ContextLen)); err != nil {
			return fmt.Errorf("seq %d: %w", i, err)
		}
	}
	return nil
}

// attnPlain runs PagedAttention's (sequence, kv head, query tile) tasks on
// validated arguments; w.mu is held.
func (w *Workers) attnPlain(out, q []float32, l *KVLayer, seqs []AttnSeq, heads int, scale float32) {
	group := heads / l.KVHeads
	w.tasks = w.tasks[:0]
	for i, s := range seqs {
		w.tasks = appendAttnTasks(w.tasks, i, s, l.KVHeads)
	}
	if len(w.tasks) == 0 {
		return
	}
	w.ensureScratch(attnScratch(l, group))
	w.job = job{kind: jobAttn, path: w.path, out: out, q: q, l: l, seqs: seqs, heads: heads, scale: scale}
	w.run(len(w.tasks))
}

// appendAttnTasks appends sequence i's (kv head, query tile) tasks.
func appendAttnTasks(tasks []attnTask, i int, s AttnSeq, kvHeads int) []attnTask {
	for h := 0; h < kvHeads; h++ {
		for i0 := 0; i0 < int(s.NumQ); i0 += attnQueryTile {
			tasks = append(tasks, attnTask{seq: i, kvh: h, i0: i0, i1: min(i0+attnQueryTile, int(s.NumQ))})
		}
	}
	return tasks
}

// attnScratch is the floats one attention task needs (see tk_attn_task).
func attnScratch(l *KVLayer, group int) int {
	return attnQueryTile*group*(l.HeadDim+2) + l.BlockSize
}
