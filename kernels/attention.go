package kernels

import (
	"fmt"
	"strings"
	"unsafe"
)

// KVLayer is one layer's paged KV cache: K and V hold
// [NumBlocks][KVHeads][BlockSize][HeadDim] elements of Type. Position p of
// a sequence lives in block table[p/BlockSize], slot p%BlockSize. With
// Type F32 (the zero value) the elements are the float32 K and V; with F16
// or BF16 they are the raw 16-bit values in K16 and V16 (same layout, half
// the bytes), rounded to nearest even by KVWrite and widened to float32 in
// registers by the attention kernels. The unused pair is nil. The caller
// owns the slices; the kernels read and write them only during a call.
type KVLayer struct {
	Type                                   DType
	K, V                                   []float32
	K16, V16                               []uint16
	NumBlocks, KVHeads, BlockSize, HeadDim int
}

// KVTypes lists the KV cache element types, cheapest last.
var KVTypes = [...]DType{F32, F16, BF16}

// ParseKVType parses a KV cache element type name: f32, f16 or bf16 (any
// case).
func ParseKVType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "f32":
		return F32, nil
	case "f16":
		return F16, nil
	case "bf16":
		return BF16, nil
	}
	return F32, fmt.Errorf("kernels: KV cache type %q: want f32, f16 or bf16", s)
}

// KVElemBytes is the bytes of one KV cache element of type t (4 or 2), or
// an error naming t when it is not a KV cache type.
func KVElemBytes(t DType) (int, error) {
	switch t {
	case F32:
		return 4, nil
	case F16, BF16:
		return 2, nil
	}
	return 0, fmt.Errorf("kernels: %v is not a KV cache type (want F32, F16 or BF16)", t)
}

// Validate checks the type and shape against the slice lengths.
func (l *KVLayer) Validate() error {
	if l.NumBlocks <= 0 || l.KVHeads <= 0 || l.BlockSize <= 0 || l.HeadDim <= 0 {
		return fmt.Errorf("kernels: KVLayer shape blocks=%d kvHeads=%d blockSize=%d headDim=%d must be positive",
			l.NumBlocks, l.KVHeads, l.BlockSize, l.HeadDim)
	}
	n := l.NumBlocks * l.KVHeads * l.BlockSize * l.HeadDim
	switch l.Type {
	case F32:
		if len(l.K) != n || len(l.V) != n || l.K16 != nil || l.V16 != nil {
			return fmt.Errorf("kernels: F32 KVLayer needs K and V of %d floats and no K16/V16, got K=%d V=%d K16=%d V16=%d",
				n, len(l.K), len(l.V), len(l.K16), len(l.V16))
		}
	case F16, BF16:
		if len(l.K16) != n || len(l.V16) != n || l.K != nil || l.V != nil {
			return fmt.Errorf("kernels: %v KVLayer needs K16 and V16 of %d values and no K/V, got K16=%d V16=%d K=%d V=%d",
				l.Type, n, len(l.K16), len(l.V16), len(l.K), len(l.V))
		}
	default:
		return fmt.Errorf("kernels: KVLayer type %v: want F32, F16 or BF16", l.Type)
	}
	return nil
}

// Bytes is the memory of the layer's K and V.
func (l *KVLayer) Bytes() int64 {
	return 4*int64(len(l.K)+len(l.V)) + 2*int64(len(l.K16)+len(l.V16))
}

// ptrs returns the K and V data for C (float or uint16 bits, per Type).
func (l *KVLayer) ptrs() (k, v unsafe.Pointer) {
	if l.Type == F32 {
		return unsafe.Pointer(unsafe.SliceData(l.K)), unsafe.Pointer(unsafe.SliceData(l.V))
	}
	return unsafe.Pointer(unsafe.SliceData(l.K16)), unsafe.Pointer(unsafe.SliceData(l.V16))
}

// readRow widens n elements of K (or V when v) from element off into dst.
func (l *KVLayer) readRow(dst []float32, off, n int, v bool) {
	switch l.Type {
	case F32:
		src := l.K
		if v {
			src = l.V
		}
		copy(dst[:n], src[off:off+n])
	default:
		src := l.K16
		if v {
			src = l.V16
		}
		for i, h := range src[off : off+n] {
			if l.Type == F16 {
				dst[i] = F16ToF32(h)
			} else {
				dst[i] = BF16ToF32(h)
			}
		}
	}
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
// blockTable. A 16-bit layer gets each value rounded to nearest even (on
// the best path the CPU has; every path rounds the same).
func KVWrite(l *KVLayer, k, v []float32, positions []int32, blockTable []int32) error {
	if l.Type == F32 {
		return kvWrite(Portable, l, k, v, positions, blockTable)
	}
	return kvWrite(BestPath(), l, k, v, positions, blockTable)
}

// kvWrite is KVWrite on path p (16-bit layers only; F32 is a copy).
func kvWrite(p Path, l *KVLayer, k, v []float32, positions []int32, blockTable []int32) error {
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
	if l.Type != F32 {
		if len(positions) > 0 {
			cKVWrite16(p, l, k, v, positions, blockTable)
		}
		return nil
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
//
// Window > 0 is a sliding window in positions: the query at position p
// attends to the keys k with p-Window < k ≤ p only (Window of them, its
// own included), as HF transformers' sliding_window_overlay (kv_idx >
// q_idx - sliding_window, masking_utils.py, used by Mistral and by Qwen2's
// sliding layers) and llama.cpp's LLAMA_SWA_TYPE_STANDARD (masked when
// p1 - p0 >= n_swa) define it. Window 0 is none (every k ≤ p).
type AttnSeq struct {
	QStart, NumQ, ContextLen int32
	Window                   int32
	BlockTable               []int32
}

type attnTask struct {
	seq, kvh, i0, i1 int
}

// attnQueryTile is the most queries of one sequence in one task: small
// enough to split long prefills across cores, large enough that a K/V block
// is reused by many queries while it is in cache. It is also the AVX-512
// tile body's lane count (one query per float32 lane), which takes tasks
// of 8 or more queries; it must stay ≤ 16.
const attnQueryTile = 16

// PagedAttention computes causal multi-head attention for every sequence:
// out[row][h] = Σ_p softmax_p(scale·q[row][h]·K[p]) V[p] over the positions
// p ≤ the query's own (and inside its sequence's Window when set; blocks
// wholly before a task's windows are not read), where query head h reads kv head h/(heads/KVHeads)
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
		if s.Window < 0 {
			return fmt.Errorf("kernels: PagedAttention seq %d has window %d, want ≥ 0 (0: none)", i, s.Window)
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

// attnScratch is the floats one attention task needs (see tk_attn_task):
// the per-query loops' [tile·group][hd+2] state and one block's scores, or
// the AVX-512 tile body's transposed queries and outputs, [group][hd][16]
// each, its max and sum rows, one run's weights and one block of K and V
// widened to float32 (TK_S5_TILE).
func attnScratch(l *KVLayer, group int) int {
	tile := group*(2*l.HeadDim*16+32) + 256 + 2*l.BlockSize*l.HeadDim
	return max(attnQueryTile*group*(l.HeadDim+2)+l.BlockSize, tile)
}
