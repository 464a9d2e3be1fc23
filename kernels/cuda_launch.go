package kernels

import (
	"fmt"
	"strings"

	"github.com/turnstile-llm/turnstile/cuda"
)

// Launch geometry shared with the .cu sources (a test checks the #defines).
const (
	cudaDecodeThreads  = 128 // TS_DECODE_THREADS
	cudaMaxGroup       = 16  // TS_MAX_GROUP: query heads per KV head
	cudaMaxHeadDim     = 256 // TS_MAX_HD
	cudaPrefillWarps   = 4   // TS_PREFILL_WARPS
	cudaPrefillTCWarps = 4   // TS_PFT_WARPS
	cudaPrefillTCRows  = 64  // TS_PFT_ROWS: query rows per tensor-core prefill block
	cudaPrefillTCKeys  = 64  // TS_PFT_KEYS: key positions per shared-memory tile
	cudaPrefillTCMaxHD = 128 // TS_PFT_MAX_HD
	cudaPrefillTCPad   = 8   // TS_PFT_PAD: bf16 padding per shared-memory row
	cudaCascadeThreads = 128 // TS_CASC_THREADS
	cudaCascadeRows    = 32  // TS_CASC_ROWS: query rows (member, head) per shared-prefix block
	cudaCascadeKeys    = 32  // TS_CASC_KEYS: key positions per shared-memory tile
	cudaSampleThreads  = 256 // TS_SAMPLE_THREADS
	cudaRowThreads     = 256 // block size of the row kernels
	cudaElemThreads    = 256 // block size of the element-wise kernels
	cudaMaxElemBlocks  = 4096
	cudaDefaultSmemCap = 48 << 10 // dynamic shared memory usable without opting in
)

// CUDAModule is one compiled kernel source.
type CUDAModule struct {
	Name    string
	Cubin   []byte
	Entries []string
}

// CompileCUDA returns the cubin of every kernel source for arch ("sm_90"),
// through cc: compiled by NVRTC on a cold start, read from disk on a warm one.
func CompileCUDA(cc *cuda.CubinCache, arch string) ([]CUDAModule, error) {
	srcs, err := CUDASources()
	if err != nil {
		return nil, err
	}
	mods := make([]CUDAModule, 0, len(srcs))
	for _, s := range srcs {
		cubin, err := cc.Get(s.Source, s.Name, arch, CUDAOptions())
		if err != nil {
			return nil, fmt.Errorf("kernels: %s for %s: %w", s.Name, arch, err)
		}
		mods = append(mods, CUDAModule{Name: s.Name, Cubin: cubin, Entries: s.Entries})
	}
	return mods, nil
}

// CUDAKV is one layer's paged KV cache in device memory: K and V each
// [NumBlocks][KVHeads][BlockSize][HeadDim] of float32, or of bf16 when BF16.
type CUDAKV struct {
	K, V                                   cuda.DevicePtr
	BF16                                   bool
	NumBlocks, KVHeads, BlockSize, HeadDim int
}

func (kv CUDAKV) suffix() string {
	if kv.BF16 {
		return "_bf16"
	}
	return "_f32"
}

func (kv CUDAKV) validate() error {
	if kv.NumBlocks <= 0 || kv.KVHeads <= 0 || kv.BlockSize <= 0 || kv.HeadDim <= 0 {
		return fmt.Errorf("kernels: CUDA KV shape blocks=%d kvHeads=%d blockSize=%d headDim=%d must be positive",
			kv.NumBlocks, kv.KVHeads, kv.BlockSize, kv.HeadDim)
	}
	if kv.HeadDim > cudaMaxHeadDim {
		return fmt.Errorf("kernels: CUDA attention headDim %d exceeds %d", kv.HeadDim, cudaMaxHeadDim)
	}
	return nil
}

// CUDAKernels holds the loaded kernel modules of one device and launches them.
// Every method takes the device's Ctx (so it runs on the device thread) and a
// stream; pointers are device memory; shapes are validated before launch and
// errors name the offending values. It reuses one argument buffer, so it is
// used from the device thread only (as Ctx already requires).
type CUDAKernels struct {
	mods    []cuda.Module
	fns     map[string]cuda.Function
	smemCap int // dynamic shared memory bytes the decode and tensor-core prefill kernels are allowed
	args    cuda.Args
}

// LoadCUDAKernels loads every module and resolves its entry points.
func LoadCUDAKernels(c cuda.Ctx, mods []CUDAModule) (*CUDAKernels, error) {
	k := &CUDAKernels{fns: map[string]cuda.Function{}, smemCap: cudaDefaultSmemCap}
	for _, m := range mods {
		mod, err := c.LoadModule(m.Cubin)
		if err != nil {
			k.Unload(c)
			return nil, fmt.Errorf("kernels: load %s: %w", m.Name, err)
		}
		k.mods = append(k.mods, mod)
		for _, e := range m.Entries {
			f, err := c.Function(mod, e)
			if err != nil {
				k.Unload(c)
				return nil, fmt.Errorf("kernels: %s: %w", m.Name, err)
			}
			k.fns[e] = f
		}
	}
	// Let the decode, tensor-core prefill and shared-prefix kernels use the
	// device's opt-in shared memory.
	if optin := c.Props().MaxSharedOptin; optin > k.smemCap {
		for _, e := range []string{"ts_paged_decode_f32", "ts_paged_decode_bf16", "ts_paged_prefill_tc_f32", "ts_paged_prefill_tc_bf16",
			"ts_cascade_shared_f32", "ts_cascade_shared_bf16"} {
			if f, ok := k.fns[e]; ok {
				if err := c.SetMaxDynamicShared(f, optin); err != nil {
					k.Unload(c)
					return nil, err
				}
			}
		}
		k.smemCap = optin
	}
	return k, nil
}

// Unload unloads every module; the CUDAKernels is unusable afterwards.
func (k *CUDAKernels) Unload(c cuda.Ctx) error {
	var first error
	for _, m := range k.mods {
		if err := c.UnloadModule(m); err != nil && first == nil {
			first = err
		}
	}
	k.mods, k.fns = nil, nil
	return first
}

func (k *CUDAKernels) launch(c cuda.Ctx, name string, grid, block cuda.Dim3, smem int, s cuda.Stream) error {
	f, ok := k.fns[name]
	if !ok {
		return fmt.Errorf("kernels: CUDA kernel %s not loaded", name)
	}
	return c.Launch(f, grid, block, uint32(smem), s, &k.args)
}

// dim1 is a one-dimensional grid or block of n.
func dim1(n int) cuda.Dim3 { return cuda.Dim3{X: uint32(n), Y: 1, Z: 1} }

// elemGrid covers n elements with grid-stride loops, at most cudaMaxElemBlocks blocks.
func elemGrid(n int) cuda.Dim3 {
	return dim1(max(1, min(cudaMaxElemBlocks, ceilDiv(n, cudaElemThreads))))
}

func positive(what string, vals ...int) error {
	for _, v := range vals {
		if v <= 0 {
			return fmt.Errorf("kernels: CUDA %s: sizes %v must be positive", what, vals)
		}
	}
	return nil
}

// RMSNorm: y[r] = x[r]/sqrt(mean(x[r]²)+eps) ⊙ w; x, y [rows][dim], w [dim].
func (k *CUDAKernels) RMSNorm(c cuda.Ctx, s cuda.Stream, y, x, w cuda.DevicePtr, rows, dim int, eps float32) error {
	if err := positive("RMSNorm rows, dim", rows, dim); err != nil {
		return err
	}
	k.args.Reset().Ptr(y).Ptr(x).Ptr(w).I32(int32(dim)).F32(eps)
	return k.launch(c, "ts_rmsnorm", dim1(rows), dim1(cudaRowThreads), 0, s)
}

// RoPE rotates adjacent pairs of x [rows][heads*headDim] in place by
// pos[r]·freqScale·theta^(−2i/headDim); pos is int32 [rows].
func (k *CUDAKernels) RoPE(c cuda.Ctx, s cuda.Stream, x, pos cuda.DevicePtr, rows, heads, headDim int, theta, freqScale float32) error {
	if err := positive("RoPE rows, heads, headDim", rows, heads, headDim); err != nil {
		return err
	}
	if headDim%2 != 0 {
		return fmt.Errorf("kernels: CUDA RoPE headDim %d must be even", headDim)
	}
	k.args.Reset().Ptr(x).Ptr(pos).I32(int32(rows)).I32(int32(heads)).I32(int32(headDim)).F32(theta).F32(freqScale)
	return k.launch(c, "ts_rope", dim1(ceilDiv(rows*headDim/2, cudaElemThreads)), dim1(cudaElemThreads), 0, s)
}

// RoPEFreqs rotates pair i of every head of x [rows][heads*headDim] in
// place by pos[r]·freqs[i] radians (see RoPEFreqs); pos is int32 [rows],
// freqs float64 [headDim/2].
func (k *CUDAKernels) RoPEFreqs(c cuda.Ctx, s cuda.Stream, x, pos, freqs cuda.DevicePtr, rows, heads, headDim int, neox bool) error {
	if err := positive("RoPEFreqs rows, heads, headDim", rows, heads, headDim); err != nil {
		return err
	}
	if headDim%2 != 0 {
		return fmt.Errorf("kernels: CUDA RoPEFreqs headDim %d must be even", headDim)
	}
	var nx int32
	if neox {
		nx = 1
	}
	k.args.Reset().Ptr(x).Ptr(pos).I32(int32(rows)).I32(int32(heads)).I32(int32(headDim)).Ptr(freqs).I32(nx)
	return k.launch(c, "ts_rope_freqs", dim1(ceilDiv(rows*headDim/2, cudaElemThreads)), dim1(cudaElemThreads), 0, s)
}

// AddBias adds b [n] to every row of x [rows][n] (float32) in place.
func (k *CUDAKernels) AddBias(c cuda.Ctx, s cuda.Stream, x, b cuda.DevicePtr, rows, n int) error {
	if err := positive("AddBias rows, n", rows, n); err != nil {
		return err
	}
	k.args.Reset().Ptr(x).Ptr(b).I32(int32(n)).U64(uint64(rows) * uint64(n))
	return k.launch(c, "ts_add_bias", elemGrid(rows*n), dim1(cudaElemThreads), 0, s)
}

// SiLUMul: y = silu(gate) ⊙ up over n floats.
func (k *CUDAKernels) SiLUMul(c cuda.Ctx, s cuda.Stream, y, gate, up cuda.DevicePtr, n int) error {
	if err := positive("SiLUMul n", n); err != nil {
		return err
	}
	k.args.Reset().Ptr(y).Ptr(gate).Ptr(up).U64(uint64(n))
	return k.launch(c, "ts_silu_mul", elemGrid(n), dim1(cudaElemThreads), 0, s)
}

// Embedding gathers rows tokens[i] (int32 [ntok]) of table [vocab][cols] of
// type t into out [ntok][cols] float32.
func (k *CUDAKernels) Embedding(c cuda.Ctx, s cuda.Stream, out, table cuda.DevicePtr, t DType, tokens cuda.DevicePtr, ntok, vocab, cols int) error {
	if err := positive("Embedding ntok, vocab, cols", ntok, vocab, cols); err != nil {
		return err
	}
	var name string
	switch t {
	case F32:
		name = "ts_embedding_f32"
	case F16:
		name = "ts_embedding_f16"
	case BF16:
		name = "ts_embedding_bf16"
	default:
		q, ok := cudaQuantName(t)
		if !ok {
			return fmt.Errorf("kernels: CUDA Embedding of %v tables is not supported", t)
		}
		if e := t.BlockElems(); cols%e != 0 {
			return fmt.Errorf("kernels: CUDA Embedding %v cols %d is not a multiple of %d", t, cols, e)
		}
		name = "ts_embedding_" + q
	}
	k.args.Reset().Ptr(out).Ptr(table).Ptr(tokens).I32(int32(vocab)).I32(int32(cols))
	return k.launch(c, name, dim1(ntok), dim1(cudaRowThreads), 0, s)
}

// CastF32 converts n floats at in to bf16 or f16 at out (the GEMM input type).
func (k *CUDAKernels) CastF32(c cuda.Ctx, s cuda.Stream, out, in cuda.DevicePtr, n int, to cuda.DType) error {
	if err := positive("CastF32 n", n); err != nil {
		return err
	}
	var name string
	switch to {
	case cuda.BF16:
		name = "ts_cast_f32_bf16"
	case cuda.F16:
		name = "ts_cast_f32_f16"
	default:
		return fmt.Errorf("kernels: CUDA CastF32 to %v: want bf16 or f16", to)
	}
	k.args.Reset().Ptr(out).Ptr(in).U64(uint64(n))
	return k.launch(c, name, elemGrid(n), dim1(cudaElemThreads), 0, s)
}

// cudaQuantName is the kernel-name suffix of a block type ("q4_k"); ok is
// false for the other types.
func cudaQuantName(t DType) (string, bool) {
	if t.BlockElems() <= 1 {
		return "", false
	}
	return strings.ToLower(t.String()), true
}

// DequantToBF16 converts a matrix [rows][cols] of block type t (Q4_0 ...
// Q8_0, Q2_K ... Q6_K) to bf16: block-quantised weights are uploaded as
// stored and widened for the GEMMs on the device.
func (k *CUDAKernels) DequantToBF16(c cuda.Ctx, s cuda.Stream, out, in cuda.DevicePtr, t DType, rows, cols int) error {
	if err := positive("DequantToBF16 rows, cols", rows, cols); err != nil {
		return err
	}
	q, ok := cudaQuantName(t)
	if !ok {
		return fmt.Errorf("kernels: CUDA DequantToBF16 of %v: not a block type", t)
	}
	if e := t.BlockElems(); cols%e != 0 {
		return fmt.Errorf("kernels: CUDA %v cols %d is not a multiple of %d", t, cols, e)
	}
	k.args.Reset().Ptr(out).Ptr(in).U64(uint64(rows)).I32(int32(cols))
	return k.launch(c, "ts_dequant_"+q+"_bf16", elemGrid(rows*cols), dim1(cudaElemThreads), 0, s)
}

// Argmax writes the index of the first largest element of each row of x
// [rows][n] to out (int32 [rows]).
func (k *CUDAKernels) Argmax(c cuda.Ctx, s cuda.Stream, out, x cuda.DevicePtr, rows, n int) error {
	if err := positive("Argmax rows, n", rows, n); err != nil {
		return err
	}
	k.args.Reset().Ptr(out).Ptr(x).I32(int32(n))
	return k.launch(c, "ts_argmax", dim1(rows), dim1(cudaRowThreads), 0, s)
}

// SampleParams are the device arrays of per-row sampling settings, each
// [rows]: Temperature, TopP, MinP, U float32; TopK int32. U holds uniforms in
// [0, 1) the host draws from each request's seeded RNG.
type SampleParams struct {
	Temperature, TopK, TopP, MinP, U cuda.DevicePtr
}

// Sample draws one token per row of logits [rows][n] into out (int32 [rows]);
// see sampling.cu for the exact rule.
func (k *CUDAKernels) Sample(c cuda.Ctx, s cuda.Stream, out, logits cuda.DevicePtr, rows, n int, p SampleParams) error {
	if err := positive("Sample rows, n", rows, n); err != nil {
		return err
	}
	k.args.Reset().Ptr(out).Ptr(logits).I32(int32(n)).Ptr(p.Temperature).Ptr(p.TopK).Ptr(p.TopP).Ptr(p.MinP).Ptr(p.U)
	return k.launch(c, "ts_sample", dim1(rows), dim1(cudaSampleThreads), 0, s)
}

// KVWrite stores ntok tokens' k and v rows (float32 [ntok][KVHeads*HeadDim])
// at cache slots slots (int32 [ntok], slot = block*BlockSize + offset; < 0
// skips a padding token).
func (k *CUDAKernels) KVWrite(c cuda.Ctx, s cuda.Stream, kv CUDAKV, kp, vp, slots cuda.DevicePtr, ntok int) error {
	if err := kv.validate(); err != nil {
		return err
	}
	if err := positive("KVWrite ntok", ntok); err != nil {
		return err
	}
	k.args.Reset().Ptr(kv.K).Ptr(kv.V).Ptr(kp).Ptr(vp).Ptr(slots).I32(int32(kv.KVHeads)).I32(int32(kv.BlockSize)).I32(int32(kv.HeadDim))
	return k.launch(c, "ts_kv_write"+kv.suffix(), dim1(ntok), dim1(cudaRowThreads), 0, s)
}

// DecodeShape is the split plan of one decode-attention launch.
type DecodeShape struct {
	Batch, Heads int
	MaxBlocks    int // columns of the block-table array
	// Splits is the number of ranges each row's context is cut into, run in
	// parallel and merged. The ranges come from the row's own context length
	// on the device (see DecodeSplitRange), so one plan serves every context
	// a captured graph meets; splits past a short row's end do no work.
	Splits int
	// CascadeSplits is the number of ranges a group's shared run is cut into
	// by CascadeDecodeAttention (CascadeSplitRange); 0 without cascade.
	// Every row then has Splits + CascadeSplits partials.
	CascadeSplits int
	// CascadeTiles is the x extent of the shared-prefix grid: the most tiles
	// (CascadeInputs.Tiles entries) a launch can meet, at least 1 with
	// cascade (see CascadeMaxTiles).
	CascadeTiles int
	// Window is the sliding window in positions (kernels.AttnSeq.Window; 0:
	// none): a row of context ctx attends to positions ≥ ctx − Window, and
	// its splits cover only the blocks from that position's on
	// (DecodeWindowSplitRange). A cascade member's window must cover its
	// whole context (the shared run is unmasked).
	Window int
}

// slots is the number of partial results per (row, head).
func (d DecodeShape) slots() int { return d.Splits + d.CascadeSplits }

// DecodeSplitRange is the block range [first, end) that split of splits
// covers in a row of ctxLen positions over a table of maxBlocks columns, as
// the decode kernel computes it for a row outside every cascade group: see
// DecodeTailSplitRange with startBlock 0.
func DecodeSplitRange(ctxLen, blockSize, maxBlocks, splits, split int) (first, end int) {
	return DecodeTailSplitRange(ctxLen, 0, blockSize, maxBlocks, splits, split)
}

// DecodeTailSplitRange is the block range [first, end) that split of splits
// covers in a row of ctxLen positions whose blocks before startBlock are
// attended elsewhere (a cascade member's shared run; 0 for any other row),
// as the decode kernel computes it: rowBlocks = min(ceil(ctxLen/blockSize),
// maxBlocks), start = startBlock clamped to [0, rowBlocks], n = rowBlocks −
// start, per = ceil(n/splits), split s covers start + [s·per, min(n,
// (s+1)·per)), empty (first == end) past the row's end.
func DecodeTailSplitRange(ctxLen, startBlock, blockSize, maxBlocks, splits, split int) (first, end int) {
	return DecodeWindowSplitRange(ctxLen, startBlock, 0, blockSize, maxBlocks, splits, split)
}

// DecodeWindowSplitRange is DecodeTailSplitRange for a row under a sliding
// window of window positions (0: none), as the decode kernel computes it:
// the range starts at the later of startBlock and the block of the first
// position the window sees, max(ctxLen − window, 0)/blockSize (clamped to
// rowBlocks).
func DecodeWindowSplitRange(ctxLen, startBlock, window, blockSize, maxBlocks, splits, split int) (first, end int) {
	rowBlocks := min(ceilDiv(max(ctxLen, 0), blockSize), maxBlocks)
	start := min(max(startBlock, 0), rowBlocks)
	if window > 0 {
		start = max(start, min(max(ctxLen-window, 0)/blockSize, rowBlocks))
	}
	n := rowBlocks - start
	per := ceilDiv(n, splits)
	off := min(n, split*per)
	return start + off, start + min(n, off+per)
}

// CascadeSplitRange is the block range [first, end) of a group's shared run
// of sharedBlocks blocks that split of splits covers in the shared-prefix
// kernel: per = ceil(sharedBlocks/splits), split s covers [s·per,
// min(sharedBlocks, (s+1)·per)), empty past the run's end.
func CascadeSplitRange(sharedBlocks, splits, split int) (first, end int) {
	per := ceilDiv(max(sharedBlocks, 0), splits)
	first = min(max(sharedBlocks, 0), split*per)
	return first, min(max(sharedBlocks, 0), first+per)
}

// DecodeScratchBytes is the size of the partial-result buffers DecodeAttention
// and CascadeDecodeAttention need: oPart [Batch][Heads][Splits+CascadeSplits][HeadDim]
// and mlPart [Batch][Heads][Splits+CascadeSplits][2] floats.
func DecodeScratchBytes(d DecodeShape, headDim int) (oPart, mlPart uint64) {
	n := uint64(d.Batch) * uint64(d.Heads) * uint64(d.slots())
	return 4 * n * uint64(headDim), 4 * n * 2
}

// decodeSmem is the dynamic shared memory of one decode block (see
// attention.cu): splitPages is the most pages one split stages,
// ceil(MaxBlocks/Splits).
func decodeSmem(group, headDim, blockSize, splitPages int) int {
	return 4 * (group*headDim + group*blockSize + 3*group + splitPages)
}

// cascadeSmem is the dynamic shared memory of one shared-prefix block (see
// attention.cu): the queries [rows][headDim+1], K [keys][headDim+1] and V
// [keys][headDim] tiles, the scores and three per-row floats. 53 KiB at
// headDim 128, 105 KiB at 256.
func cascadeSmem(headDim int) int {
	return 4 * (cudaCascadeRows*(headDim+1) + cudaCascadeKeys*(2*headDim+1) + cudaCascadeRows*cudaCascadeKeys + 3*cudaCascadeRows)
}

// CascadeTileMembers is how many group members one shared-prefix tile
// holds: TS_CASC_ROWS query rows of heads/kvHeads query heads each (0 when
// one member's heads do not fit a tile, or the shape is not GQA-valid).
func CascadeTileMembers(heads, kvHeads int) int {
	if heads <= 0 || kvHeads <= 0 || heads%kvHeads != 0 {
		return 0
	}
	return cudaCascadeRows / (heads / kvHeads)
}

// CascadeMaxTiles bounds the tiles of a decode batch of batch rows whose
// groups (each of at least two members, each row in at most one) are cut
// into tiles of perTile members: every tile holds a member, and a group of
// c members takes ceil(c/perTile) ≤ c/perTile + 1 tiles, so the tiles are at
// most min(batch, ceil(batch/perTile) + floor(batch/2)).
func CascadeMaxTiles(batch, perTile int) int {
	if batch < 2 || perTile <= 0 {
		return 0
	}
	return min(batch, ceilDiv(batch, perTile)+batch/2)
}

// decodeValidate checks a decode launch's shape and returns its query heads
// per KV head.
func (k *CUDAKernels) decodeValidate(kv CUDAKV, d DecodeShape) (group, smem int, err error) {
	if err := kv.validate(); err != nil {
		return 0, 0, err
	}
	if err := positive("DecodeAttention batch, heads, maxBlocks, splits", d.Batch, d.Heads, d.MaxBlocks, d.Splits); err != nil {
		return 0, 0, err
	}
	if d.Window < 0 {
		return 0, 0, fmt.Errorf("kernels: CUDA DecodeAttention window %d must be ≥ 0 (0: none)", d.Window)
	}
	if d.Heads%kv.KVHeads != 0 || d.Heads/kv.KVHeads > cudaMaxGroup {
		return 0, 0, fmt.Errorf("kernels: CUDA DecodeAttention heads %d must be a multiple of kvHeads %d with at most %d per group",
			d.Heads, kv.KVHeads, cudaMaxGroup)
	}
	group = d.Heads / kv.KVHeads
	pages := ceilDiv(d.MaxBlocks, d.Splits)
	smem = decodeSmem(group, kv.HeadDim, kv.BlockSize, pages)
	if smem > k.smemCap {
		return 0, 0, fmt.Errorf("kernels: CUDA DecodeAttention needs %d bytes of shared memory (group %d, headDim %d, blockSize %d, %d pages per split), device allows %d",
			smem, group, kv.HeadDim, kv.BlockSize, pages, k.smemCap)
	}
	return group, smem, nil
}

// DecodeAttention computes one query per sequence, q and out [Batch][Heads*HeadDim],
// over the paged cache kv, with block tables (int32 [Batch][MaxBlocks]) and context
// lengths (int32 [Batch]; 0 for a padding row, which gets zeros). Each row's
// context is cut into Splits ranges by DecodeSplitRange that run in parallel
// and are merged; oPart and mlPart are scratch of DecodeScratchBytes.
// d.CascadeSplits must be 0 (CascadeDecodeAttention attends shared runs).
func (k *CUDAKernels) DecodeAttention(c cuda.Ctx, s cuda.Stream, out, q cuda.DevicePtr, kv CUDAKV, tables, ctxLens cuda.DevicePtr,
	d DecodeShape, scale float32, oPart, mlPart cuda.DevicePtr) error {
	if d.CascadeSplits != 0 {
		return fmt.Errorf("kernels: CUDA DecodeAttention with %d cascade splits: use CascadeDecodeAttention", d.CascadeSplits)
	}
	_, smem, err := k.decodeValidate(kv, d)
	if err != nil {
		return err
	}
	if err := k.launchDecode(c, s, q, kv, tables, ctxLens, 0, d, smem, scale, oPart, mlPart); err != nil {
		return err
	}
	return k.launchCombine(c, s, out, kv, d, oPart, mlPart)
}

// launchDecode launches ts_paged_decode_* with per-row start blocks (0: none).
func (k *CUDAKernels) launchDecode(c cuda.Ctx, s cuda.Stream, q cuda.DevicePtr, kv CUDAKV, tables, ctxLens, startBlocks cuda.DevicePtr,
	d DecodeShape, smem int, scale float32, oPart, mlPart cuda.DevicePtr) error {
	k.args.Reset().Ptr(oPart).Ptr(mlPart).Ptr(q).Ptr(kv.K).Ptr(kv.V).Ptr(tables).I32(int32(d.MaxBlocks)).Ptr(ctxLens).
		Ptr(startBlocks).I32(int32(d.slots())).I32(int32(d.Heads)).I32(int32(kv.KVHeads)).I32(int32(kv.BlockSize)).
		I32(int32(kv.HeadDim)).F32(scale).I32(int32(d.Window))
	grid := cuda.Dim3{X: uint32(kv.KVHeads), Y: uint32(d.Batch), Z: uint32(d.Splits)}
	return k.launch(c, "ts_paged_decode"+kv.suffix(), grid, dim1(cudaDecodeThreads), smem, s)
}

// launchCombine merges every row's partials into out.
func (k *CUDAKernels) launchCombine(c cuda.Ctx, s cuda.Stream, out cuda.DevicePtr, kv CUDAKV, d DecodeShape, oPart, mlPart cuda.DevicePtr) error {
	k.args.Reset().Ptr(out).Ptr(oPart).Ptr(mlPart).I32(int32(d.Heads)).I32(int32(kv.HeadDim)).I32(int32(d.slots()))
	return k.launch(c, "ts_decode_combine", cuda.Dim3{X: uint32(d.Heads), Y: uint32(d.Batch), Z: 1},
		dim1(min(cudaMaxHeadDim, (kv.HeadDim+31)/32*32)), 0, s)
}

// CascadeInputs are the device arrays (int32) that describe a decode
// batch's groups to CascadeDecodeAttention. They are data, so a graph
// captured for a batch shape serves every grouping of that shape.
type CascadeInputs struct {
	// StartBlocks [Batch]: a member row's group's shared run length in
	// blocks (its tail starts there), 0 for every other row.
	StartBlocks cuda.DevicePtr
	// Tiles [CascadeTiles][3]: (first, count, shared) per tile: members
	// Rows[first : first+count] (at most CascadeTileMembers of them, all of
	// one group) share their first `shared` block-table entries.
	Tiles cuda.DevicePtr
	// NumTiles [1]: the tiles in use, at most DecodeShape.CascadeTiles.
	NumTiles cuda.DevicePtr
	// Rows: member batch rows, each at most once.
	Rows cuda.DevicePtr
}

// CascadeDecodeAttention is DecodeAttention for a batch with groups of rows
// sharing a leading run of blocks (step.Group): each member's decode splits
// cover only its tail (DecodeTailSplitRange from its start block), the
// shared-prefix kernel attends each group's run once for all its members in
// d.CascadeSplits ranges (CascadeSplitRange), and the combine merges every
// row's Splits + CascadeSplits partials. Rows outside every group (start
// block 0) get DecodeAttention's result. oPart and mlPart are scratch of
// DecodeScratchBytes(d). The result equals DecodeAttention's up to float
// rounding whatever the grouping, provided members' tables do agree on the
// shared run.
func (k *CUDAKernels) CascadeDecodeAttention(c cuda.Ctx, s cuda.Stream, out, q cuda.DevicePtr, kv CUDAKV, tables, ctxLens cuda.DevicePtr,
	ci CascadeInputs, d DecodeShape, scale float32, oPart, mlPart cuda.DevicePtr) error {
	_, smem, err := k.decodeValidate(kv, d)
	if err != nil {
		return err
	}
	if err := positive("CascadeDecodeAttention cascadeSplits, cascadeTiles", d.CascadeSplits, d.CascadeTiles); err != nil {
		return err
	}
	if CascadeTileMembers(d.Heads, kv.KVHeads) < 1 {
		return fmt.Errorf("kernels: CUDA CascadeDecodeAttention: %d query heads per KV head exceed a tile's %d rows", d.Heads/kv.KVHeads, cudaCascadeRows)
	}
	csmem := cascadeSmem(kv.HeadDim)
	if csmem > k.smemCap {
		return fmt.Errorf("kernels: CUDA CascadeDecodeAttention needs %d bytes of shared memory (headDim %d), device allows %d",
			csmem, kv.HeadDim, k.smemCap)
	}
	if ci.StartBlocks == 0 || ci.Tiles == 0 || ci.NumTiles == 0 || ci.Rows == 0 {
		return fmt.Errorf("kernels: CUDA CascadeDecodeAttention inputs %+v: every array must be set", ci)
	}
	if err := k.launchDecode(c, s, q, kv, tables, ctxLens, ci.StartBlocks, d, smem, scale, oPart, mlPart); err != nil {
		return err
	}
	k.args.Reset().Ptr(oPart).Ptr(mlPart).Ptr(q).Ptr(kv.K).Ptr(kv.V).Ptr(tables).I32(int32(d.MaxBlocks)).
		Ptr(ci.Tiles).Ptr(ci.NumTiles).Ptr(ci.Rows).I32(int32(d.slots())).I32(int32(d.Heads)).I32(int32(kv.KVHeads)).
		I32(int32(kv.BlockSize)).I32(int32(kv.HeadDim)).F32(scale)
	grid := cuda.Dim3{X: uint32(d.CascadeTiles), Y: uint32(kv.KVHeads), Z: uint32(d.CascadeSplits)}
	if err := k.launch(c, "ts_cascade_shared"+kv.suffix(), grid, dim1(cudaCascadeThreads), csmem, s); err != nil {
		return err
	}
	return k.launchCombine(c, s, out, kv, d, oPart, mlPart)
}

// PrefillKernel selects the kernel of a prefill-attention launch.
type PrefillKernel int

const (
	// PrefillAuto is the tensor-core kernel for a bf16 cache whose head dim
	// it supports, else the warp kernel. A float32 cache (the CPU layout, kept
	// for exact comparison with the CPU) stays on the warp kernel, which
	// accumulates in float32 without rounding q or the softmax weights.
	PrefillAuto PrefillKernel = iota
	// PrefillWarp is ts_paged_prefill_*: one warp per (query, head), float32
	// throughout, any head dim up to 256.
	PrefillWarp
	// PrefillTensorCore is ts_paged_prefill_tc_*: tiles of 64 queries × 64
	// keys through mma.sync with q, K, V and the softmax weights in bf16 and
	// float32 accumulation; head dims a multiple of 16 up to 128. Asking for
	// it where it does not apply is an error.
	PrefillTensorCore
)

func (pk PrefillKernel) String() string {
	switch pk {
	case PrefillAuto:
		return "auto"
	case PrefillWarp:
		return "warp"
	case PrefillTensorCore:
		return "tensor-core"
	}
	return fmt.Sprintf("PrefillKernel(%d)", int(pk))
}

// PrefillShape describes one prefill-attention launch over Seqs sequences.
type PrefillShape struct {
	Seqs, Heads int
	MaxQ        int // most queries of any sequence (sizes the grid)
	MaxBlocks   int // columns of the block-table array
	// Kernel picks the kernel; the zero value is PrefillAuto.
	Kernel PrefillKernel
	// Window is the sliding window in positions (0: none): a query at
	// position p attends to positions p−Window < k ≤ p.
	Window int
}

// prefillTCHeadDim reports whether the tensor-core prefill kernel handles
// headDim: whole k-steps of 16, and Q (headDim/16·4) plus O (headDim/8·4)
// fragments that fit in registers.
func prefillTCHeadDim(headDim int) bool {
	return headDim > 0 && headDim%16 == 0 && headDim <= cudaPrefillTCMaxHD
}

// prefillTCSmem is the dynamic shared memory of one tensor-core prefill block
// (see attention.cu): the K tile [keys][headDim+pad] and the transposed V tile
// [headDim][keys+pad], both bf16. 18 KiB at headDim 64, 35 KiB at 128.
func prefillTCSmem(headDim int) int {
	return 2 * (cudaPrefillTCKeys*(headDim+cudaPrefillTCPad) + headDim*(cudaPrefillTCKeys+cudaPrefillTCPad))
}

// prefillKernel resolves p.Kernel for kv: the kernel to launch, or why the
// requested one cannot run.
func (k *CUDAKernels) prefillKernel(kv CUDAKV, p PrefillShape) (PrefillKernel, error) {
	tcOK := prefillTCHeadDim(kv.HeadDim) && prefillTCSmem(kv.HeadDim) <= k.smemCap
	switch p.Kernel {
	case PrefillAuto:
		if kv.BF16 && tcOK {
			return PrefillTensorCore, nil
		}
		return PrefillWarp, nil
	case PrefillWarp:
		return PrefillWarp, nil
	case PrefillTensorCore:
		if !prefillTCHeadDim(kv.HeadDim) {
			return 0, fmt.Errorf("kernels: CUDA tensor-core PrefillAttention needs headDim a multiple of 16 up to %d, got %d",
				cudaPrefillTCMaxHD, kv.HeadDim)
		}
		if smem := prefillTCSmem(kv.HeadDim); smem > k.smemCap {
			return 0, fmt.Errorf("kernels: CUDA tensor-core PrefillAttention needs %d bytes of shared memory (headDim %d), device allows %d",
				smem, kv.HeadDim, k.smemCap)
		}
		return PrefillTensorCore, nil
	}
	return 0, fmt.Errorf("kernels: CUDA PrefillAttention kernel %v is not one of auto, warp, tensor-core", p.Kernel)
}

// PrefillAttention computes causal attention for chunks of queries: sequence
// i has NumQ[i] queries at q/out rows QStart[i].. (float32 [rows][Heads*HeadDim]),
// at positions CtxLen[i]-NumQ[i].., attending to positions 0..own (within
// p.Window of own when set), all already in kv. qStart, numQ, ctxLens are int32 [Seqs]; tables int32 [Seqs][MaxBlocks].
// p.Kernel picks the kernel (PrefillAuto: the tensor-core kernel for a bf16
// cache with headDim a multiple of 16 up to 128, else the warp kernel).
func (k *CUDAKernels) PrefillAttention(c cuda.Ctx, s cuda.Stream, out, q cuda.DevicePtr, kv CUDAKV, qStart, numQ, ctxLens, tables cuda.DevicePtr,
	p PrefillShape, scale float32) error {
	if err := kv.validate(); err != nil {
		return err
	}
	if err := positive("PrefillAttention seqs, heads, maxQ, maxBlocks", p.Seqs, p.Heads, p.MaxQ, p.MaxBlocks); err != nil {
		return err
	}
	if p.Heads%kv.KVHeads != 0 {
		return fmt.Errorf("kernels: CUDA PrefillAttention heads %d is not a multiple of kvHeads %d", p.Heads, kv.KVHeads)
	}
	if p.Window < 0 {
		return fmt.Errorf("kernels: CUDA PrefillAttention window %d must be ≥ 0 (0: none)", p.Window)
	}
	pk, err := k.prefillKernel(kv, p)
	if err != nil {
		return err
	}
	// Both kernels take the same parameters.
	k.args.Reset().Ptr(out).Ptr(q).Ptr(kv.K).Ptr(kv.V).Ptr(qStart).Ptr(numQ).Ptr(ctxLens).Ptr(tables).I32(int32(p.MaxBlocks)).
		I32(int32(p.Heads)).I32(int32(kv.KVHeads)).I32(int32(kv.BlockSize)).I32(int32(kv.HeadDim)).F32(scale).I32(int32(p.Window))
	if pk == PrefillTensorCore {
		grid := cuda.Dim3{X: uint32(ceilDiv(p.MaxQ, cudaPrefillTCRows)), Y: uint32(p.Heads), Z: uint32(p.Seqs)}
		return k.launch(c, "ts_paged_prefill_tc"+kv.suffix(), grid, dim1(32*cudaPrefillTCWarps), prefillTCSmem(kv.HeadDim), s)
	}
	grid := cuda.Dim3{X: uint32(ceilDiv(p.MaxQ, cudaPrefillWarps)), Y: uint32(p.Heads), Z: uint32(p.Seqs)}
	return k.launch(c, "ts_paged_prefill"+kv.suffix(), grid, dim1(32*cudaPrefillWarps), 0, s)
}

// AppendCascadeTiles appends one group to the host images of
// CascadeInputs: its members (batch rows whose first shared block-table
// entries agree) to rows, and its tiles, (first, count, shared) triples of
// at most perTile members each, to tiles. A group without a shared block or
// members adds nothing (its rows stay plain decode rows).
func AppendCascadeTiles(tiles, rows, members []int32, shared int32, perTile int) ([]int32, []int32) {
	if shared <= 0 || perTile <= 0 {
		return tiles, rows
	}
	for i := 0; i < len(members); i += perTile {
		n := min(perTile, len(members)-i)
		tiles = append(tiles, int32(len(rows)), int32(n), shared)
		rows = append(rows, members[i:i+n]...)
	}
	return tiles, rows
}
