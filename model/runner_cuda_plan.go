package model

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/step"
)

// This file is the CUDA runner's arithmetic that needs no GPU: which type
// each weight is uploaded as and where it lands, the activation buffers and
// their offsets, the decode-attention split plan, and the per-step layout of
// the int32 inputs uploaded before a step. Tests check all of it on the CPU.

// cudaAlign is the alignment of every sub-buffer inside one device allocation
// (cuBLASLt wants 16 bytes; 256 matches what cuMemAlloc returns).
const cudaAlign = 256

func cudaAlignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// cudaUpload is how one weight matrix reaches the device.
type cudaUpload uint8

const (
	cudaUploadCopy    cudaUpload = iota // bytes as stored in the file
	cudaUploadDequant                   // a block type (Q4_0 ... Q6_K) staged, dequantised to bf16 on the device
	cudaUploadCastF32                   // f32 staged, rounded to bf16/f16 on the device
	cudaUploadHost                      // converted on the host through float32, row chunks (f16 ↔ bf16)
)

// cudaWeight is one matrix of the weight allocation.
type cudaWeight struct {
	src       kernels.Matrix
	dt        kernels.DType // element type on the device
	how       cudaUpload
	off, size uint64 // byte range in the weight allocation
}

// cudaNorm is one float32 vector of the weight allocation: norm weights or
// biases. An absent one (no bias, no Q/K norm) has src nil and size 0.
type cudaNorm struct {
	src       []float32
	off, size uint64
}

// cudaLayerWeights are one layer's matrices in forward order.
type cudaLayerWeights struct {
	q, k, v, o, gate, up, down cudaWeight
	attnNorm, ffnNorm          cudaNorm
	qBias, kBias, vBias        cudaNorm // [Heads·HeadDim], [KVHeads·HeadDim] ×2 (qwen2)
	qNorm, kNorm               cudaNorm // [HeadDim] (qwen3)
}

// cudaWeightPlan places every weight of a model in one device allocation.
type cudaWeightPlan struct {
	gemm    kernels.DType // element type of every GEMM weight and GEMM input
	embd    cudaWeight    // the table, as stored (the embedding kernel reads every type)
	output  cudaWeight    // may share embd's bytes (tied output of the GEMM type)
	outNorm cudaNorm
	layers  []cudaLayerWeights
	// ropeFreqs is the model's RoPE table, float64 [HeadDim/2], at byte
	// ropeOff of the allocation.
	ropeFreqs []float64
	ropeOff   uint64
	total     uint64 // bytes of the allocation
}

// vectors is every small host vector the upload copies as is: norms,
// biases and the RoPE table, as (offset, bytes) pairs, absent ones left out.
func (p *cudaWeightPlan) vectors() []cudaVector {
	out := []cudaVector{{p.ropeOff, cudaF64Bytes(p.ropeFreqs)}}
	add := func(ns ...cudaNorm) {
		for _, n := range ns {
			if n.size > 0 {
				out = append(out, cudaVector{n.off, cudaF32Bytes(n.src)})
			}
		}
	}
	add(p.outNorm)
	for i := range p.layers {
		l := &p.layers[i]
		add(l.attnNorm, l.ffnNorm, l.qBias, l.kBias, l.vBias, l.qNorm, l.kNorm)
	}
	return out
}

// cudaVector is bytes to copy to offset off of the weight allocation.
type cudaVector struct {
	off  uint64
	data []byte
}

// cudaF64Bytes views v as bytes.
func cudaF64Bytes(v []float64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 8*len(v))
}

// cudaGemmType maps a GEMM weight type to cuBLASLt's.
func cudaGemmType(t kernels.DType) cuda.DType {
	switch t {
	case kernels.F16:
		return cuda.F16
	case kernels.BF16:
		return cuda.BF16
	}
	return cuda.F32
}

// cudaGemmTypeOf picks the GEMM element type of a model: its matrices' type when
// they all share one cuBLASLt can multiply (f32, f16, bf16), else bf16 (block
// types are dequantised, mixed files are unified).
func cudaGemmTypeOf(m *Llama) kernels.DType {
	t := m.output.Type
	for i := range m.layers {
		l := &m.layers[i]
		for _, w := range []*kernels.Matrix{&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down} {
			if w.Type != t {
				return kernels.BF16
			}
		}
	}
	switch t {
	case kernels.F32, kernels.F16, kernels.BF16:
		return t
	}
	return kernels.BF16
}

// cudaUploadFor is how a matrix of type src becomes type dst.
func cudaUploadFor(src, dst kernels.DType) cudaUpload {
	switch {
	case src == dst:
		return cudaUploadCopy
	case src.BlockElems() > 1 && dst == kernels.BF16:
		return cudaUploadDequant
	case src == kernels.F32 && (dst == kernels.BF16 || dst == kernels.F16):
		return cudaUploadCastF32
	}
	return cudaUploadHost
}

// cudaElemBytes is the size of one element of a non-block type.
func cudaElemBytes(t kernels.DType) uint64 {
	if t == kernels.F32 {
		return 4
	}
	return 2
}

// cudaEmbeddingReads reports whether the device embedding kernels read
// tables of type t (the table stays as stored on the device): every type
// the CPU runner reads (ops.cu and quant.cu have a gather for each).
func cudaEmbeddingReads(t kernels.DType) bool {
	return t.BlockElems() > 0
}

// cudaCheckTypes refuses a model with a tensor the CUDA runner cannot
// hold, naming the tensor and its type. NewCUDARunner calls it before it
// looks for a driver, so the answer does not depend on the machine.
func cudaCheckTypes(m *Llama) error {
	if !cudaEmbeddingReads(m.embd.Type) {
		return fmt.Errorf("model: CUDA runner: tensor %q has type %v; the device embedding reads F32, F16, BF16 and the block types Q4_0 ... Q6_K",
			"token_embd.weight", m.embd.Type)
	}
	return nil
}

// cudaPlanWeights lays out every weight of m for upload.
func cudaPlanWeights(m *Llama) (cudaWeightPlan, error) {
	if err := cudaCheckTypes(m); err != nil {
		return cudaWeightPlan{}, err
	}
	p := cudaWeightPlan{gemm: cudaGemmTypeOf(m)}
	var off uint64
	place := func(w kernels.Matrix, dt kernels.DType) (cudaWeight, error) {
		var size uint64
		if dt == w.Type {
			size = uint64(len(w.Data))
		} else {
			size = uint64(w.Rows) * uint64(w.Cols) * cudaElemBytes(dt)
		}
		if err := w.Validate(); err != nil {
			return cudaWeight{}, err
		}
		cw := cudaWeight{src: w, dt: dt, how: cudaUploadFor(w.Type, dt), off: off, size: size}
		off = cudaAlignUp(off+size, cudaAlign)
		return cw, nil
	}
	norm := func(v []float32) cudaNorm {
		if v == nil {
			return cudaNorm{}
		}
		n := cudaNorm{src: v, off: off, size: 4 * uint64(len(v))}
		off = cudaAlignUp(off+n.size, cudaAlign)
		return n
	}
	var err error
	if p.embd, err = place(m.embd, m.embd.Type); err != nil {
		return p, fmt.Errorf("model: token_embd: %w", err)
	}
	if m.outputTied() && m.embd.Type == p.gemm {
		p.output = p.embd
	} else if p.output, err = place(m.output, p.gemm); err != nil {
		return p, fmt.Errorf("model: output: %w", err)
	}
	p.outNorm = norm(m.outNorm)
	p.ropeFreqs, p.ropeOff = m.ropeFreqs, off
	off = cudaAlignUp(off+8*uint64(len(m.ropeFreqs)), cudaAlign)
	p.layers = make([]cudaLayerWeights, len(m.layers))
	for i := range m.layers {
		src, dst := &m.layers[i], &p.layers[i]
		dst.attnNorm, dst.ffnNorm = norm(src.attnNorm), norm(src.ffnNorm)
		dst.qBias, dst.kBias, dst.vBias = norm(src.qBias), norm(src.kBias), norm(src.vBias)
		dst.qNorm, dst.kNorm = norm(src.qNorm), norm(src.kNorm)
		for _, w := range []struct {
			dst *cudaWeight
			src kernels.Matrix
		}{{&dst.q, src.q}, {&dst.k, src.k}, {&dst.v, src.v}, {&dst.o, src.o}, {&dst.gate, src.gate}, {&dst.up, src.up}, {&dst.down, src.down}} {
			if *w.dst, err = place(w.src, p.gemm); err != nil {
				return p, fmt.Errorf("model: layer %d: %w", i, err)
			}
		}
	}
	p.total = off
	return p, nil
}

// stagingBytes is the device scratch the uploads need: the largest matrix
// converted on the device, in its stored form.
func (p *cudaWeightPlan) stagingBytes() uint64 {
	var n uint64
	p.each(func(w *cudaWeight) {
		if w.how == cudaUploadDequant || w.how == cudaUploadCastF32 {
			n = max(n, uint64(len(w.src.Data)))
		}
	})
	return n
}

// each calls f on every distinct matrix upload.
func (p *cudaWeightPlan) each(f func(w *cudaWeight)) {
	f(&p.embd)
	if p.output.off != p.embd.off || p.output.size != p.embd.size {
		f(&p.output)
	}
	for i := range p.layers {
		l := &p.layers[i]
		for _, w := range []*cudaWeight{&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down} {
			f(w)
		}
	}
}

// cudaBuffers are the offsets of the runner's activations and step state in
// one device allocation, sized for T tokens and R logits rows (R ≤ seats).
type cudaBuffers struct {
	x, d      uint64 // f32 [T][Dim]: residual stream; sublayer output added by the next norm
	xn        uint64 // gemm [T][Dim]: normalised GEMM input
	q, att    uint64 // f32 [T][Heads*HeadDim]
	attG      uint64 // gemm [T][Heads*HeadDim]: att cast for the output projection (= att for f32)
	k, v      uint64 // f32 [T][KVHeads*HeadDim]
	gate, up  uint64 // f32 [T][FFN]
	h         uint64 // gemm [T][FFN]: silu(gate)·up
	xs        uint64 // gemm [R][Dim]: the normalised rows that get logits
	logits    uint64 // f32 [R][Vocab]
	sampled   uint64 // int32 [R]: device argmax of each logits row
	last      uint64 // int32 [Seats]: each seat's latest sampled token (FutureToken's value)
	pairs     uint64 // int32 [R][2]: (seat, token) sampled on the host
	oPart     uint64 // decode attention partial outputs
	mlPart    uint64
	arena     uint64 // int32 step inputs (cudaStepLayout)
	total     uint64
	arenaSize uint64 // bytes of the arena
}

// cudaPlanBuffers places the activations for T tokens, R logits rows, seats
// seats, decode-attention scratch of the given sizes and an input arena of
// arenaElems int32s.
func cudaPlanBuffers(c gguf.LlamaConfig, T, R, seats int, gemm kernels.DType, oPart, mlPart uint64, arenaElems int) cudaBuffers {
	var b cudaBuffers
	var off uint64
	put := func(dst *uint64, n uint64) {
		*dst = off
		off = cudaAlignUp(off+max(n, 4), cudaAlign)
	}
	g := cudaElemBytes(gemm)
	t, r := uint64(T), uint64(R)
	qd, kvd := uint64(c.Heads*c.HeadDim), uint64(c.KVHeads*c.HeadDim)
	put(&b.x, 4*t*uint64(c.Dim))
	put(&b.d, 4*t*uint64(c.Dim))
	put(&b.xn, g*t*uint64(c.Dim))
	put(&b.q, 4*t*qd)
	put(&b.att, 4*t*qd)
	if gemm == kernels.F32 {
		b.attG = b.att
	} else {
		put(&b.attG, g*t*qd)
	}
	put(&b.k, 4*t*kvd)
	put(&b.v, 4*t*kvd)
	put(&b.gate, 4*t*uint64(c.FFN))
	put(&b.up, 4*t*uint64(c.FFN))
	put(&b.h, g*t*uint64(c.FFN))
	put(&b.xs, g*r*uint64(c.Dim))
	put(&b.logits, 4*r*uint64(c.Vocab))
	put(&b.sampled, 4*r)
	put(&b.last, 4*uint64(seats))
	put(&b.pairs, 8*r)
	put(&b.oPart, oPart)
	put(&b.mlPart, mlPart)
	b.arenaSize = 4 * uint64(arenaElems)
	put(&b.arena, b.arenaSize)
	b.total = off
	return b
}

// cudaMaxSplits bounds the splits of one decode-attention launch: more adds
// partial results to merge for little extra parallelism.
const cudaMaxSplits = 16

// cudaPlanDecodeSplits picks the split count of a decode graph of batch rows:
// enough (kv head, row, split) thread blocks to cover the device's sms
// multiprocessors twice, at most cudaMaxSplits:
//
//	splits = clamp(ceil(2·sms / (batch·kvHeads)), 1, cudaMaxSplits)
//
// It does not depend on the model's context: the kernel cuts each row's own
// context into that many ranges on the device (kernels.DecodeSplitRange), so
// a 4K-token row of a 128K-context model gets 16 busy splits at batch 1, not
// one split sized for the longest table.
func cudaPlanDecodeSplits(batch, kvHeads, sms int) int {
	rows := max(batch, 1) * max(kvHeads, 1)
	want := (2*max(sms, 0) + rows - 1) / rows
	return max(1, min(want, cudaMaxSplits))
}

// cudaPlanCascadeSplits picks the shared-run split count of a cascade
// decode graph of batch rows: enough (tile, kv head, split) thread blocks to
// cover the device twice were every row in one group (the fewest tiles,
// ceil(batch/perTile)), at most cudaMaxSplits:
//
//	splits = clamp(ceil(2·sms / (kvHeads·ceil(batch/perTile))), 1, cudaMaxSplits)
//
// Like the decode splits it does not depend on the context: the kernel cuts
// each group's run on the device (kernels.CascadeSplitRange).
func cudaPlanCascadeSplits(batch, kvHeads, perTile, sms int) int {
	tiles := max(1, (max(batch, 1)+max(perTile, 1)-1)/max(perTile, 1))
	rows := tiles * max(kvHeads, 1)
	want := (2*max(sms, 0) + rows - 1) / rows
	return max(1, min(want, cudaMaxSplits))
}

// cudaStepLayout places one step's int32 inputs in the arena, contiguously,
// so one upload carries them all. Offsets are in int32 elements; sections are
// 16-byte aligned. A decode graph of batch P uses the layout of (P, P, P,
// its table width), fixed at capture; a cascade decode graph adds the group
// sections (withCascade).
type cudaStepLayout struct {
	T, N, R, MB int // tokens, sequences, logits rows, block-table columns

	tok, pos, slot, seat int // per token [T]
	qStart, numQ, ctxLen int // per sequence [N]
	tables               int // [N][MB]
	gather, lastSeat     int // per logits row [R]

	// Cascade sections (kernels.CascadeInputs), present when MT > 0: MT is
	// the most shared-prefix tiles (the cascade grid's x extent).
	MT                                        int
	startBlk, cascTiles, cascNum, cascMembers int // [N], [MT][3], [1], [N]
	total                                     int
}

// withCascade is l with the cascade sections for at most maxTiles tiles
// after its own (so every other offset stays where a plain graph has it).
func (l cudaStepLayout) withCascade(maxTiles int) cudaStepLayout {
	off := l.total
	put := func(dst *int, n int) {
		*dst = off
		off += (n + 3) &^ 3
	}
	l.MT = maxTiles
	put(&l.startBlk, l.N)
	put(&l.cascTiles, 3*maxTiles)
	put(&l.cascNum, 1)
	put(&l.cascMembers, l.N)
	l.total = off
	return l
}

// cascade is the device view of l's cascade sections in arena.
func (l *cudaStepLayout) cascade(arena cuda.DevicePtr) kernels.CascadeInputs {
	return kernels.CascadeInputs{StartBlocks: l.ptr(arena, l.startBlk), Tiles: l.ptr(arena, l.cascTiles),
		NumTiles: l.ptr(arena, l.cascNum), Rows: l.ptr(arena, l.cascMembers)}
}

// cudaFillCascadeEmpty writes l's cascade sections for a step with no
// group: every row starts at block 0, no tile.
func cudaFillCascadeEmpty(s []int32, l *cudaStepLayout) {
	clear(s[l.startBlk : l.startBlk+l.N])
	s[l.cascNum] = 0
}

func newCUDAStepLayout(T, N, R, MB int) cudaStepLayout {
	l := cudaStepLayout{T: T, N: N, R: R, MB: MB}
	off := 0
	put := func(dst *int, n int) {
		*dst = off
		off += (n + 3) &^ 3
	}
	put(&l.tok, T)
	put(&l.pos, T)
	put(&l.slot, T)
	put(&l.seat, T)
	put(&l.qStart, N)
	put(&l.numQ, N)
	put(&l.ctxLen, N)
	put(&l.tables, N*MB)
	put(&l.gather, R)
	put(&l.lastSeat, R)
	l.total = off
	return l
}

// ptr is the device address of the section at element offset off.
func (l *cudaStepLayout) ptr(arena cuda.DevicePtr, off int) cuda.DevicePtr {
	return arena.Add(4 * uint64(off))
}

// CUDAMemory is the CUDA runner's memory plan, for start-up logs.
type CUDAMemory struct {
	Device       string
	Total, Free  uint64  // device bytes before loading (cuMemGetInfo)
	Fraction     float64 // share of Total the runner may use
	Weights      uint64  // bytes of uploaded weights
	Activations  uint64  // bytes of activations, step inputs and workspaces
	Reserved     uint64  // bytes measured in the dry run beyond those, plus a safety margin
	KVBlocks     int
	BlockSize    int
	KVBytes      uint64 // bytes of the one KV allocation
	KVType       string // "bf16" or "f32"
	GemmType     string
	GraphBatches []int // decode batch sizes captured as CUDA graphs
	// CascadeBatches are the sizes whose graph has a cascade twin (steps
	// with groups attend shared runs once); empty with NoCascade.
	CascadeBatches []int
	// GraphCopies is whether the graphs hold the step's input upload and
	// sampled-id download (else those run as separate copies).
	GraphCopies bool
}

// KVTokens is the number of token positions the KV cache holds.
func (m CUDAMemory) KVTokens() int { return m.KVBlocks * m.BlockSize }

func cudaGiB(n uint64) float64 { return float64(n) / (1 << 30) }

// String is the one-paragraph capacity report `turnstile serve` prints.
func (m CUDAMemory) String() string {
	return fmt.Sprintf("cuda %s: KV cache %d blocks × %d = %d tokens (%.2f GiB %s); weights %.2f GiB (%s GEMMs); activations %.2f GiB; reserved %.2f GiB; budget %.2f × %.2f GiB (%.2f GiB free at start); decode graphs for batch %v (copies inside: %v); cascade twins for batch %v",
		m.Device, m.KVBlocks, m.BlockSize, m.KVTokens(), cudaGiB(m.KVBytes), m.KVType, cudaGiB(m.Weights), m.GemmType,
		cudaGiB(m.Activations), cudaGiB(m.Reserved), m.Fraction, cudaGiB(m.Total), cudaGiB(m.Free), m.GraphBatches, m.GraphCopies, m.CascadeBatches)
}

// cudaPlanKVBlocks sizes the KV cache: fixed when want > 0, else from the
// memory plan. blockBytes is checked to fit uint64 arithmetic.
func cudaPlanKVBlocks(want int, p kernels.KVMemoryPlan) (int, error) {
	if want > 0 {
		if uint64(want) > math.MaxUint64/p.BlockBytes() {
			return 0, fmt.Errorf("model: %d KV blocks of %d bytes overflow", want, p.BlockBytes())
		}
		return want, nil
	}
	return p.Blocks()
}

// cudaI32Bytes views v as bytes (no copy).
func cudaI32Bytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// cudaF32Bytes views v as bytes (no copy).
func cudaF32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// cudaBytesI32 views b (length a multiple of 4, 4-byte aligned) as int32s.
func cudaBytesI32(b []byte) []int32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// cudaBytesF32 views b (length a multiple of 4, 4-byte aligned) as float32s.
func cudaBytesF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// cudaDryRun is the layout of the dry run: every one of the T = MaxBatchTokens
// tokens in sequences of at most the model's context (rounded up to a block),
// with logits for rows rows, so that every activation buffer and the
// largest GEMM and attention shapes are exercised. It returns the layout and
// the most new tokens of one sequence.
func cudaDryRun(c step.Capacity, rows int) (cudaStepLayout, int) {
	T := c.MaxBatchTokens
	chunk := min(T, cudaTableColumns(c)*c.BlockSize)
	n := (T + chunk - 1) / chunk
	return newCUDAStepLayout(T, n, rows, (chunk+c.BlockSize-1)/c.BlockSize), chunk
}

// cudaFillDryRun writes the dry run's inputs (see cudaDryRun) into s: token
// 0 everywhere, block tables cycling over blocks scratch blocks, no row
// updating a seat's last token.
func cudaFillDryRun(s []int32, c step.Capacity, rows, blocks int) cudaStepLayout {
	l, chunk := cudaDryRun(c, rows)
	bs := int32(c.BlockSize)
	for q := 0; q < l.N; q++ {
		start := q * chunk
		cnt := min(chunk, l.T-start)
		table := s[l.tables+q*l.MB : l.tables+(q+1)*l.MB]
		for col := range table {
			table[col] = int32(col % blocks)
		}
		for j := 0; j < cnt; j++ {
			p := int32(j)
			s[l.tok+start+j], s[l.pos+start+j], s[l.seat+start+j] = 0, p, 0
			s[l.slot+start+j] = table[p/bs]*bs + p%bs
		}
		s[l.qStart+q], s[l.numQ+q], s[l.ctxLen+q] = int32(start), int32(cnt), int32(cnt)
	}
	for j := 0; j < l.R; j++ {
		s[l.gather+j], s[l.lastSeat+j] = int32(j%l.T), -1
	}
	return l
}

// cudaFillPadding writes a decode step of p padding rows with tables of mb
// columns into s: what a graph is warmed up and captured with. maxTiles > 0
// adds the cascade sections (a cascade graph), with no group.
func cudaFillPadding(s []int32, p, mb, maxTiles int) cudaStepLayout {
	l := newCUDAStepLayout(p, p, p, mb)
	if maxTiles > 0 {
		l = l.withCascade(maxTiles)
		cudaFillCascadeEmpty(s, &l)
	}
	for j := 0; j < p; j++ {
		cudaPadRow(s, &l, j)
		s[l.gather+j], s[l.lastSeat+j] = int32(j), -1
	}
	return l
}

// cudaPadRow makes row j of a decode layout a padding row: a valid token
// at position 0 whose K/V write is skipped (slot −1) and whose attention is
// empty (context 0).
func cudaPadRow(s []int32, l *cudaStepLayout, j int) {
	s[l.tok+j], s[l.pos+j], s[l.slot+j], s[l.seat+j] = 0, 0, -1, 0
	s[l.qStart+j], s[l.numQ+j], s[l.ctxLen+j] = int32(j), 1, 0
	clear(s[l.tables+j*l.MB : l.tables+(j+1)*l.MB])
}

// cudaU16Bytes views v as bytes (no copy).
func cudaU16Bytes(v []uint16) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 2*len(v))
}

// cudaConvertRows converts rows [r0, r1) of m to bf16 or f16 (to) in dst,
// through f32 (scratch of the same length as dst).
func cudaConvertRows(dst []uint16, m kernels.Matrix, r0, r1 int, to kernels.DType, f32 []float32) error {
	n := (r1 - r0) * m.Cols
	if r0 < 0 || r1 > m.Rows || r0 > r1 || len(dst) != n || len(f32) != n {
		return fmt.Errorf("model: convert rows [%d, %d) of a %d×%d matrix into %d values", r0, r1, m.Rows, m.Cols, len(dst))
	}
	if to != kernels.BF16 && to != kernels.F16 {
		return fmt.Errorf("model: convert %v rows to %v: want bf16 or f16", m.Type, to)
	}
	rb := len(m.Data) / m.Rows
	if err := gguf.Dequantize(gguf.GGMLType(m.Type), m.Data[r0*rb:r1*rb], f32); err != nil {
		return fmt.Errorf("model: convert %v rows [%d, %d): %w", m.Type, r0, r1, err)
	}
	for i, v := range f32 {
		if to == kernels.F16 {
			dst[i] = kernels.F32ToF16(v)
		} else {
			dst[i] = kernels.F32ToBF16(v)
		}
	}
	return nil
}
