package model

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/step"
)

// CUDARunnerConfig sizes a CUDARunner. Every device buffer is allocated from
// it at construction, so Execute allocates nothing.
type CUDARunnerConfig struct {
	// Device is the CUDA device ordinal.
	Device int
	// Seats, BlockSize and MaxBatchTokens mean what they mean for the CPU runner.
	Seats          int
	BlockSize      int
	MaxBatchTokens int
	// KVBlocks fixes the number of KV blocks; 0 sizes the cache from
	// GPUMemoryFraction after the dry run. The two are exclusive.
	KVBlocks int
	// GPUMemoryFraction is the share of the device's memory the runner may
	// use for weights, activations and KV cache together (0: 0.9).
	GPUMemoryFraction float64
	// MaxGraphBatch is the largest decode batch captured as a CUDA graph
	// (graphs for 1, 2, 4, …, MaxGraphBatch); 0: min(Seats, MaxBatchTokens, 256).
	// Larger decode batches and every step with a prefill run eagerly.
	MaxGraphBatch int
	// NoGraphs runs every step eagerly (for comparison and debugging). It is
	// forced on for models with more than 16 query heads per KV head, which
	// the decode-attention kernel does not serve.
	NoGraphs bool
	// NoCascade ignores Batch.Groups: no cascade decode graphs are
	// captured and every decode row attends its whole context itself. By
	// default a decode graph of batch P ≥ 2 has a cascade twin, replayed for
	// steps with groups, that attends each group's shared run once for all
	// its members (kernels.CUDAKernels.CascadeDecodeAttention); the group layout is data
	// in the step's inputs, so one twin serves every grouping of its shape.
	NoCascade bool
	// KVType is the KV cache's element type: kernels.F32 (the zero value:
	// the CPU runner's layout, for exact comparison) or kernels.BF16
	// (DefaultCUDAKVType: half the cache's memory and traffic). F16 is
	// refused: the tensor-core prefill kernel multiplies bf16 fragments
	// (mma m16n8k16 bf16), so an f16 cache would need its own kernels.
	KVType kernels.DType
	// KeepLogits copies every sampled row's logits to the host, read back
	// with Logits (costs a device-to-host copy of vocab floats per row).
	KeepLogits bool
	// CubinCacheDir is where compiled kernels are kept ("" : cuda.DefaultCacheDir).
	CubinCacheDir string
}

// DefaultCUDAKVType is the CUDA runner's KV cache type under
// --kv-cache-dtype auto: bf16, half of f32's memory and traffic. (On
// stories260K an f16 cache keeps greedy outputs closer to f32 than bf16
// does, see TestKVTypeGreedyStories, but no CUDA kernel reads f16.)
const DefaultCUDAKVType = kernels.BF16

// Defaults and limits of the CUDA runner.
const (
	defaultGPUMemoryFraction = 0.9
	defaultMaxGraphBatch     = 256
	// cudaReserve is kept free beyond what the dry run measured: graph
	// instantiation, kernels loaded lazily by later shapes, driver growth.
	cudaReserve = 256 << 20
	// cudaMaxDryRunBlocks bounds the scratch KV of the dry run (its writes
	// may overlap; only the memory it makes the libraries take matters).
	cudaMaxDryRunBlocks = 64
)

// resolve checks cfg for model m and fills the defaults.
func (cfg CUDARunnerConfig) resolve(m *Llama) (CUDARunnerConfig, error) {
	if m == nil {
		return cfg, errors.New("model: NewCUDARunner with a nil model")
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"Seats", cfg.Seats}, {"BlockSize", cfg.BlockSize}, {"MaxBatchTokens", cfg.MaxBatchTokens}} {
		if p.v <= 0 {
			return cfg, fmt.Errorf("model: CUDARunnerConfig.%s = %d, want > 0", p.name, p.v)
		}
	}
	if cfg.Device < 0 {
		return cfg, fmt.Errorf("model: CUDARunnerConfig.Device = %d, want ≥ 0", cfg.Device)
	}
	if cfg.KVBlocks < 0 {
		return cfg, fmt.Errorf("model: CUDARunnerConfig.KVBlocks = %d, want ≥ 0", cfg.KVBlocks)
	}
	if cfg.KVType != kernels.F32 && cfg.KVType != kernels.BF16 {
		return cfg, fmt.Errorf("model: CUDARunnerConfig.KVType = %v: the CUDA runner's KV cache is F32 or BF16", cfg.KVType)
	}
	if cfg.KVBlocks > 0 && cfg.GPUMemoryFraction != 0 {
		return cfg, fmt.Errorf("model: CUDARunnerConfig sets both KVBlocks (%d) and GPUMemoryFraction (%v): they are exclusive", cfg.KVBlocks, cfg.GPUMemoryFraction)
	}
	if cfg.GPUMemoryFraction == 0 {
		cfg.GPUMemoryFraction = defaultGPUMemoryFraction
	}
	if !(cfg.GPUMemoryFraction > 0 && cfg.GPUMemoryFraction <= 1) {
		return cfg, fmt.Errorf("model: CUDARunnerConfig.GPUMemoryFraction = %v, want in (0, 1]", cfg.GPUMemoryFraction)
	}
	if cfg.Seats > math.MaxInt32 || cfg.KVBlocks > math.MaxInt32 || cfg.MaxBatchTokens > math.MaxInt32 {
		return cfg, fmt.Errorf("model: CUDARunnerConfig sizes (seats %d, blocks %d, batch tokens %d) must fit int32", cfg.Seats, cfg.KVBlocks, cfg.MaxBatchTokens)
	}
	rows := min(cfg.Seats, cfg.MaxBatchTokens)
	switch {
	case cfg.MaxGraphBatch < 0:
		return cfg, fmt.Errorf("model: CUDARunnerConfig.MaxGraphBatch = %d, want ≥ 0", cfg.MaxGraphBatch)
	case cfg.MaxGraphBatch == 0:
		cfg.MaxGraphBatch = min(rows, defaultMaxGraphBatch)
	case cfg.MaxGraphBatch > rows:
		return cfg, fmt.Errorf("model: CUDARunnerConfig.MaxGraphBatch = %d exceeds min(Seats %d, MaxBatchTokens %d)", cfg.MaxGraphBatch, cfg.Seats, cfg.MaxBatchTokens)
	}
	c := m.cfg
	if c.Dim%2 != 0 {
		// Rows of 16-bit GEMM inputs are gathered as 32-bit words.
		return cfg, fmt.Errorf("model: CUDA runner needs an even embedding width, model has %d", c.Dim)
	}
	if c.HeadDim > 256 || c.HeadDim%2 != 0 {
		return cfg, fmt.Errorf("model: CUDA attention supports even head dims up to 256, model has %d", c.HeadDim)
	}
	if c.Heads%c.KVHeads != 0 {
		return cfg, fmt.Errorf("model: %d query heads are not a multiple of %d KV heads", c.Heads, c.KVHeads)
	}
	if c.Heads/c.KVHeads > 16 {
		cfg.NoGraphs = true // the decode kernel serves at most 16 query heads per KV head
	}
	return cfg, nil
}

// ErrCUDARunnerClosed is returned by Execute after Close.
var ErrCUDARunnerClosed = errors.New("model: CUDA runner closed")

// CUDARunner executes batches of the llama forward pass on one NVIDIA GPU,
// with the same Execute/Capacity contract as CPURunner. Weights are uploaded
// once from the memory-mapped GGUF; the paged KV cache is one device
// allocation sized from free memory after a worst-case dry run; decode steps
// whose every sequence has one new token replay a CUDA graph captured for
// the padded batch size (one launch per step). FutureToken is resolved on
// the device from a per-seat last-token row; greedy rows are sampled on the
// device, other rows by package sampling on the host from copied logits.
// Execute, Capacity, Logits, Check and Close must be called from one
// goroutine at a time; every CUDA call runs on the device's locked thread.
type CUDARunner struct {
	m    *Llama
	cfg  CUDARunnerConfig
	host *cudaHost
	mem  CUDAMemory

	drv  *cuda.Driver
	dev  *cuda.Device
	lt   *cuda.CublasLt
	k    *kernels.CUDAKernels
	ops  *kernels.CUDARunnerOps
	gemm *cuda.Gemm

	stream    cuda.Stream
	hasStream bool
	gemmType  cuda.DType
	wplan     cudaWeightPlan
	weights   cuda.DevicePtr
	bufs      cudaBuffers
	act       cuda.DevicePtr
	kvMem     cuda.DevicePtr
	kv        []kernels.CUDAKV // one per layer, views of kvMem
	kvBlock   uint64           // bytes of one block of one layer's K (or V)
	graphs    []cuda.GraphExec // parallel to host.graphSizes
	graphIO   []bool           // per graph: the step's copies are inside it
	splits    []int            // per graph: decode-attention splits
	// Cascade twins of the graphs (parallel to host.graphSizes; a zero
	// GraphExec where cascTiles is 0): cascTiles is each one's tile bound,
	// cascSplits its shared-run splits.
	cascGraphs []cuda.GraphExec
	cascIO     []bool
	cascTiles  []int
	cascSplits []int
	pinIn      *cuda.HostBuffer // step inputs (host.staging)
	pinPairs   *cuda.HostBuffer // host-sampled (seat, token) pairs (host.pairs)
	pinOut     *cuda.HostBuffer // sampled ids [rows] then logits [rows][vocab]
	outLogits  int              // byte offset of the logits in pinOut
	ledger     []cudaAlloc
	closed     bool
	devExec    cudaDeviceExec // reused by exec, so a step allocates nothing

	// Per-step state read by the functions passed to Device.Do (made once,
	// so a step allocates nothing).
	stepB     *step.Batch
	npairs    int
	stepFn    func(c cuda.Ctx) error
	scatterFn func(c cuda.Ctx) error
	rowFn     func(j int) []float32
	devTok    []int32
	hostLog   []float32
}

// cudaAlloc is one device allocation the runner owns.
type cudaAlloc struct {
	name string
	p    cuda.DevicePtr
	n    uint64
}

// NewCUDARunner loads the CUDA driver, NVRTC and cuBLASLt, compiles (or reads
// from the cubin cache) the kernels, uploads m's weights and sizes the KV
// cache. Without a usable driver or device it returns an error that says so
// (wrapping cuda.ErrLibraryNotFound when libcuda is absent). The model must
// outlive the runner.
func NewCUDARunner(m *Llama, cfg CUDARunnerConfig) (*CUDARunner, error) {
	cfg, err := cfg.resolve(m)
	if err != nil {
		return nil, err
	}
	if err := cudaCheckTypes(m); err != nil {
		return nil, err
	}
	r := &CUDARunner{m: m, cfg: cfg}
	if r.drv, err = cuda.LoadDriver(); err != nil {
		return nil, fmt.Errorf("model: CUDA runner needs the CUDA driver: %w", err)
	}
	n, err := r.drv.DeviceCount()
	if err != nil || cfg.Device >= n {
		r.drv.Close()
		if err == nil {
			err = fmt.Errorf("device %d requested, %d present", cfg.Device, n)
		}
		return nil, fmt.Errorf("model: CUDA runner: no usable device: %w", err)
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		r.drv.Close()
		return nil, fmt.Errorf("model: CUDA runner needs NVRTC to compile its kernels: %w", err)
	}
	defer nv.Close()
	if r.lt, err = cuda.LoadCublasLt(); err != nil {
		r.drv.Close()
		return nil, fmt.Errorf("model: CUDA runner needs cuBLASLt: %w", err)
	}
	if r.dev, err = r.drv.Open(cfg.Device); err != nil {
		r.lt.Close()
		r.drv.Close()
		return nil, fmt.Errorf("model: CUDA runner: open device %d: %w", cfg.Device, err)
	}
	fail := func(err error) (*CUDARunner, error) {
		_ = r.release()
		return nil, err
	}
	cc, err := cuda.NewCubinCache(nv, cfg.CubinCacheDir)
	if err != nil {
		return fail(fmt.Errorf("model: CUDA runner: %w", err))
	}
	arch := r.dev.Props().Arch()
	mods, err := kernels.CompileCUDA(cc, arch)
	if err != nil {
		return fail(fmt.Errorf("model: CUDA runner: %w", err))
	}
	opsMod, err := kernels.CompileCUDARunnerOps(cc, arch)
	if err != nil {
		return fail(fmt.Errorf("model: CUDA runner: %w", err))
	}
	if err := r.dev.Do(func(c cuda.Ctx) error { return r.setup(c, mods, opsMod) }); err != nil {
		return fail(fmt.Errorf("model: CUDA runner on %s: %w", r.dev.Props().Name, err))
	}
	r.stepFn, r.scatterFn = r.step, r.scatter
	vocab := m.cfg.Vocab
	r.rowFn = func(j int) []float32 { return r.hostLog[j*vocab : (j+1)*vocab] }
	return r, nil
}

// alloc allocates n device bytes and records them in the ledger.
func (r *CUDARunner) alloc(c cuda.Ctx, name string, n uint64) (cuda.DevicePtr, error) {
	p, err := c.Alloc(max(n, 4))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	r.ledger = append(r.ledger, cudaAlloc{name: name, p: p, n: max(n, 4)})
	return p, nil
}

// free releases a ledger allocation early (the dry run's scratch).
func (r *CUDARunner) free(c cuda.Ctx, p cuda.DevicePtr) error {
	for i, a := range r.ledger {
		if a.p == p {
			r.ledger = append(r.ledger[:i], r.ledger[i+1:]...)
			return c.Free(p)
		}
	}
	return fmt.Errorf("free of %#x: not allocated by the runner", uint64(p))
}

// setup runs on the device thread: kernels, weights, activations, the dry
// run, the KV cache and the decode graphs, in that order.
func (r *CUDARunner) setup(c cuda.Ctx, mods []kernels.CUDAModule, opsMod kernels.CUDAModule) error {
	mc := r.m.cfg
	cfg := r.cfg
	props := c.Props()
	free0, total, err := c.MemInfo()
	if err != nil {
		return err
	}
	if r.k, err = kernels.LoadCUDAKernels(c, mods); err != nil {
		return err
	}
	if r.ops, err = kernels.LoadCUDARunnerOps(c, opsMod); err != nil {
		return err
	}
	if r.stream, err = c.NewStream(); err != nil {
		return err
	}
	r.hasStream = true
	ws := uint64(4 << 20)
	if props.Major >= 9 {
		ws = 32 << 20
	}
	if r.gemm, err = c.NewGemm(r.lt, ws); err != nil {
		return err
	}

	pl, err := r.plan(props.SMs)
	if err != nil {
		return err
	}
	capacity, rows, graphMB, sizes, dry, dryQ, stagingElems := pl.capacity, pl.rows, pl.graphMB, pl.sizes, pl.dry, pl.dryQ, pl.stagingElems
	if r.weights, err = r.alloc(c, "weights", r.wplan.total); err != nil {
		return err
	}
	if err := r.upload(c); err != nil {
		return err
	}
	if r.act, err = r.alloc(c, "activations", r.bufs.total); err != nil {
		return err
	}
	if r.pinIn, err = c.HostAlloc(4 * stagingElems); err != nil {
		return err
	}
	if r.pinPairs, err = c.HostAlloc(8 * rows); err != nil {
		return err
	}
	r.outLogits = int(cudaAlignUp(4*uint64(rows), 64))
	if r.pinOut, err = c.HostAlloc(r.outLogits + 4*rows*mc.Vocab); err != nil {
		return err
	}
	r.devTok = cudaBytesI32(r.pinOut.Bytes[:4*rows])
	r.hostLog = cudaBytesF32(r.pinOut.Bytes[r.outLogits:])
	if r.host, err = newCUDAHost(capacity, sizes, graphMB, cfg.KeepLogits, cudaBytesI32(r.pinIn.Bytes), cudaBytesI32(r.pinPairs.Bytes)); err != nil {
		return err
	}
	if err := c.MemsetD32Async(r.buf(r.bufs.last), 0, uint64(cfg.Seats), r.stream); err != nil {
		return err
	}

	// Dry run: the largest eager step on a scratch KV cache, to make the
	// libraries take whatever memory they take lazily before the KV cache
	// is sized.
	dryBlocks := min(cudaMaxDryRunBlocks, (cfg.MaxBatchTokens+cfg.BlockSize-1)/cfg.BlockSize)
	if err := c.Synchronize(); err != nil {
		return err
	}
	scratch, err := r.allocKV(c, "dry-run KV", dryBlocks)
	if err != nil {
		return err
	}
	cudaFillDryRun(r.host.staging, capacity, rows, dryBlocks)
	if err := c.CopyHtoDAsync(r.buf(r.bufs.arena), r.pinIn, 0, 4*dry.total, r.stream); err != nil {
		return err
	}
	if err := r.forward(r.exec(c), &dry, 0, dryQ); err != nil {
		return fmt.Errorf("dry run: %w", err)
	}
	if err := c.Sync(r.stream); err != nil {
		return fmt.Errorf("dry run: %w", err)
	}
	freeB, _, err := c.MemInfo()
	if err != nil {
		return err
	}
	if err := r.free(c, scratch); err != nil {
		return err
	}
	r.kv = nil
	// Everything the runner took so far, less the scratch cache, is what
	// the KV cache must leave room for (besides the weights).
	scratchBytes := 2 * uint64(mc.Layers) * uint64(dryBlocks) * r.kvBlock
	used := uint64(0)
	if free0 > freeB+scratchBytes {
		used = free0 - freeB - scratchBytes
	}
	peak := used - min(used, r.wplan.total)
	plan := kernels.KVMemoryPlan{Total: total, Free: free0, Fraction: cfg.GPUMemoryFraction, Weights: r.wplan.total,
		PeakActivated: peak + cudaReserve, Layers: mc.Layers, KVHeads: mc.KVHeads, BlockSize: cfg.BlockSize,
		HeadDim: mc.HeadDim, BF16: cfg.KVType == kernels.BF16}
	blocks, err := cudaPlanKVBlocks(cfg.KVBlocks, plan)
	if err != nil {
		return err
	}
	if r.kvMem, err = r.allocKV(c, "KV cache", blocks); err != nil {
		return fmt.Errorf("%d KV blocks of %d bytes: %w", blocks, plan.BlockBytes(), err)
	}
	if err := r.host.setKVBlocks(blocks); err != nil {
		return err
	}
	if len(pl.cascTiles) > 0 {
		if err := r.host.setCascade(pl.perTile, pl.cascTiles, r.m.attnWindow()); err != nil {
			return err
		}
	}

	// Decode graphs, each warmed up eagerly once (first launches load
	// kernels, which capture must not do) and then captured with the input
	// upload and the sampled ids' download inside, so a greedy decode step
	// is one graph launch and one synchronisation. Should the driver refuse
	// to capture the copies, the graph is captured without them.
	r.graphs = make([]cuda.GraphExec, 0, len(sizes))
	r.graphIO = make([]bool, 0, len(sizes))
	r.cascGraphs = make([]cuda.GraphExec, len(sizes))
	r.cascIO = make([]bool, len(sizes))
	for i, p := range sizes {
		e, io, err := r.captureDecode(c, p, i+1, graphMB, 0)
		if err != nil {
			return err
		}
		r.graphs = append(r.graphs, e)
		r.graphIO = append(r.graphIO, io)
		if mt := r.cascTiles[i]; mt > 0 {
			if r.cascGraphs[i], r.cascIO[i], err = r.captureDecode(c, p, i+1, graphMB, mt); err != nil {
				return fmt.Errorf("cascade: %w", err)
			}
		}
	}
	if err := c.Sync(r.stream); err != nil {
		return err
	}

	kvType := "bf16"
	if cfg.KVType == kernels.F32 {
		kvType = "f32"
	}
	r.mem = CUDAMemory{Device: props.Name, Total: total, Free: free0, Fraction: cfg.GPUMemoryFraction,
		Weights: r.wplan.total, Activations: peak, Reserved: cudaReserve,
		KVBlocks: blocks, BlockSize: cfg.BlockSize, KVBytes: 2 * uint64(mc.Layers) * uint64(blocks) * r.kvBlock,
		KVType: kvType, GemmType: r.gemmType.String(), GraphBatches: sizes}
	r.mem.GraphCopies = len(r.graphIO) > 0 && !slices.Contains(r.graphIO, false)
	for i, p := range sizes {
		if r.cascTiles[i] > 0 {
			r.mem.CascadeBatches = append(r.mem.CascadeBatches, p)
			r.mem.GraphCopies = r.mem.GraphCopies && r.cascIO[i]
		}
	}
	return nil
}

// cudaPlan is what the runner works out before touching the device.
type cudaPlan struct {
	capacity      step.Capacity // KVBlocks not yet known
	rows, graphMB int           // logits rows; block-table columns of the decode graphs
	sizes         []int         // decode graph batch sizes
	// cascTiles (parallel to sizes; nil without cascade) is each cascade
	// graph's tile bound, 0 for a size with none; perTile the members per tile.
	cascTiles    []int
	perTile      int
	dry          cudaStepLayout
	dryQ         int
	stagingElems int
}

// plan sets the weight plan, the GEMM type, the decode split plans and the
// buffer plan of r for a device with sms multiprocessors.
func (r *CUDARunner) plan(sms int) (cudaPlan, error) {
	mc, cfg := r.m.cfg, r.cfg
	var p cudaPlan
	var err error
	if r.wplan, err = cudaPlanWeights(r.m); err != nil {
		return p, err
	}
	r.gemmType = cudaGemmType(r.wplan.gemm)
	p.capacity = step.Capacity{Seats: cfg.Seats, BlockSize: cfg.BlockSize, MaxContext: r.m.maxContext,
		MaxBatchTokens: cfg.MaxBatchTokens, Vocab: mc.Vocab}
	p.rows = min(cfg.Seats, cfg.MaxBatchTokens)
	p.graphMB = cudaTableColumns(p.capacity)
	if !cfg.NoGraphs {
		if p.sizes, err = kernels.GraphBatchSizes(cfg.MaxGraphBatch); err != nil {
			return p, err
		}
	}
	var oPart, mlPart uint64
	r.splits = make([]int, len(p.sizes))
	r.cascTiles, r.cascSplits = make([]int, len(p.sizes)), make([]int, len(p.sizes))
	p.perTile = kernels.CascadeTileMembers(mc.Heads, mc.KVHeads)
	cascade := !cfg.NoCascade && p.perTile > 0
	for i, b := range p.sizes {
		// The split count follows the batch and the SMs; each split's
		// blocks follow its row's context on the device.
		ns := cudaPlanDecodeSplits(b, mc.KVHeads, sms)
		r.splits[i] = ns
		d := kernels.DecodeShape{Batch: b, Heads: mc.Heads, Splits: ns}
		if cascade {
			// A group has two members at least: no twin for batch 1.
			r.cascTiles[i] = kernels.CascadeMaxTiles(b, p.perTile)
			if r.cascTiles[i] > 0 {
				r.cascSplits[i] = cudaPlanCascadeSplits(b, mc.KVHeads, p.perTile, sms)
				d.CascadeSplits = r.cascSplits[i]
			}
		}
		o, ml := kernels.DecodeScratchBytes(d, mc.HeadDim)
		oPart, mlPart = max(oPart, o), max(mlPart, ml)
	}
	if cascade {
		p.cascTiles = r.cascTiles
	}
	p.dry, p.dryQ = cudaDryRun(p.capacity, p.rows)
	p.stagingElems = max(cudaStagingElems(p.capacity, p.rows, p.graphMB), p.dry.total)
	r.bufs = cudaPlanBuffers(mc, cfg.MaxBatchTokens, p.rows, cfg.Seats, r.wplan.gemm, oPart, mlPart, p.stagingElems)
	kvElem := uint64(2)
	if cfg.KVType == kernels.F32 {
		kvElem = 4
	}
	r.kvBlock = uint64(mc.KVHeads) * uint64(cfg.BlockSize) * uint64(mc.HeadDim) * kvElem
	return p, nil
}

// allocKV allocates a KV cache of blocks blocks and points r.kv at it.
func (r *CUDARunner) allocKV(c cuda.Ctx, name string, blocks int) (cuda.DevicePtr, error) {
	mc := r.m.cfg
	layer := uint64(blocks) * r.kvBlock
	p, err := r.alloc(c, name, 2*uint64(mc.Layers)*layer)
	if err != nil {
		return 0, err
	}
	r.setKV(p, blocks)
	return p, nil
}

// setKV points r.kv at a KV cache of blocks blocks at p: layer i's K then V.
func (r *CUDARunner) setKV(p cuda.DevicePtr, blocks int) {
	mc := r.m.cfg
	layer := uint64(blocks) * r.kvBlock
	r.kv = make([]kernels.CUDAKV, mc.Layers)
	for i := range r.kv {
		base := p.Add(2 * uint64(i) * layer)
		r.kv[i] = kernels.CUDAKV{K: base, V: base.Add(layer), BF16: r.cfg.KVType == kernels.BF16,
			NumBlocks: blocks, KVHeads: mc.KVHeads, BlockSize: r.cfg.BlockSize, HeadDim: mc.HeadDim}
	}
}

// captureDecode warms up and captures the decode graph of batch p (graph
// is 1 + its size index) with tables of mb columns, with the cascade
// sections for maxTiles tiles when maxTiles > 0. The warm-up runs eagerly
// once (first launches load kernels, which capture must not do); the graph
// holds the input upload and the sampled ids' download (io) unless the
// driver refuses to capture the copies.
func (r *CUDARunner) captureDecode(c cuda.Ctx, p, graph, mb, maxTiles int) (cuda.GraphExec, bool, error) {
	l := cudaFillPadding(r.host.staging, p, mb, maxTiles)
	if err := r.decodeStep(c, &l, graph, true); err != nil {
		return cuda.GraphExec{}, false, fmt.Errorf("decode batch %d warm-up: %w", p, err)
	}
	if err := c.Sync(r.stream); err != nil {
		return cuda.GraphExec{}, false, fmt.Errorf("decode batch %d warm-up: %w", p, err)
	}
	e, ioErr := r.capture(c, &l, graph, true)
	if ioErr == nil {
		return e, true, nil
	}
	e, err := r.capture(c, &l, graph, false)
	if err != nil {
		return cuda.GraphExec{}, false, fmt.Errorf("decode batch %d: %w (with copies: %v)", p, err, ioErr)
	}
	return e, false, nil
}

// decodeStep launches one step at layout l: with io, the upload of the
// inputs from the pinned staging area first and the download of the l.R
// sampled ids last.
func (r *CUDARunner) decodeStep(c cuda.Ctx, l *cudaStepLayout, graph int, io bool) error {
	if io {
		if err := c.CopyHtoDAsync(r.buf(r.bufs.arena), r.pinIn, 0, 4*l.total, r.stream); err != nil {
			return err
		}
	}
	if err := r.forward(r.exec(c), l, graph, 1); err != nil {
		return err
	}
	if io && l.R > 0 {
		return c.CopyDtoHAsync(r.pinOut, 0, 4*l.R, r.buf(r.bufs.sampled), r.stream)
	}
	return nil
}

// capture records decodeStep into a graph and instantiates it.
func (r *CUDARunner) capture(c cuda.Ctx, l *cudaStepLayout, graph int, io bool) (cuda.GraphExec, error) {
	if err := c.BeginCapture(r.stream); err != nil {
		return cuda.GraphExec{}, fmt.Errorf("capture: %w", err)
	}
	serr := r.decodeStep(c, l, graph, io)
	g, err := c.EndCapture(r.stream)
	if serr != nil || err != nil {
		if err == nil {
			_ = c.DestroyGraph(g)
		}
		return cuda.GraphExec{}, fmt.Errorf("capture: %w", errors.Join(serr, err))
	}
	e, err := c.Instantiate(g)
	if derr := c.DestroyGraph(g); err == nil && derr != nil {
		_ = c.DestroyGraphExec(e)
		err = derr
	}
	if err != nil {
		return cuda.GraphExec{}, fmt.Errorf("instantiate: %w", err)
	}
	return e, nil
}

// exec is the device launcher for this Device.Do call.
func (r *CUDARunner) exec(c cuda.Ctx) cudaExec {
	r.devExec = cudaDeviceExec{c: c, s: r.stream, k: r.k, o: r.ops, gemm: r.gemm}
	return &r.devExec
}

// buf is the device address of an activation at offset off.
func (r *CUDARunner) buf(off uint64) cuda.DevicePtr { return r.act.Add(off) }

// hostCopier is what uploadFromHost needs of a context; cuda.Ctx satisfies
// it.
type hostCopier interface {
	CopyHtoD(dst cuda.DevicePtr, src []byte) error
	Synchronize() error
}

// uploadFromHost copies src, pageable host memory (the memory-mapped model,
// a Go slice), to dst and returns once the bytes are on the device. It is
// the one way weights reach the GPU: cuMemcpyHtoD from pageable memory may
// return before its DMA completes, and the runner's stream
// (CU_STREAM_NON_BLOCKING) is not ordered after the legacy stream the copy
// ran on, so a kernel reading dst there could see it half written; a
// context-wide synchronise closes that gap. (Per-step copies use pinned
// buffers and the runner's own stream instead.)
func uploadFromHost(c hostCopier, dst cuda.DevicePtr, src []byte) error {
	if err := c.CopyHtoD(dst, src); err != nil {
		return err
	}
	if err := c.Synchronize(); err != nil {
		return fmt.Errorf("after the copy of %d bytes: %w", len(src), err)
	}
	return nil
}

// upload copies every weight into the weight allocation, converting to the
// GEMM type where the plan says so.
func (r *CUDARunner) upload(c cuda.Ctx) error {
	var stage cuda.DevicePtr
	if n := r.wplan.stagingBytes(); n > 0 {
		var err error
		if stage, err = r.alloc(c, "upload staging", n); err != nil {
			return err
		}
		defer func() { _ = r.free(c, stage) }()
	}
	var f32 []float32
	var u16 []uint16
	var err error
	r.wplan.each(func(w *cudaWeight) {
		if err != nil {
			return
		}
		dst := r.weights.Add(w.off)
		m := w.src
		switch w.how {
		case cudaUploadCopy:
			err = uploadFromHost(c, dst, m.Data)
		case cudaUploadDequant, cudaUploadCastF32:
			if err = uploadFromHost(c, stage, m.Data); err != nil {
				return
			}
			if w.how == cudaUploadDequant {
				err = r.k.DequantToBF16(c, r.stream, dst, stage, m.Type, m.Rows, m.Cols)
			} else {
				err = r.k.CastF32(c, r.stream, dst, stage, m.Rows*m.Cols, cudaGemmType(w.dt))
			}
			if err == nil {
				err = c.Sync(r.stream) // the staging buffer is reused by the next matrix
			}
		case cudaUploadHost:
			// Through float32 in chunks of about 1M elements.
			chunk := max(1, (1<<20)/m.Cols)
			if len(f32) < chunk*m.Cols {
				f32, u16 = make([]float32, chunk*m.Cols), make([]uint16, chunk*m.Cols)
			}
			for r0 := 0; r0 < m.Rows && err == nil; r0 += chunk {
				r1 := min(m.Rows, r0+chunk)
				n := (r1 - r0) * m.Cols
				if err = cudaConvertRows(u16[:n], m, r0, r1, w.dt, f32[:n]); err != nil {
					return
				}
				err = uploadFromHost(c, dst.Add(uint64(r0)*uint64(m.Cols)*2), cudaU16Bytes(u16[:n]))
			}
		}
		if err != nil {
			err = fmt.Errorf("upload %v %d×%d matrix as %v: %w", m.Type, m.Rows, m.Cols, w.dt, err)
		}
	})
	if err != nil {
		return err
	}
	for _, v := range r.wplan.vectors() {
		if err := uploadFromHost(c, r.weights.Add(v.off), v.data); err != nil {
			return fmt.Errorf("upload norm, bias and RoPE vectors: %w", err)
		}
	}
	return nil
}

// forward launches the forward pass of one step whose inputs are in the
// arena at layout l: every layer over l.T tokens, then logits and argmax of
// l.R rows. graph is 1 + the index of the decode graph size whose attention
// plan to use (decode attention, rows are sequences), or 0 for an eager step
// (prefill attention of l.N sequences of at most maxQ new tokens, then the
// sampled rows gathered).
func (r *CUDARunner) forward(e cudaExec, l *cudaStepLayout, graph, maxQ int) error {
	mc := &r.m.cfg
	G, gt := r.gemmType, r.wplan.gemm
	T := l.T
	arena := r.buf(r.bufs.arena)
	tok, pos, slot, seat := l.ptr(arena, l.tok), l.ptr(arena, l.pos), l.ptr(arena, l.slot), l.ptr(arena, l.seat)
	ctxLen, tables := l.ptr(arena, l.ctxLen), l.ptr(arena, l.tables)
	b := &r.bufs
	x, d, xn := r.buf(b.x), r.buf(b.d), r.buf(b.xn)
	q, kb, vb, att, attG := r.buf(b.q), r.buf(b.k), r.buf(b.v), r.buf(b.att), r.buf(b.attG)
	gate, up, h := r.buf(b.gate), r.buf(b.up), r.buf(b.h)
	W := func(w *cudaWeight) cuda.DevicePtr { return r.weights.Add(w.off) }
	N := func(n *cudaNorm) cuda.DevicePtr { return r.weights.Add(n.off) }
	dim, qd, kvd, ffn := mc.Dim, mc.Heads*mc.HeadDim, mc.KVHeads*mc.HeadDim, mc.FFN
	scale := float32(1 / math.Sqrt(float64(mc.HeadDim)))
	window := int(r.m.attnWindow()) // sliding window (0: none), as the CPU runner masks it
	wrap := func(li int, what string, err error) error {
		if err != nil {
			return fmt.Errorf("layer %d %s: %w", li, what, err)
		}
		return nil
	}

	if err := e.Resolve(tok, seat, r.buf(b.last), T); err != nil {
		return err
	}
	if err := e.Embedding(x, W(&r.wplan.embd), r.wplan.embd.dt, tok, T, mc.Vocab, dim); err != nil {
		return err
	}
	var resid cuda.DevicePtr // the previous sublayer's output, added by the next norm
	for li := range r.wplan.layers {
		lw := &r.wplan.layers[li]
		kv := r.kv[li]
		if err := wrap(li, "attn norm", e.AddRMSNorm(xn, x, resid, N(&lw.attnNorm), T, dim, mc.NormEps, G)); err != nil {
			return err
		}
		resid = d
		for _, mm := range []struct {
			w   *cudaWeight
			y   cuda.DevicePtr
			n   int
			tag string
		}{{&lw.q, q, qd, "q"}, {&lw.k, kb, kvd, "k"}, {&lw.v, vb, kvd, "v"}} {
			if err := wrap(li, mm.tag, e.Matmul(G, T, mm.n, dim, xn, W(mm.w), mm.y)); err != nil {
				return err
			}
		}
		if mc.QKVBias {
			for _, b := range []struct {
				x cuda.DevicePtr
				b *cudaNorm
				n int
			}{{q, &lw.qBias, qd}, {kb, &lw.kBias, kvd}, {vb, &lw.vBias, kvd}} {
				if err := wrap(li, "qkv bias", e.AddBias(b.x, N(b.b), T, b.n)); err != nil {
					return err
				}
			}
		}
		if mc.QKNorm {
			// Per-head RMSNorm in place: each head of each row is a row of HeadDim.
			if err := wrap(li, "q norm", e.AddRMSNorm(q, q, 0, N(&lw.qNorm), T*mc.Heads, mc.HeadDim, mc.NormEps, cuda.F32)); err != nil {
				return err
			}
			if err := wrap(li, "k norm", e.AddRMSNorm(kb, kb, 0, N(&lw.kNorm), T*mc.KVHeads, mc.HeadDim, mc.NormEps, cuda.F32)); err != nil {
				return err
			}
		}
		freqs := r.weights.Add(r.wplan.ropeOff)
		if err := wrap(li, "rope q", e.RoPEFreqs(q, pos, freqs, T, mc.Heads, mc.HeadDim, mc.RopeNeox)); err != nil {
			return err
		}
		if err := wrap(li, "rope k", e.RoPEFreqs(kb, pos, freqs, T, mc.KVHeads, mc.HeadDim, mc.RopeNeox)); err != nil {
			return err
		}
		if err := wrap(li, "kv write", e.KVWrite(kv, kb, vb, slot, T)); err != nil {
			return err
		}
		var err error
		switch {
		case graph > 0 && l.MT > 0:
			d := kernels.DecodeShape{Batch: l.N, Heads: mc.Heads, MaxBlocks: l.MB, Splits: r.splits[graph-1],
				CascadeSplits: r.cascSplits[graph-1], CascadeTiles: l.MT, Window: window}
			err = e.CascadeDecodeAttention(att, q, kv, tables, ctxLen, l.cascade(arena), d, scale, r.buf(b.oPart), r.buf(b.mlPart))
		case graph > 0:
			ns := r.splits[graph-1]
			err = e.DecodeAttention(att, q, kv, tables, ctxLen,
				kernels.DecodeShape{Batch: l.N, Heads: mc.Heads, MaxBlocks: l.MB, Splits: ns, Window: window},
				scale, r.buf(b.oPart), r.buf(b.mlPart))
		default:
			err = e.PrefillAttention(att, q, kv, l.ptr(arena, l.qStart), l.ptr(arena, l.numQ), ctxLen, tables,
				kernels.PrefillShape{Seqs: l.N, Heads: mc.Heads, MaxQ: maxQ, MaxBlocks: l.MB, Window: window}, scale)
		}
		if err := wrap(li, "attention", err); err != nil {
			return err
		}
		if gt != kernels.F32 {
			if err := wrap(li, "attn cast", e.CastF32(attG, att, T*qd, G)); err != nil {
				return err
			}
		}
		if err := wrap(li, "attn output", e.Matmul(G, T, dim, qd, attG, W(&lw.o), d)); err != nil {
			return err
		}
		if err := wrap(li, "ffn norm", e.AddRMSNorm(xn, x, d, N(&lw.ffnNorm), T, dim, mc.NormEps, G)); err != nil {
			return err
		}
		if err := wrap(li, "gate", e.Matmul(G, T, ffn, dim, xn, W(&lw.gate), gate)); err != nil {
			return err
		}
		if err := wrap(li, "up", e.Matmul(G, T, ffn, dim, xn, W(&lw.up), up)); err != nil {
			return err
		}
		if err := wrap(li, "silu", e.SiLUMul(h, gate, up, T*ffn, G)); err != nil {
			return err
		}
		if err := wrap(li, "down", e.Matmul(G, T, dim, ffn, h, W(&lw.down), d)); err != nil {
			return err
		}
	}
	if l.R == 0 {
		return nil
	}
	if err := e.AddRMSNorm(xn, x, resid, N(&r.wplan.outNorm), T, dim, mc.NormEps, G); err != nil {
		return fmt.Errorf("output norm: %w", err)
	}
	rowsIn := xn
	if graph == 0 {
		rowsIn = r.buf(b.xs)
		if err := e.Gather(rowsIn, xn, l.ptr(arena, l.gather), l.R, dim*int(cudaElemBytes(gt))); err != nil {
			return fmt.Errorf("gather sampled rows: %w", err)
		}
	}
	logits := r.buf(b.logits)
	if err := e.Matmul(G, l.R, mc.Vocab, dim, rowsIn, W(&r.wplan.output), logits); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	if err := e.ArgmaxLast(r.buf(b.sampled), r.buf(b.last), l.ptr(arena, l.lastSeat), logits, l.R, mc.Vocab); err != nil {
		return fmt.Errorf("argmax: %w", err)
	}
	return nil
}

// Capacity reports what the runner holds.
func (r *CUDARunner) Capacity() step.Capacity { return r.host.capacity }

// Model returns the model the runner executes.
func (r *CUDARunner) Model() *Llama { return r.m }

// Memory is the runner's memory plan (for the start-up report).
func (r *CUDARunner) Memory() CUDAMemory { return r.mem }

// Logits returns the logits row of Batch.Seqs[i] in the latest Execute when
// the runner keeps logits and that sequence was sampled; nil otherwise. The
// slice is owned by the runner and overwritten by the next Execute.
func (r *CUDARunner) Logits(i int) []float32 { return r.host.logits(i) }

// Execute runs one step: sampler resets for starting
// sequences, the forward pass over every new token (a captured graph for
// decode batches) and one token per sequence with Sample set. out is resized
// to len(b.Seqs). A bad batch returns an error naming the value and changes
// nothing.
func (r *CUDARunner) Execute(b *step.Batch, out *step.Output) error {
	if r.closed {
		return ErrCUDARunnerClosed
	}
	if err := r.host.prepare(b); err != nil {
		return err
	}
	r.stepB = b
	err := r.dev.Do(r.stepFn)
	r.stepB = nil
	if err != nil {
		return fmt.Errorf("model: CUDA step: %w", err)
	}
	n, err := r.host.finish(b, out, r.devTok, r.rowFn)
	if err != nil {
		return err
	}
	if n > 0 {
		r.npairs = n
		if err := r.dev.Do(r.scatterFn); err != nil {
			return fmt.Errorf("model: CUDA sampled tokens: %w", err)
		}
	}
	return nil
}

// step runs on the device thread: the input upload, the
// forward pass, and the copies of sampled ids and host-needed logits back.
func (r *CUDARunner) step(c cuda.Ctx) error {
	h, s := r.host, r.stream
	l := &h.layout
	io := false // whether the inputs and sampled ids travel inside the graph
	if h.graph > 0 {
		i := cudaGraphIndex(h.graphSizes, h.graph)
		g := r.graphs[i]
		io = r.graphIO[i]
		if l.MT > 0 {
			g, io = r.cascGraphs[i], r.cascIO[i]
		}
		if !io {
			if err := c.CopyHtoDAsync(r.buf(r.bufs.arena), r.pinIn, 0, 4*l.total, s); err != nil {
				return err
			}
		}
		if err := c.LaunchGraph(g, s); err != nil {
			return fmt.Errorf("decode graph %d: %w", h.graph, err)
		}
	} else {
		if err := c.CopyHtoDAsync(r.buf(r.bufs.arena), r.pinIn, 0, 4*l.total, s); err != nil {
			return err
		}
		if err := r.forward(r.exec(c), l, 0, h.maxQ); err != nil {
			return err
		}
	}
	if l.R > 0 {
		if !io {
			if err := c.CopyDtoHAsync(r.pinOut, 0, 4*l.R, r.buf(r.bufs.sampled), s); err != nil {
				return err
			}
		}
		row := 4 * r.m.cfg.Vocab
		for _, j := range h.hostRows {
			off := uint64(j) * uint64(row)
			if err := c.CopyDtoHAsync(r.pinOut, r.outLogits+int(off), row, r.buf(r.bufs.logits).Add(off), s); err != nil {
				return err
			}
		}
	}
	return c.Sync(s)
}

// scatter uploads the host-sampled (seat, token) pairs into the device's
// last-token row. It does not wait: the next step is ordered after it on
// the same stream, and the pinned pairs are only rewritten after that
// step's synchronisation.
func (r *CUDARunner) scatter(c cuda.Ctx) error {
	p := r.buf(r.bufs.pairs)
	if err := c.CopyHtoDAsync(p, r.pinPairs, 0, 8*r.npairs, r.stream); err != nil {
		return err
	}
	return r.ops.ScatterLast(c, r.stream, r.buf(r.bufs.last), p, r.npairs)
}

// cudaGraphIndex is the index of size in sizes (present by construction).
func cudaGraphIndex(sizes []int, size int) int {
	for i, s := range sizes {
		if s == size {
			return i
		}
	}
	return -1
}

// Check verifies the per-seat bookkeeping, the sampler's, and the device
// accounting: the ledger holds exactly the weights, activations and KV
// cache the plan says, and one graph per captured size.
func (r *CUDARunner) Check() error {
	if err := r.host.checkSeats(); err != nil {
		return err
	}
	if r.closed {
		if len(r.ledger) != 0 {
			return fmt.Errorf("model: closed CUDA runner still holds %d allocations", len(r.ledger))
		}
		return nil
	}
	want := map[string]uint64{"weights": max(r.wplan.total, 4), "activations": max(r.bufs.total, 4), "KV cache": max(r.mem.KVBytes, 4)}
	if len(r.ledger) != len(want) {
		return fmt.Errorf("model: CUDA runner holds %d allocations, want %d (weights, activations, KV cache)", len(r.ledger), len(want))
	}
	for _, a := range r.ledger {
		if w, ok := want[a.name]; !ok || w != a.n || a.p == 0 {
			return fmt.Errorf("model: CUDA allocation %q of %d bytes at %#x, plan says %d", a.name, a.n, uint64(a.p), w)
		}
	}
	if uint64(r.host.capacity.KVBlocks)*2*uint64(r.m.cfg.Layers)*r.kvBlock != r.mem.KVBytes {
		return fmt.Errorf("model: %d KV blocks of %d bytes per layer half do not make the %d-byte cache", r.host.capacity.KVBlocks, r.kvBlock, r.mem.KVBytes)
	}
	if len(r.graphs) != len(r.host.graphSizes) {
		return fmt.Errorf("model: %d decode graphs for %d sizes", len(r.graphs), len(r.host.graphSizes))
	}
	if len(r.cascGraphs) != len(r.host.graphSizes) || len(r.cascTiles) != len(r.host.graphSizes) {
		return fmt.Errorf("model: %d cascade decode graphs (%d tile bounds) for %d sizes", len(r.cascGraphs), len(r.cascTiles), len(r.host.graphSizes))
	}
	return nil
}

// Close releases every device and host resource and the libraries. Execute
// fails afterwards; Close is idempotent.
func (r *CUDARunner) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.release()
}

// release frees what setup made (whatever part of it ran), closes the
// device and unloads the libraries.
func (r *CUDARunner) release() error {
	var errs []error
	if r.dev != nil {
		errs = append(errs, r.dev.Do(func(c cuda.Ctx) error {
			var errs []error
			if r.hasStream {
				errs = append(errs, c.Sync(r.stream))
			}
			for _, g := range r.graphs {
				errs = append(errs, c.DestroyGraphExec(g))
			}
			for i, g := range r.cascGraphs {
				if i < len(r.cascTiles) && r.cascTiles[i] > 0 && g != (cuda.GraphExec{}) {
					errs = append(errs, c.DestroyGraphExec(g))
				}
			}
			r.graphs, r.graphIO, r.cascGraphs, r.cascIO = nil, nil, nil, nil
			if r.gemm != nil {
				errs = append(errs, c.DestroyGemm(r.gemm))
				r.gemm = nil
			}
			for _, a := range r.ledger {
				errs = append(errs, c.Free(a.p))
			}
			r.ledger = nil
			for _, hb := range []**cuda.HostBuffer{&r.pinIn, &r.pinPairs, &r.pinOut} {
				if *hb != nil {
					errs = append(errs, c.FreeHost(*hb))
					*hb = nil
				}
			}
			if r.hasStream {
				errs = append(errs, c.DestroyStream(r.stream))
				r.hasStream = false
			}
			if r.ops != nil {
				errs = append(errs, r.ops.Unload(c))
			}
			if r.k != nil {
				errs = append(errs, r.k.Unload(c))
			}
			return errors.Join(errs...)
		}))
		errs = append(errs, r.dev.Close())
		r.dev = nil
	}
	if r.lt != nil {
		r.lt.Close()
		r.lt = nil
	}
	if r.drv != nil {
		r.drv.Close()
		r.drv = nil
	}
	r.kv = nil
	r.devTok, r.hostLog = nil, nil
	if r.host != nil {
		r.host.staging, r.host.pairs = nil, nil
	}
	return errors.Join(errs...)
}
