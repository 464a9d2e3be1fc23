package model

import (
	"fmt"
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
	return kernels.Embedding(e.f32(out, ntok*cols), m, e.i32(tokens, ntok))
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

func (e *cudaEmu) RoPE(x, pos cuda.DevicePtr, rows, heads, headDim int, theta, freqScale float32) error {
	return kernels.RoPE(e.f32(x, rows*heads*headDim), e.i32(pos, rows), heads, headDim, theta, freqScale)
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

func (e *cudaEmu) DecodeAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, tables, ctxLens cuda.DevicePtr, d kernels.DecodeShape, scale float32, oPart, mlPart cuda.DevicePtr) error {
	if d.SplitBlocks*d.Splits < d.MaxBlocks || d.Heads%kv.KVHeads != 0 || d.Heads/kv.KVHeads > 16 {
		return fmt.Errorf("emulated decode attention: bad plan %+v for %d KV heads", d, kv.KVHeads)
	}
	o, ml := kernels.DecodeScratchBytes(d, kv.HeadDim)
	e.bytes(oPart, int(o)) // the scratch must exist
	e.bytes(mlPart, int(ml))
	row := d.Heads * kv.HeadDim
	os := e.f32(out, d.Batch*row)
	lens, tab := e.i32(ctxLens, d.Batch), e.i32(tables, d.Batch*d.MaxBlocks)
	var seqs []kernels.AttnSeq
	for b := 0; b < d.Batch; b++ {
		if lens[b] == 0 { // a padding row gets zeros
			clear(os[b*row : (b+1)*row])
			continue
		}
		seqs = append(seqs, kernels.AttnSeq{QStart: int32(b), NumQ: 1, ContextLen: lens[b], BlockTable: tab[b*d.MaxBlocks : (b+1)*d.MaxBlocks]})
	}
	return kernels.RefPagedAttention(os, e.f32(q, d.Batch*row), e.layer(kv), seqs, d.Heads, scale)
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
		seqs = append(seqs, kernels.AttnSeq{QStart: qs[i], NumQ: nq[i], ContextLen: lens[i], BlockTable: tab[i*p.MaxBlocks : (i+1)*p.MaxBlocks]})
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
	// Upload: the stored bytes, or the host conversion (the device
	// conversions round the same way, as package kernels checks on a GPU).
	r.wplan.each(func(w *cudaWeight) {
		dst := r.weights.Add(w.off)
		if w.how == cudaUploadCopy {
			copy(e.bytes(dst, len(w.src.Data)), w.src.Data)
			return
		}
		n := w.src.Rows * w.src.Cols
		require.NoError(tb, cudaConvertRows(e.u16(dst, n), w.src, 0, w.src.Rows, w.dt, make([]float32, n)))
	})
	norms := []cudaNorm{r.wplan.outNorm}
	for _, l := range r.wplan.layers {
		norms = append(norms, l.attnNorm, l.ffnNorm)
	}
	for _, n := range norms {
		copy(e.f32(r.weights.Add(n.off), len(n.src)), n.src)
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
	for i, p := range pl.sizes {
		l := cudaFillPadding(r.host.staging, p, pl.graphMB)
		copy(e.bytes(r.buf(r.bufs.arena), 4*l.total), cudaI32Bytes(r.host.staging[:l.total]))
		require.NoError(tb, r.forward(e, &l, i+1, 1))
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m(t)
			gpu := newCUDAEmuRunner(t, m, CUDARunnerConfig{Seats: 2, BlockSize: 16, MaxBatchTokens: 16, KVBlocks: 8, KVF32: tc.kv32, KeepLogits: true})
			agree, worst := cudaFollowCPU(t, m, gpu, 60, tc.tol)
			t.Logf("%d/60 greedy tokens equal, worst logits error %.3g", agree, worst)
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
