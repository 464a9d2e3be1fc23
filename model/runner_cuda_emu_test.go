package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// cudaEmu implements cudaExec over host memory: a device address is base +
// an offset into mem, and each operation runs the CPU kernels (or a plain
// loop) on views of mem. Driving the CUDA runner's own plan, step layout,
// forward pass and host half through it checks everything but the CUDA
// kernels themselves on machines without a GPU; the kernels are checked
// against the same CPU references on a GPU (package kernels).
type cudaEmu struct {
	base cuda.DevicePtr
	mem  []byte
	w    *kernels.Workers
}

const cudaEmuBase = cuda.DevicePtr(1 << 40)

func (e *cudaEmu) bytes(p cuda.DevicePtr, n int) []byte {
	if p < e.base || uint64(p-e.base)+uint64(n) > uint64(len(e.mem)) {
		panic(fmt.Sprintf("emulated device access [%#x, +%d) outside [%#x, +%d)", uint64(p), n, uint64(e.base), len(e.mem)))
	}
	off := int(p - e.base)
	return e.mem[off : off+n : off+n]
}

func (e *cudaEmu) f32(p cuda.DevicePtr, n int) []float32 { return cudaBytesF32(e.bytes(p, 4*n)) }
func (e *cudaEmu) i32(p cuda.DevicePtr, n int) []int32   { return cudaBytesI32(e.bytes(p, 4*n)) }
func (e *cudaEmu) u16(p cuda.DevicePtr, n int) []uint16 {
	b := e.bytes(p, 2*n)
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// load reads n elements of type t at p as float32.
func (e *cudaEmu) load(p cuda.DevicePtr, n int, t cuda.DType) []float32 {
	switch t {
	case cuda.F32:
		return append([]float32(nil), e.f32(p, n)...)
	case cuda.BF16, cuda.F16:
		out := make([]float32, n)
		for i, h := range e.u16(p, n) {
			if t == cuda.BF16 {
				out[i] = kernels.BF16ToF32(h)
			} else {
				out[i] = kernels.F16ToF32(h)
			}
		}
		return out
	}
	panic(fmt.Sprintf("emulated load of %v", t))
}

// store writes v at p as elements of type t (rounded as the device rounds).
func (e *cudaEmu) store(p cuda.DevicePtr, v []float32, t cuda.DType) {
	switch t {
	case cuda.F32:
		copy(e.f32(p, len(v)), v)
	case cuda.BF16, cuda.F16:
		dst := e.u16(p, len(v))
		for i, f := range v {
			if t == cuda.BF16 {
				dst[i] = kernels.F32ToBF16(f)
			} else {
				dst[i] = kernels.F32ToF16(f)
			}
		}
	default:
		panic(fmt.Sprintf("emulated store of %v", t))
	}
}

func (e *cudaEmu) Resolve(tok, seat, last cuda.DevicePtr, n int) error {
	t, s := e.i32(tok, n), e.i32(seat, n)
	for i := range t {
		if t[i] < 0 {
			t[i] = e.i32(last.Add(4*uint64(s[i])), 1)[0]
		}
	}
	return nil
}

func (e *cudaEmu) Embedding(out, table cuda.DevicePtr, t kernels.DType, tokens cuda.DevicePtr, ntok, vocab, cols int) error {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return err
	}
	m := kernels.Matrix{Type: t, Rows: vocab, Cols: cols, Data: e.bytes(table, rb*vocab)}
	if t.BlockElems() <= 1 {
		return kernels.Embedding(e.f32(out, ntok*cols), m, e.i32(tokens, ntok))
	}
	// Block tables: each element as its device thread decodes it
	// (ts_embedding_<type> over kernels.CUDAQuantAt).
	o := e.f32(out, ntok*cols)
	for i, tok := range e.i32(tokens, ntok) {
		dst := o[i*cols : (i+1)*cols]
		if tok < 0 || int(tok) >= vocab {
			clear(dst)
			continue
		}
		row := m.Data[int(tok)*rb : (int(tok)+1)*rb]
		for c := range dst {
			v, err := kernels.CUDAQuantAt(t, row, c)
			if err != nil {
				return err
			}
			dst[c] = v
		}
	}
	return nil
}

func (e *cudaEmu) AddRMSNorm(y, x, d, w cuda.DevicePtr, rows, dim int, eps float32, out cuda.DType) error {
	xs := e.f32(x, rows*dim)
	if d != 0 {
		for i, v := range e.f32(d, rows*dim) {
			xs[i] += v
		}
	}
	tmp := make([]float32, rows*dim)
	if err := e.w.RMSNorm(tmp, xs, e.f32(w, dim), rows, dim, eps); err != nil {
		return err
	}
	e.store(y, tmp, out)
	return nil
}

func (e *cudaEmu) Matmul(dt cuda.DType, m, n, k int, x, w, y cuda.DevicePtr) error {
	kt := map[cuda.DType]kernels.DType{cuda.F32: kernels.F32, cuda.F16: kernels.F16, cuda.BF16: kernels.BF16}[dt]
	W := kernels.Matrix{Type: kt, Rows: n, Cols: k, Data: e.bytes(w, n*k*dt.Size())}
	return e.w.MatMul(e.f32(y, m*n), e.load(x, m*k, dt), m, W)
}

func (e *cudaEmu) RoPEFreqs(x, pos, freqs cuda.DevicePtr, rows, heads, headDim int, neox bool) error {
	b := e.bytes(freqs, 8*(headDim/2))
	f := unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), headDim/2)
	return kernels.RoPEFreqs(e.f32(x, rows*heads*headDim), e.i32(pos, rows), heads, headDim, f, neox)
}

func (e *cudaEmu) AddBias(x, b cuda.DevicePtr, rows, n int) error {
	xs, bs := e.f32(x, rows*n), e.f32(b, n)
	for i := range xs {
		xs[i] += bs[i%n]
	}
	return nil
}

func (e *cudaEmu) kvType(kv kernels.CUDAKV) cuda.DType {
	if kv.BF16 {
		return cuda.BF16
	}
	return cuda.F32
}

func (e *cudaEmu) KVWrite(kv kernels.CUDAKV, kp, vp, slots cuda.DevicePtr, ntok int) error {
	row := kv.KVHeads * kv.HeadDim
	ks, vs := e.f32(kp, ntok*row), e.f32(vp, ntok*row)
	elem := uint64(e.kvType(kv).Size())
	for t, slot := range e.i32(slots, ntok) {
		if slot < 0 {
			continue
		}
		blk, off := int(slot)/kv.BlockSize, int(slot)%kv.BlockSize
		if blk >= kv.NumBlocks {
			return fmt.Errorf("emulated KV write to block %d of %d", blk, kv.NumBlocks)
		}
		for h := 0; h < kv.KVHeads; h++ {
			dst := uint64(((blk*kv.KVHeads+h)*kv.BlockSize+off)*kv.HeadDim) * elem
			src := t*row + h*kv.HeadDim
			e.store(kv.K.Add(dst), ks[src:src+kv.HeadDim], e.kvType(kv))
			e.store(kv.V.Add(dst), vs[src:src+kv.HeadDim], e.kvType(kv))
		}
	}
	return nil
}

// layer reads the whole cache of kv as a float32 KVLayer.
func (e *cudaEmu) layer(kv kernels.CUDAKV) *kernels.KVLayer {
	n := kv.NumBlocks * kv.KVHeads * kv.BlockSize * kv.HeadDim
	return &kernels.KVLayer{K: e.load(kv.K, n, e.kvType(kv)), V: e.load(kv.V, n, e.kvType(kv)),
		NumBlocks: kv.NumBlocks, KVHeads: kv.KVHeads, BlockSize: kv.BlockSize, HeadDim: kv.HeadDim}
}

// DecodeAttention emulates ts_paged_decode_* and ts_decode_combine: each
// (row, head, split) partial over the split's blocks of the row's own
// context (kernels.DecodeWindowSplitRange: with a sliding window from the
// block of the first position it sees, earlier positions masked), written
// to the oPart/mlPart scratch (so its size is checked), empty splits as the
// neutral (−inf, 0, 0), then merged skipping empty splits; a padding row
// gets zeros.
func (e *cudaEmu) DecodeAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, tables, ctxLens cuda.DevicePtr, d kernels.DecodeShape, scale float32, oPart, mlPart cuda.DevicePtr) error {
	if d.Batch < 1 || d.Heads < 1 || d.MaxBlocks < 1 || d.Splits < 1 || d.Heads%kv.KVHeads != 0 || d.Heads/kv.KVHeads > 16 {
		return fmt.Errorf("emulated decode attention: bad plan %+v for %d KV heads", d, kv.KVHeads)
	}
	o, ml := kernels.DecodeScratchBytes(d, kv.HeadDim)
	op, mp := e.f32(oPart, int(o/4)), e.f32(mlPart, int(ml/4))
	hd, bs, row, group := kv.HeadDim, kv.BlockSize, d.Heads*kv.HeadDim, d.Heads/kv.KVHeads
	os, qs := e.f32(out, d.Batch*row), e.f32(q, d.Batch*row)
	lens, tab := e.i32(ctxLens, d.Batch), e.i32(tables, d.Batch*d.MaxBlocks)
	l := e.layer(kv)
	inf := float32(math.Inf(1))
	exp := func(x float32) float32 { return float32(math.Exp(float64(x))) }
	for b := 0; b < d.Batch; b++ {
		ctx := int(lens[b])
		if ctx < 0 || ctx > d.MaxBlocks*bs {
			return fmt.Errorf("emulated decode attention: row %d context %d outside its %d-block table", b, ctx, d.MaxBlocks)
		}
		for h := 0; h < d.Heads; h++ {
			kvh := h / group
			qh := qs[b*row+h*hd : b*row+(h+1)*hd]
			r0 := (b*d.Heads + h) * d.Splits
			for s := 0; s < d.Splits; s++ {
				acc := op[(r0+s)*hd : (r0+s+1)*hd]
				clear(acc)
				m, sum := -inf, float32(0)
				first, end := kernels.DecodeWindowSplitRange(ctx, 0, d.Window, bs, d.MaxBlocks, d.Splits, s)
				for p := max(first*bs, emuWindowStart(ctx, d.Window)); p < min(ctx, end*bs); p++ {
					blk := int(tab[b*d.MaxBlocks+p/bs])
					if blk < 0 || blk >= kv.NumBlocks {
						return fmt.Errorf("emulated decode attention: row %d position %d in block %d of %d", b, p, blk, kv.NumBlocks)
					}
					off := ((blk*kv.KVHeads+kvh)*bs + p%bs) * hd
					var score float32
					for j, x := range qh {
						score += x * scale * l.K[off+j]
					}
					mn := max(m, score)
					a := float32(0)
					if m != -inf {
						a = exp(m - mn)
					}
					w := exp(score - mn)
					for j := range acc {
						acc[j] = acc[j]*a + w*l.V[off+j]
					}
					m, sum = mn, sum*a+w
				}
				mp[2*(r0+s)], mp[2*(r0+s)+1] = m, sum
			}
			// ts_decode_combine.
			M := -inf
			for s := 0; s < d.Splits; s++ {
				M = max(M, mp[2*(r0+s)])
			}
			var L float32
			dst := os[b*row+h*hd : b*row+(h+1)*hd]
			clear(dst)
			for s := 0; s < d.Splits; s++ {
				if m := mp[2*(r0+s)]; m != -inf {
					w := exp(m - M)
					L += w * mp[2*(r0+s)+1]
					for j := range dst {
						dst[j] += w * op[(r0+s)*hd+j]
					}
				}
			}
			for j := range dst {
				if L > 0 {
					dst[j] /= L
				} else {
					dst[j] = 0
				}
			}
		}
	}
	return nil
}

// emuWindowStart is the first position a decode row of context ctx sees
// under a sliding window (0: none).
func emuWindowStart(ctx, window int) int {
	if window > 0 {
		return max(ctx-window, 0)
	}
	return 0
}

// CascadeDecodeAttention emulates kernels.CUDAKernels.CascadeDecodeAttention from the
// group layout in emulated device memory: every slot of the scratch is
// poisoned first and must be written exactly once (each row's tail splits
// from its start block, kernels.DecodeTailSplitRange; each member's shared
// splits by its tile, kernels.CascadeSplitRange over the tile's first
// member's table; the shared slots of rows outside every group neutral),
// then all slots are merged. It also checks what the kernels assume of the
// host's layout: tiles within the grid, members' start blocks equal to their
// tile's run, members' tables equal on that run, members' sliding windows
// covering their whole context (the shared run is unmasked).
func (e *cudaEmu) CascadeDecodeAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, tables, ctxLens cuda.DevicePtr, ci kernels.CascadeInputs, d kernels.DecodeShape, scale float32, oPart, mlPart cuda.DevicePtr) error {
	if d.Batch < 1 || d.Heads < 1 || d.MaxBlocks < 1 || d.Splits < 1 || d.CascadeSplits < 1 || d.CascadeTiles < 1 ||
		d.Heads%kv.KVHeads != 0 || d.Heads/kv.KVHeads > 16 {
		return fmt.Errorf("emulated cascade decode attention: bad plan %+v for %d KV heads", d, kv.KVHeads)
	}
	o, ml := kernels.DecodeScratchBytes(d, kv.HeadDim)
	op, mp := e.f32(oPart, int(o/4)), e.f32(mlPart, int(ml/4))
	nan := float32(math.NaN())
	for i := range op {
		op[i] = nan
	}
	for i := range mp {
		mp[i] = nan
	}
	hd, bs, row, group := kv.HeadDim, kv.BlockSize, d.Heads*kv.HeadDim, d.Heads/kv.KVHeads
	slots := d.Splits + d.CascadeSplits
	qs := e.f32(q, d.Batch*row)
	lens, tab := e.i32(ctxLens, d.Batch), e.i32(tables, d.Batch*d.MaxBlocks)
	start := e.i32(ci.StartBlocks, d.Batch)
	ntiles := int(e.i32(ci.NumTiles, 1)[0])
	if ntiles < 0 || ntiles > d.CascadeTiles {
		return fmt.Errorf("emulated cascade decode attention: %d tiles, grid of %d", ntiles, d.CascadeTiles)
	}
	tiles := e.i32(ci.Tiles, 3*ntiles)
	l := e.layer(kv)
	inf := float32(math.Inf(1))
	exp := func(x float32) float32 { return float32(math.Exp(float64(x))) }
	// partial writes slot sl of (b, h): positions [p0, p1) through table.
	partial := func(b, h, sl int, table []int32, p0, p1 int) error {
		r := (b*d.Heads+h)*slots + sl
		if !math.IsNaN(float64(mp[2*r])) {
			return fmt.Errorf("emulated cascade decode attention: row %d head %d slot %d written twice", b, h, sl)
		}
		acc := op[r*hd : (r+1)*hd]
		clear(acc)
		m, sum := -inf, float32(0)
		qh := qs[b*row+h*hd : b*row+(h+1)*hd]
		for p := p0; p < p1; p++ {
			blk := int(table[p/bs])
			if blk < 0 || blk >= kv.NumBlocks {
				return fmt.Errorf("emulated cascade decode attention: row %d position %d in block %d of %d", b, p, blk, kv.NumBlocks)
			}
			off := ((blk*kv.KVHeads+h/group)*bs + p%bs) * hd
			var score float32
			for j, x := range qh {
				score += x * scale * l.K[off+j]
			}
			mn := max(m, score)
			a := float32(0)
			if m != -inf {
				a = exp(m - mn)
			}
			w := exp(score - mn)
			for j := range acc {
				acc[j] = acc[j]*a + w*l.V[off+j]
			}
			m, sum = mn, sum*a+w
		}
		mp[2*r], mp[2*r+1] = m, sum
		return nil
	}
	for b := 0; b < d.Batch; b++ {
		ctx := int(lens[b])
		if ctx < 0 || ctx > d.MaxBlocks*bs || start[b] < 0 || int(start[b])*bs >= max(ctx, 1) && start[b] > 0 {
			return fmt.Errorf("emulated cascade decode attention: row %d context %d, start block %d, %d-block table", b, ctx, start[b], d.MaxBlocks)
		}
		if start[b] > 0 && d.Window > 0 && ctx > d.Window {
			return fmt.Errorf("emulated cascade decode attention: member row %d of context %d under a window of %d", b, ctx, d.Window)
		}
		table := tab[b*d.MaxBlocks : (b+1)*d.MaxBlocks]
		for h := 0; h < d.Heads; h++ {
			for s := 0; s < d.Splits; s++ {
				first, end := kernels.DecodeWindowSplitRange(ctx, int(start[b]), d.Window, bs, d.MaxBlocks, d.Splits, s)
				if err := partial(b, h, s, table, max(first*bs, emuWindowStart(ctx, d.Window)), min(ctx, end*bs)); err != nil {
					return err
				}
			}
			if start[b] == 0 {
				for cs := 0; cs < d.CascadeSplits; cs++ {
					if err := partial(b, h, d.Splits+cs, table, 0, 0); err != nil {
						return err
					}
				}
			}
		}
	}
	members := e.i32(ci.Rows, d.Batch)
	for ti := 0; ti < ntiles; ti++ {
		first, count, shared := int(tiles[3*ti]), int(tiles[3*ti+1]), int(tiles[3*ti+2])
		if first < 0 || count < 1 || first+count > d.Batch || count > kernels.CascadeTileMembers(d.Heads, kv.KVHeads) {
			return fmt.Errorf("emulated cascade decode attention: tile %d holds members [%d, %d+%d)", ti, first, first, count)
		}
		lead := tab[int(members[first])*d.MaxBlocks:][:d.MaxBlocks]
		for _, b := range members[first : first+count] {
			if start[b] != int32(shared) {
				return fmt.Errorf("emulated cascade decode attention: tile %d shares %d blocks, member row %d starts at %d", ti, shared, b, start[b])
			}
			mine := tab[int(b)*d.MaxBlocks:][:d.MaxBlocks]
			for j := 0; j < shared; j++ {
				if mine[j] != lead[j] {
					return fmt.Errorf("emulated cascade decode attention: tile %d member row %d has block %d at entry %d, its first member %d", ti, b, mine[j], j, lead[j])
				}
			}
			for h := 0; h < d.Heads; h++ {
				for cs := 0; cs < d.CascadeSplits; cs++ {
					f, e := kernels.CascadeSplitRange(shared, d.CascadeSplits, cs)
					if err := partial(int(b), h, d.Splits+cs, lead, f*bs, e*bs); err != nil {
						return err
					}
				}
			}
		}
	}
	// ts_decode_combine over every slot.
	os := e.f32(out, d.Batch*row)
	for b := 0; b < d.Batch; b++ {
		for h := 0; h < d.Heads; h++ {
			r0 := (b*d.Heads + h) * slots
			M := -inf
			for s := 0; s < slots; s++ {
				if math.IsNaN(float64(mp[2*(r0+s)])) {
					return fmt.Errorf("emulated cascade decode attention: row %d head %d slot %d never written", b, h, s)
				}
				M = max(M, mp[2*(r0+s)])
			}
			var L float32
			dst := os[b*row+h*hd : b*row+(h+1)*hd]
			clear(dst)
			for s := 0; s < slots; s++ {
				if m := mp[2*(r0+s)]; m != -inf {
					w := exp(m - M)
					L += w * mp[2*(r0+s)+1]
					for j := range dst {
						dst[j] += w * op[(r0+s)*hd+j]
					}
				}
			}
			for j := range dst {
				if L > 0 {
					dst[j] /= L
				} else {
					dst[j] = 0
				}
			}
		}
	}
	return nil
}

func (e *cudaEmu) PrefillAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, qStart, numQ, ctxLens, tables cuda.DevicePtr, p kernels.PrefillShape, scale float32) error {
	qs, nq, lens := e.i32(qStart, p.Seqs), e.i32(numQ, p.Seqs), e.i32(ctxLens, p.Seqs)
	tab := e.i32(tables, p.Seqs*p.MaxBlocks)
	rows := 0
	var seqs []kernels.AttnSeq
	for i := 0; i < p.Seqs; i++ {
		if int(nq[i]) > p.MaxQ {
			return fmt.Errorf("emulated prefill: seq %d has %d queries, grid sized for %d", i, nq[i], p.MaxQ)
		}
		rows = max(rows, int(qs[i]+nq[i]))
		seqs = append(seqs, kernels.AttnSeq{QStart: qs[i], NumQ: nq[i], ContextLen: lens[i], BlockTable: tab[i*p.MaxBlocks : (i+1)*p.MaxBlocks],
			Window: int32(p.Window)})
	}
	row := p.Heads * kv.HeadDim
	return kernels.RefPagedAttention(e.f32(out, rows*row), e.f32(q, rows*row), e.layer(kv), seqs, p.Heads, scale)
}

func (e *cudaEmu) CastF32(out, in cuda.DevicePtr, n int, to cuda.DType) error {
	e.store(out, e.load(in, n, cuda.F32), to)
	return nil
}

func (e *cudaEmu) SiLUMul(y, gate, up cuda.DevicePtr, n int, out cuda.DType) error {
	tmp := make([]float32, n)
	kernels.RefSiLUMul(tmp, e.f32(gate, n), e.f32(up, n))
	e.store(y, tmp, out)
	return nil
}

func (e *cudaEmu) Gather(out, in, idx cuda.DevicePtr, rows, rowBytes int) error {
	for j, i := range e.i32(idx, rows) {
		copy(e.bytes(out.Add(uint64(j*rowBytes)), rowBytes), e.bytes(in.Add(uint64(int(i)*rowBytes)), rowBytes))
	}
	return nil
}

func (e *cudaEmu) ArgmaxLast(out, last, seat, x cuda.DevicePtr, rows, n int) error {
	o, s, xs := e.i32(out, rows), e.i32(seat, rows), e.f32(x, rows*n)
	for r := range o {
		o[r] = max(0, kernels.Argmax(xs[r*n:(r+1)*n]))
		if s[r] >= 0 {
			e.i32(last.Add(4*uint64(s[r])), 1)[0] = o[r]
		}
	}
	return nil
}

// cudaEmuRunner is a CUDARunner whose device is a cudaEmu: the runner's own
// plan and host half, the emulated uploads and the steps as step() runs them.
type cudaEmuRunner struct {
	r *CUDARunner
	e *cudaEmu
}

func newCUDAEmuRunner(tb testing.TB, m *Llama, cfg CUDARunnerConfig) *cudaEmuRunner {
	tb.Helper()
	cfg, err := cfg.resolve(m)
	require.NoError(tb, err)
	require.Positive(tb, cfg.KVBlocks, "the emulator needs a fixed KV size")
	r := &CUDARunner{m: m, cfg: cfg}
	pl, err := r.plan(132)
	require.NoError(tb, err)
	kvBytes := 2 * uint64(m.cfg.Layers) * uint64(cfg.KVBlocks) * r.kvBlock
	wBytes, aBytes := cudaAlignUp(r.wplan.total, cudaAlign), cudaAlignUp(r.bufs.total, cudaAlign)
	e := &cudaEmu{base: cudaEmuBase, mem: make([]byte, wBytes+aBytes+kvBytes), w: kernels.NewWorkers(1)}
	tb.Cleanup(e.w.Close)
	r.weights, r.act = e.base, e.base.Add(wBytes)
	r.kvMem = r.act.Add(aBytes)
	r.setKV(r.kvMem, cfg.KVBlocks)
	// Upload: the stored bytes, the device dequantiser's per-thread math
	// (kernels.CUDADequantBF16), or the host conversion (the f32 cast rounds
	// the same way, as package kernels checks on a GPU).
	r.wplan.each(func(w *cudaWeight) {
		dst := r.weights.Add(w.off)
		n := w.src.Rows * w.src.Cols
		switch w.how {
		case cudaUploadCopy:
			copy(e.bytes(dst, len(w.src.Data)), w.src.Data)
		case cudaUploadDequant:
			require.NoError(tb, kernels.CUDADequantBF16(e.u16(dst, n), w.src.Data, w.src.Type, w.src.Rows, w.src.Cols))
		default:
			require.NoError(tb, cudaConvertRows(e.u16(dst, n), w.src, 0, w.src.Rows, w.dt, make([]float32, n)))
		}
	})
	for _, v := range r.wplan.vectors() {
		copy(e.bytes(r.weights.Add(v.off), len(v.data)), v.data)
	}
	r.host, err = newCUDAHost(pl.capacity, pl.sizes, pl.graphMB, cfg.KeepLogits, make([]int32, pl.stagingElems), make([]int32, 2*pl.rows))
	require.NoError(tb, err)
	require.NoError(tb, r.host.setKVBlocks(cfg.KVBlocks))
	r.devTok, r.hostLog = make([]int32, pl.rows), make([]float32, pl.rows*m.cfg.Vocab)
	vocab := m.cfg.Vocab
	r.rowFn = func(j int) []float32 { return r.hostLog[j*vocab : (j+1)*vocab] }
	// The dry run and every graph's warm-up, as setup runs them.
	cudaFillDryRun(r.host.staging, pl.capacity, pl.rows, cfg.KVBlocks)
	copy(e.bytes(r.buf(r.bufs.arena), 4*pl.dry.total), cudaI32Bytes(r.host.staging[:pl.dry.total]))
	require.NoError(tb, r.forward(e, &pl.dry, 0, pl.dryQ))
	if len(pl.cascTiles) > 0 {
		require.NoError(tb, r.host.setCascade(pl.perTile, pl.cascTiles, m.attnWindow()))
	}
	for i, p := range pl.sizes {
		warm := []int{0} // the plain graph, then its cascade twin
		if r.cascTiles[i] > 0 {
			warm = append(warm, r.cascTiles[i])
		}
		for _, mt := range warm {
			l := cudaFillPadding(r.host.staging, p, pl.graphMB, mt)
			copy(e.bytes(r.buf(r.bufs.arena), 4*l.total), cudaI32Bytes(r.host.staging[:l.total]))
			require.NoError(tb, r.forward(e, &l, i+1, 1))
		}
	}
	clear(e.bytes(r.kvMem, int(kvBytes))) // the dry run wrote the cache; a real one starts unwritten
	return &cudaEmuRunner{r: r, e: e}
}

// Execute is CUDARunner.Execute with step() and scatter() on the emulator.
func (x *cudaEmuRunner) Execute(b *step.Batch, out *step.Output) error {
	r, e, h := x.r, x.e, x.r.host
	if err := h.prepare(b); err != nil {
		return err
	}
	l := &h.layout
	copy(e.bytes(r.buf(r.bufs.arena), 4*l.total), cudaI32Bytes(h.staging[:l.total]))
	graph, maxQ := 0, h.maxQ
	if h.graph > 0 {
		graph, maxQ = cudaGraphIndex(h.graphSizes, h.graph)+1, 1
	}
	if err := r.forward(e, l, graph, maxQ); err != nil {
		return err
	}
	vocab := r.m.cfg.Vocab
	if l.R > 0 {
		copy(r.devTok, e.i32(r.buf(r.bufs.sampled), l.R))
		for _, j := range h.hostRows {
			copy(r.hostLog[int(j)*vocab:], e.f32(r.buf(r.bufs.logits).Add(uint64(j)*4*uint64(vocab)), vocab))
		}
	}
	n, err := h.finish(b, out, r.devTok, r.rowFn)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		e.i32(r.buf(r.bufs.last).Add(4*uint64(h.pairs[2*i])), 1)[0] = h.pairs[2*i+1]
	}
	return nil
}

func (x *cudaEmuRunner) Check() error           { return x.r.host.checkSeats() }
func (x *cudaEmuRunner) Logits(i int) []float32 { return x.r.host.logits(i) }

// The emulated CUDA runner's greedy stories260K text is the CPU runner's,
// through chunked prefill (eager steps) and decode graphs (or eager decode).
func TestCUDAEmuGreedyMatchesCPU(t *testing.T) {
	m := loadStories(t)
	for _, noGraphs := range []bool{false, true} {
		t.Run(fmt.Sprintf("graphs=%v", !noGraphs), func(t *testing.T) {
			gpu := newCUDAEmuRunner(t, m, cudaGreedyConfig(noGraphs))
			text := cudaGreedyScenario(t, m, gpu, 40)
			require.Len(t, text, 41)
		})
	}
}

// Mixed batches, forks, host-sampled seats and padded graphs on the
// emulated runner match the CPU runner.
func TestCUDAEmuBatchesMatchCPU(t *testing.T) {
	m := loadStories(t)
	cudaBatchScenario(t, m, newCUDAEmuRunner(t, m, cudaBatchConfig()))
}

// Shared prompt blocks on the emulated runner: the cascade graphs' layout
// (start blocks, tiles, member rows) and the cascade attention it drives
// match the CPU runner token for token; with NoCascade no step uses them.
func TestCUDAEmuCascadeMatchesCPU(t *testing.T) {
	m := loadStories(t)
	for _, noCascade := range []bool{false, true} {
		t.Run(fmt.Sprintf("cascade=%v", !noCascade), func(t *testing.T) {
			gpu := newCUDAEmuRunner(t, m, cudaCascadeConfig(noCascade))
			used := cudaCascadeScenario(t, m, gpu, func() bool { return gpu.r.host.layout.MT > 0 })
			if noCascade {
				require.Zero(t, used)
				require.Empty(t, gpu.r.host.cascTiles)
				return
			}
			require.Equal(t, 30, used, "every grouped decode step takes the cascade layout")
		})
	}
}

// A sliding-window model on the emulated runner matches the CPU runner
// over contexts longer than the window (cudaWindowScenario); the emulated
// cascade attention also refuses a member under a window that does not
// cover its context, as the shared pass would not mask it.
func TestCUDAEmuSlidingWindowMatchesCPU(t *testing.T) {
	cudaWindowScenario(t, func(t *testing.T, m *Llama, cfg CUDARunnerConfig) (cudaPairRunner, *cudaHost) {
		g := newCUDAEmuRunner(t, m, cfg)
		return g, g.r.host
	})
}

// The bf16 paths: a bf16 KV cache, and bf16 GEMMs (activations cast, 16-bit
// rows gathered) on models stored as bf16 and as a mix of every type, stay
// close to the CPU runner's logits.
func TestCUDAEmuBF16Paths(t *testing.T) {
	cases := []struct {
		name string
		m    func(t *testing.T) *Llama
		kv32 bool
		tol  float64
	}{
		{"stories bf16 KV", func(t *testing.T) *Llama { return loadStories(t) }, false, 0.05},
		{"bf16 weights", func(t *testing.T) *Llama { return loadSynth(t, smallSpec(gguf.TypeBF16)) }, true, 0.05},
		{"mixed weights", func(t *testing.T) *Llama {
			return loadSynth(t, smallSpec(gguf.TypeF32, gguf.TypeQ8_0, gguf.TypeF16, gguf.TypeBF16))
		}, false, 0.05},
		// K-quant and legacy block matrices are uploaded as stored and
		// dequantised to bf16 on the device; the table stays Q8_0.
		{"block-type weights", func(t *testing.T) *Llama {
			return loadSynth(t, kquantSpec(gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K, gguf.TypeQ5_0, gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ5_K, gguf.TypeQ4_1))
		}, false, 0.05},
		// llama.cpp's Q4_K_M file (Q4_K and Q6_K matrices, a block-type
		// token table) through the device dequantisers and gather.
		{"Q4_K_M fixture", func(t *testing.T) *Llama { return quantFixtureModel(t, "llama-Q4_K_M.gguf") }, false, 0.05},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m(t)
			kv := DefaultCUDAKVType
			if tc.kv32 {
				kv = kernels.F32
			}
			gpu := newCUDAEmuRunner(t, m, CUDARunnerConfig{Seats: 2, BlockSize: 16, MaxBatchTokens: 16, KVBlocks: 8, KVType: kv, KeepLogits: true})
			agree, worst := cudaFollowCPU(t, m, gpu, 60, tc.tol)
			t.Logf("%d/60 greedy tokens equal, worst logits error %.3g", agree, worst)
		})
	}
}

// Every block type as the token table (the matrices cycling through the
// other types, dequantised on the device), gathered as the device embedding
// kernels gather it, stays close to the CPU runner's logits.
func TestCUDAEmuBlockTypeTables(t *testing.T) {
	all := []gguf.GGMLType{gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ8_0,
		gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}
	for i, typ := range all {
		t.Run(typ.String(), func(t *testing.T) {
			types := append([]gguf.GGMLType{typ}, all[i+1:]...)
			m := loadSynth(t, kquantSpec(append(types, all[:i]...)...))
			require.Equal(t, kernels.DType(typ), m.embd.Type)
			gpu := newCUDAEmuRunner(t, m, CUDARunnerConfig{Seats: 2, BlockSize: 16, MaxBatchTokens: 16, KVBlocks: 8, KVType: DefaultCUDAKVType, KeepLogits: true})
			agree, worst := cudaFollowCPU(t, m, gpu, 20, 0.05)
			t.Logf("%d/20 greedy tokens equal, worst logits error %.3g", agree, worst)
		})
	}
}

// cudaFollowCPU feeds both runners the CPU's greedy tokens for n positions
// (so contexts stay equal) and requires logits within tol; it returns how
// many tokens the runner under test chose the same way and the worst error.
func cudaFollowCPU(t *testing.T, m *Llama, gpu cudaPairRunner, n int, tol float64) (int, float64) {
	const bs = 16
	cpu := newTestRunner(t, m, CPURunnerConfig{Seats: 1, KVBlocks: 8, BlockSize: bs, MaxBatchTokens: 16, KeepLogits: true})
	p := sampling.DefaultParams()
	table := iota32(0, 8)
	var oc, og step.Output
	agree, worst := 0, 0.0
	for pos := int32(1); pos <= int32(n); pos++ {
		b := &step.Batch{Tokens: []int32{1}, Positions: []int32{pos - 1},
			Seqs: []step.SeqBatch{{Seat: 0, NumTokens: 1, ContextLen: pos, BlockTable: table[:(pos+bs-1)/bs], Sample: true, Start: pos == 1, Params: &p}}}
		if pos > 1 {
			b.Tokens[0] = oc.Tokens[0]
		}
		require.NoError(t, cpu.Execute(b, &oc))
		require.NoError(t, gpu.Execute(b, &og))
		require.NoError(t, gpu.Check())
		e := relErr(gpu.Logits(0), cpu.Logits(0))
		worst = max(worst, e)
		require.LessOrEqual(t, e, tol, "position %d: logits differ by %.3g of the row's scale", pos, e)
		if og.Tokens[0] == oc.Tokens[0] {
			agree++
		}
	}
	return agree, worst
}

// The emulator itself: an access outside the emulated memory is caught.
func TestCUDAEmuBounds(t *testing.T) {
	e := &cudaEmu{base: cudaEmuBase, mem: make([]byte, 64)}
	require.Len(t, e.f32(cudaEmuBase.Add(32), 8), 8)
	require.Panics(t, func() { e.f32(cudaEmuBase.Add(32), 9) })
	require.Panics(t, func() { e.bytes(cudaEmuBase-4, 4) })
}

// The emulated decode kernel cuts each row by its own context: rows of 1, 17
// and 300 positions (1, 2 and 19 blocks of 16) and a padding row in one
// batch, in 1 to 40 splits (16 is what the plan gives batch 1 on 132 SMs),
// match the CPU reference; splits past a row's end leave the neutral partial
// (−inf, 0, 0), and the padding row gets zeros.
func TestCUDAEmuDecodeRaggedSplits(t *testing.T) {
	const heads, kvHeads, hd, bs = 8, 2, 32, 16
	ctx := []int32{1, 17, 300, 0}
	batch, maxBlocks := len(ctx), (300+bs-1)/bs
	numBlocks := batch*maxBlocks + 5
	row := heads * hd
	rng := rand.New(rand.NewPCG(17, 300))
	randv := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	cache := numBlocks * kvHeads * bs * hd
	k, v, q := randv(cache), randv(cache), randv(batch*row)
	perm := rng.Perm(numBlocks) // pages out of order
	tables := make([]int32, batch*maxBlocks)
	for i := range tables {
		tables[i] = int32(perm[i])
	}
	layer := &kernels.KVLayer{K: k, V: v, NumBlocks: numBlocks, KVHeads: kvHeads, BlockSize: bs, HeadDim: hd}
	want := make([]float32, batch*row)
	var seqs []kernels.AttnSeq
	for b, c := range ctx {
		if c > 0 {
			seqs = append(seqs, kernels.AttnSeq{QStart: int32(b), NumQ: 1, ContextLen: c, BlockTable: tables[b*maxBlocks : (b+1)*maxBlocks]})
		}
	}
	scale := float32(1 / math.Sqrt(hd))
	require.NoError(t, kernels.RefPagedAttention(want, q, layer, seqs, heads, scale))

	for _, splits := range []int{1, 3, 16, 40} {
		t.Run(fmt.Sprintf("splits=%d", splits), func(t *testing.T) {
			d := kernels.DecodeShape{Batch: batch, Heads: heads, MaxBlocks: maxBlocks, Splits: splits}
			o, ml := kernels.DecodeScratchBytes(d, hd)
			sizes := []int{4 * cache, 4 * cache, 4 * len(q), 4 * len(want), 4 * len(tables), 4 * batch, int(o), int(ml)}
			var total int
			offs := make([]cuda.DevicePtr, len(sizes))
			for i, n := range sizes {
				offs[i] = cudaEmuBase.Add(uint64(total))
				total += int(cudaAlignUp(uint64(n), cudaAlign))
			}
			e := &cudaEmu{base: cudaEmuBase, mem: make([]byte, total)}
			kv := kernels.CUDAKV{K: offs[0], V: offs[1], NumBlocks: numBlocks, KVHeads: kvHeads, BlockSize: bs, HeadDim: hd}
			copy(e.f32(kv.K, cache), k)
			copy(e.f32(kv.V, cache), v)
			copy(e.f32(offs[2], len(q)), q)
			copy(e.i32(offs[4], len(tables)), tables)
			copy(e.i32(offs[5], batch), ctx)
			stale := append(e.f32(offs[6], int(o)/4), e.f32(offs[7], int(ml)/4)...)
			for i := range stale { // stale scratch must not leak through
				stale[i] = float32(math.NaN())
			}
			copy(e.f32(offs[6], int(o)/4), stale)
			copy(e.f32(offs[7], int(ml)/4), stale[int(o)/4:])
			require.NoError(t, e.DecodeAttention(offs[3], offs[2], kv, offs[4], offs[5], d, scale, offs[6], offs[7]))
			got := e.f32(offs[3], len(want))
			for b := range ctx {
				r := got[b*row : (b+1)*row]
				if ctx[b] == 0 {
					require.Equal(t, make([]float32, row), r, "padding row")
					continue
				}
				require.LessOrEqual(t, relErr(r, want[b*row:(b+1)*row]), 1e-5, "row %d (context %d)", b, ctx[b])
			}
			// Partials: a split is empty exactly when the row's blocks run out
			// before it, and an empty one is (−inf, 0) with zero accumulators.
			op, mp := e.f32(offs[6], int(o)/4), e.f32(offs[7], int(ml)/4)
			empty := 0
			for b, c := range ctx {
				for h := 0; h < heads; h++ {
					for s := 0; s < splits; s++ {
						r := (b*heads+h)*splits + s
						first, end := kernels.DecodeSplitRange(int(c), bs, maxBlocks, splits, s)
						if first < end {
							require.False(t, math.IsInf(float64(mp[2*r]), -1), "row %d split %d has blocks [%d, %d)", b, s, first, end)
							require.Positive(t, mp[2*r+1])
							continue
						}
						empty++
						require.True(t, math.IsInf(float64(mp[2*r]), -1), "row %d split %d is empty", b, s)
						require.Zero(t, mp[2*r+1])
						require.Equal(t, make([]float32, hd), op[r*hd:(r+1)*hd])
					}
				}
			}
			t.Logf("%d of %d (row, head, split) partials empty", empty, batch*heads*splits)
		})
	}
}

// Every architecture fixture (Llama 3.1 RoPE scaling, qwen2 Q/K/V biases,
// qwen3 per-head Q/K norms with a decoupled head dim, NEOX rotation) on the
// emulated CUDA runner matches the CPU runner: the new ops' data flow
// (bias and norm vectors in the weight allocation, the float64 RoPE table,
// in-place per-head norms) through eager prefill, decode graphs and mixed
// batches.
func TestCUDAEmuArchitecturesMatchCPU(t *testing.T) {
	for _, a := range gguf.ArchFixtures() {
		t.Run(a.Name, func(t *testing.T) {
			m := loadArchFixture(t, a.Name)
			gpu := newCUDAEmuRunner(t, m, cudaGreedyConfig(false))
			require.Len(t, cudaGreedyScenario(t, m, gpu, 20), 21)
			cudaBatchScenario(t, m, newCUDAEmuRunner(t, m, cudaBatchConfig()))
		})
	}
}
