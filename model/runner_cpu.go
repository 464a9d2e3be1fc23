package model

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/turnstile-llm/turnstile/internal/hugemem"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/step"
)

// CPURunnerConfig sizes a CPURunner. Every buffer is allocated from it at
// construction, so Execute does not allocate.
type CPURunnerConfig struct {
	// Seats is the number of seats (sampler state, last-token row).
	Seats int
	// KVBlocks and BlockSize shape the paged KV cache: block ids are in
	// [0, KVBlocks), each holding BlockSize positions of every layer.
	KVBlocks  int
	BlockSize int
	// KVType is the cache's element type: kernels.F32 (the zero value,
	// exact), kernels.F16 or kernels.BF16 (half the bytes; K and V rounded
	// to nearest even when written, see kernels.KVLayer).
	KVType kernels.DType
	// MaxBatchTokens is the most new tokens one Execute accepts.
	MaxBatchTokens int
	// Workers is the number of cores the kernels use (0: GOMAXPROCS).
	Workers int
	// KeepLogits makes Execute keep a copy of every sampled row's logits
	// (before penalties and sampling touch them), read back with Logits.
	// It costs one copy of vocab floats per sampled sequence.
	KeepLogits bool
	// MLP, when set with Size() > 1, makes the MLP tensor-parallel across
	// its ranks: this runner holds rows [Rank()·F/N, (Rank()+1)·F/N) of
	// gate and up and the same columns of down (F = FFN, N = Size()), and
	// every layer's MLP runs on every rank's tokens, joined by collectives
	// (see Execute and DummyStep). Every rank must use the same model and
	// should use the same MaxBatchTokens. nil (or Size() = 1): the whole MLP,
	// no collectives.
	MLP MLPComm
}

// CPURunner executes batches of the llama forward pass on the CPU with the
// C kernels: it owns the paged KV cache (indexed by kvpool block ids), the
// per-seat sampler state and last-token rows, and preallocated activations
// for MaxBatchTokens tokens. Execute, DummyStep, Capacity, Logits, Check and
// Close must be called from one goroutine at a time (the executor's step
// loop).
type CPURunner struct {
	m        *Llama
	cfg      CPURunnerConfig
	capacity step.Capacity

	// pool splits large kernel calls over cores; serial runs small ones on
	// the calling goroutine, where waking helpers would cost more than the
	// arithmetic (tiny models, short decode attention).
	pool, serial *kernels.Workers
	kv           []kernels.KVLayer // one per layer, views of kvMem (F32) or kvMem16
	kvMem        []float32
	kvMem16      []uint16        // F16 or BF16 bits
	kvRegion     *hugemem.Region // kvMem's or kvMem16's memory (attention reads scattered blocks: huge pages)

	host   *seatHost
	closed bool

	// ffn is each layer's MLP weights: the model's, or this rank's shard of
	// them when shard is set (the MLP is tensor-parallel across ranks).
	ffn   []ffnWeights
	shard *mlpShard

	// Scratch, sized for MaxBatchTokens tokens (T) or Seats rows (S).
	tokens   []int32           // [T] tokens with FutureToken resolved
	x        []float32         // [T][Dim] residual stream
	xn       []float32         // [T][Dim] normalised input of a sublayer
	tmp      []float32         // [T][Dim] sublayer output before the residual add
	q, att   []float32         // [T][Heads*HeadDim]
	k, v     []float32         // [T][KVHeads*HeadDim]
	ropeCS   []float32         // [T][HeadDim/2][2] the step's RoPE (cos, sin), shared by every layer's q and k
	gate, up []float32         // [T][FFN], or sharded [N·T][FFN/N]
	attnSeqs []kernels.AttnSeq // [S] every sequence's queries
	lastSeqs []kernels.AttnSeq // [S] the last layer's: one query per sampled sequence
	// groups and lastGroups are the step's cascade groups (step.Group) over
	// attnSeqs and lastSeqs; lastMembers holds lastGroups' member lists and
	// lastRow maps a Batch.Seqs index to its lastSeqs row (-1: not sampled).
	groups, lastGroups []kernels.AttnGroup
	lastMembers        []int32   // [S]
	lastRow            []int32   // [S]
	logits             []float32 // [S][Vocab]
	sampled            []int32   // [S] index in Batch.Seqs of each logits row
}

// serialMACs is the work (multiply-adds) below which a kernel call runs on
// the calling goroutine instead of the pool: waking a helper costs several
// microseconds of CPU (futex wake-up and scheduling), as much as ~64K
// multiply-adds on one core. Measured on stories260K decode: 1<<15 left
// the output projection on the pool and cost ~40% more CPU per token.
const serialMACs = 1 << 16

// ErrRunnerClosed is returned by Execute after Close.
var ErrRunnerClosed = errors.New("model: CPU runner closed")

// NewCPURunner allocates a runner for m. The model must outlive the runner.
func NewCPURunner(m *Llama, cfg CPURunnerConfig) (*CPURunner, error) {
	if m == nil {
		return nil, errors.New("model: NewCPURunner with a nil model")
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"Seats", cfg.Seats}, {"KVBlocks", cfg.KVBlocks}, {"BlockSize", cfg.BlockSize}, {"MaxBatchTokens", cfg.MaxBatchTokens}} {
		if p.v <= 0 {
			return nil, fmt.Errorf("model: CPURunnerConfig.%s = %d, want > 0", p.name, p.v)
		}
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("model: CPURunnerConfig.Workers = %d, want ≥ 0", cfg.Workers)
	}
	if _, err := kernels.KVElemBytes(cfg.KVType); err != nil {
		return nil, fmt.Errorf("model: CPURunnerConfig.KVType: %w", err)
	}
	if cfg.Workers == 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	c := m.cfg
	if cfg.Seats > math.MaxInt32 || cfg.KVBlocks > math.MaxInt32 || cfg.MaxBatchTokens > math.MaxInt32 {
		return nil, fmt.Errorf("model: CPURunnerConfig sizes (seats %d, blocks %d, batch tokens %d) must fit int32", cfg.Seats, cfg.KVBlocks, cfg.MaxBatchTokens)
	}
	blockFloats := c.KVHeads * cfg.BlockSize * c.HeadDim
	kvFloats := 2 * c.Layers * cfg.KVBlocks * blockFloats
	if kvFloats/2/c.Layers/cfg.KVBlocks != blockFloats || kvFloats > 1<<40 {
		return nil, fmt.Errorf("model: KV cache of %d blocks × %d positions × %d layers is too large", cfg.KVBlocks, cfg.BlockSize, c.Layers)
	}
	T, S := cfg.MaxBatchTokens, min(cfg.Seats, cfg.MaxBatchTokens)
	capacity := step.Capacity{
		Seats: cfg.Seats, KVBlocks: cfg.KVBlocks, BlockSize: cfg.BlockSize,
		MaxContext: m.maxContext, MaxBatchTokens: cfg.MaxBatchTokens, Vocab: c.Vocab,
	}
	host, err := newSeatHost(capacity, S, cfg.KeepLogits)
	if err != nil {
		return nil, err
	}
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	r := &CPURunner{
		m:           m,
		cfg:         cfg,
		capacity:    capacity,
		host:        host,
		tokens:      make([]int32, T),
		x:           make([]float32, T*c.Dim),
		xn:          make([]float32, T*c.Dim),
		tmp:         make([]float32, T*c.Dim),
		q:           make([]float32, T*qd),
		att:         make([]float32, T*qd),
		k:           make([]float32, T*kvd),
		v:           make([]float32, T*kvd),
		ropeCS:      make([]float32, T*c.HeadDim),
		gate:        make([]float32, T*c.FFN),
		up:          make([]float32, T*c.FFN),
		attnSeqs:    make([]kernels.AttnSeq, 0, S),
		lastSeqs:    make([]kernels.AttnSeq, 0, S),
		lastMembers: make([]int32, 0, S),
		lastRow:     make([]int32, S),
		logits:      make([]float32, S*c.Vocab),
		sampled:     make([]int32, 0, S),
	}
	layerFloats := cfg.KVBlocks * blockFloats
	elem, _ := kernels.KVElemBytes(cfg.KVType) // checked above
	if r.kvRegion, err = hugemem.Alloc(kvFloats * elem); err != nil {
		return nil, fmt.Errorf("model: KV cache: %w", err)
	}
	// The cache lives outside the Go heap: free it if the runner is dropped
	// without Close.
	runtime.AddCleanup(r, func(kv *hugemem.Region) { _ = kv.Free() }, r.kvRegion)
	if cfg.KVType == kernels.F32 {
		r.kvMem, err = hugemem.Float32s(r.kvRegion, kvFloats)
	} else {
		r.kvMem16, err = hugemem.Uint16s(r.kvRegion, kvFloats)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("model: KV cache: %w", err), r.kvRegion.Free())
	}
	r.kv = make([]kernels.KVLayer, c.Layers)
	for i := range r.kv {
		base := 2 * i * layerFloats
		l := kernels.KVLayer{Type: cfg.KVType, NumBlocks: cfg.KVBlocks, KVHeads: c.KVHeads, BlockSize: cfg.BlockSize, HeadDim: c.HeadDim}
		if cfg.KVType == kernels.F32 {
			l.K = r.kvMem[base : base+layerFloats : base+layerFloats]
			l.V = r.kvMem[base+layerFloats : base+2*layerFloats : base+2*layerFloats]
		} else {
			l.K16 = r.kvMem16[base : base+layerFloats : base+layerFloats]
			l.V16 = r.kvMem16[base+layerFloats : base+2*layerFloats : base+2*layerFloats]
		}
		r.kv[i] = l
	}
	r.ffn = make([]ffnWeights, c.Layers)
	for li := range m.layers {
		l := &m.layers[li]
		r.ffn[li] = ffnWeights{gate: l.gate, up: l.up, down: l.down}
	}
	if cfg.MLP != nil && cfg.MLP.Size() != 1 {
		if r.shard, r.ffn, err = newMLPShard(m, cfg.MLP, T); err != nil {
			return nil, errors.Join(err, r.kvRegion.Free())
		}
	}
	r.pool = kernels.NewWorkers(cfg.Workers)
	r.serial = kernels.NewWorkers(1)
	return r, nil
}

// KVType is the KV cache's element type (kernels.F32, F16 or BF16).
func (r *CPURunner) KVType() kernels.DType { return r.cfg.KVType }

// KVBytes is the KV cache's memory: K and V of every layer and block.
func (r *CPURunner) KVBytes() int64 {
	return 4*int64(len(r.kvMem)) + 2*int64(len(r.kvMem16))
}

// Capacity reports what the runner holds.
func (r *CPURunner) Capacity() step.Capacity { return r.capacity }

// Model returns the model the runner executes.
func (r *CPURunner) Model() *Llama { return r.m }

// MLPWeightBytes is the bytes of MLP weights (gate, up and down of every
// layer) this runner multiplies by: the model's whole MLP, or with a sharded
// MLP this rank's 1/Size() of it.
func (r *CPURunner) MLPWeightBytes() int64 {
	var n int64
	for i := range r.ffn {
		w := &r.ffn[i]
		n += int64(len(w.gate.Data) + len(w.up.Data) + len(w.down.Data))
	}
	return n
}

// Logits returns the logits row computed for Batch.Seqs[i] in the latest
// Execute, before sampling touched it, when the runner keeps logits
// (CPURunnerConfig.KeepLogits) and that sequence was sampled; nil
// otherwise. The slice is owned by the runner and overwritten by the next
// Execute.
func (r *CPURunner) Logits(i int) []float32 { return r.host.logits(i) }

// Close stops the worker goroutines and drops the KV cache. Execute fails
// afterwards; Close is idempotent.
func (r *CPURunner) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.pool.Close()
	r.serial.Close()
	r.kvMem, r.kvMem16, r.kv = nil, nil, nil
	if r.shard != nil {
		r.shard.downMem = nil
	}
	if err := r.kvRegion.Free(); err != nil {
		return fmt.Errorf("model: CPU runner close: %w", err)
	}
	return nil
}

// Check verifies the runner's per-seat bookkeeping and the sampler's.
func (r *CPURunner) Check() error { return r.host.check() }

// Execute runs one step: sampler resets for starting
// sequences, the forward pass over every new token (writing their K/V into
// the paged cache) and one sampled token per sequence with Sample set.
// out is resized to len(b.Seqs). The batch is checked first; a bad batch
// returns an error naming the value and changes nothing.
//
// With a sharded MLP, Execute is collective: every rank calls Execute or
// DummyStep once per step. It starts with one AllgatherInt64 of every
// rank's [new tokens, sampled rows], then each layer gathers every rank's
// rows into its MLP shard (AllgathervFloat32) and sums the shards' results
// back onto each rank's own rows (ReduceScatterSumFloat32V). A bad batch
// still joins the step's collectives, with no rows, so that one rank's error
// does not leave its peers waiting.
func (r *CPURunner) Execute(b *step.Batch, out *step.Output) error {
	if r.closed {
		return ErrRunnerClosed
	}
	if err := r.host.begin(b); err != nil {
		if r.shard != nil {
			if derr := r.DummyStep(); derr != nil {
				return errors.Join(err, derr)
			}
		}
		return err
	}
	T := len(b.Tokens)
	copy(r.tokens, b.Tokens)
	r.attnSeqs = r.attnSeqs[:0]
	r.sampled = r.sampled[:0]
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		if r.tokens[sb.TokenStart] == step.FutureToken {
			r.tokens[sb.TokenStart] = r.host.last(sb.Seat)
		}
		r.attnSeqs = append(r.attnSeqs, kernels.AttnSeq{
			QStart: sb.TokenStart, NumQ: sb.NumTokens, ContextLen: sb.ContextLen, BlockTable: sb.BlockTable,
			Window: r.m.attnWindow(),
		})
		if sb.Sample {
			r.sampled = append(r.sampled, int32(i))
		}
	}
	r.groups = r.groups[:0]
	for _, g := range b.Groups {
		r.groups = append(r.groups, kernels.AttnGroup{SharedBlocks: g.SharedBlocks, Members: b.Members(g)})
	}
	if err := r.forward(b, T); err != nil {
		return err
	}
	return r.sample(b, out)
}

// DummyStep runs a step with no tokens on a rank that has no work, joining
// every collective of the sharded MLP with zero rows (the peers' rows still
// pass through this rank's shard). Without a sharded MLP it does nothing. It
// changes no seat, sampler or cache state.
func (r *CPURunner) DummyStep() error {
	if r.closed {
		return ErrRunnerClosed
	}
	if r.shard == nil {
		return nil
	}
	r.attnSeqs = r.attnSeqs[:0]
	r.sampled = r.sampled[:0]
	r.groups = r.groups[:0]
	return r.forward(nil, 0)
}

// workersFor picks the pool for a call of macs multiply-adds.
func (r *CPURunner) workersFor(macs int) *kernels.Workers {
	if macs < serialMACs {
		return r.serial
	}
	return r.pool
}

// matmul is y = x·Wᵀ for m rows on the pool that suits its size.
func (r *CPURunner) matmul(y, x []float32, m int, w *kernels.Matrix) error {
	return r.workersFor(m*w.Rows*w.Cols).MatMul(y[:m*w.Rows], x[:m*w.Cols], m, *w)
}

// matmuls is ys[i] = x·Ws[i]ᵀ for m rows, matrices that share x (q/k/v,
// gate/up), in one pool hand-off where the kernels allow it.
func (r *CPURunner) matmuls(x []float32, m int, ys [][]float32, ws ...*kernels.Matrix) error {
	var mats [kernels.MaxMatMuls]kernels.Matrix
	macs := 0
	for i, w := range ws {
		mats[i] = *w
		ys[i] = ys[i][:m*w.Rows]
		macs += m * w.Rows * w.Cols
	}
	return r.workersFor(macs).MatMuls(ys, x[:m*ws[0].Cols], m, mats[:len(ws)])
}

// forward runs every layer over the T new tokens of b (tokens resolved in
// r.tokens) and leaves the logits of the sampled sequences in r.logits.
//
// Every layer writes K/V for all T tokens, but only the last token of each
// sampled sequence feeds the logits, so the last layer runs attention, the
// output projection and the MLP on those rows alone (none for a prefill
// chunk that does not sample).
//
// With a sharded MLP, T may be 0 (DummyStep, b nil): the rank computes
// nothing of its own but joins every layer's MLP collectives; and a rank with
// no sampled rows still joins the last layer's unless no rank has any.
func (r *CPURunner) forward(b *step.Batch, T int) error {
	c := &r.m.cfg
	dim := c.Dim
	x := r.x[:T*dim]
	ns := len(r.sampled)
	if r.shard != nil {
		idle, err := r.shard.begin(T, ns, dim, r)
		if err != nil || idle {
			return err
		}
	}
	if T > 0 {
		if err := r.embed(x, r.tokens[:T]); err != nil {
			return err
		}
		// One angle table per step: every layer rotates q and k at the
		// same positions (sin/cos per layer cost ~2% of a prefill).
		if err := kernels.RoPETable(r.ropeCS[:T*c.HeadDim], b.Positions[:T], r.m.ropeFreqs); err != nil {
			return fmt.Errorf("model: rope table: %w", err)
		}
	}
	for li := range r.m.layers {
		if T > 0 {
			if err := r.layerHead(b, li, T); err != nil {
				return err
			}
		}
		rows, seqs, groups := T, r.attnSeqs, r.groups
		last := li == len(r.m.layers)-1
		if last {
			if ns == 0 && (r.shard == nil || r.shard.sumNS == 0) {
				return nil
			}
			r.compactSampled(b)
			rows, seqs, groups = ns, r.lastSeqs, r.lastGroups
		}
		if rows > 0 {
			if err := r.attention(li, rows, seqs, groups); err != nil {
				return err
			}
		}
		if err := r.mlp(li, rows, last); err != nil {
			return err
		}
	}
	if ns == 0 {
		return nil
	}
	hid := r.xn[:ns*dim]
	if err := r.pool.RMSNorm(hid, x[:ns*dim], r.m.outNorm, ns, dim, c.NormEps); err != nil {
		return fmt.Errorf("model: output norm: %w", err)
	}
	if err := r.matmul(r.logits, hid, ns, &r.m.output); err != nil {
		return fmt.Errorf("model: output: %w", err)
	}
	return nil
}

// layerHead starts layer li on the T new tokens of b: the attention norm,
// the q/k/v projections, RoPE, and the K/V writes into the paged cache.
func (r *CPURunner) layerHead(b *step.Batch, li, T int) error {
	c := &r.m.cfg
	dim, qd, kvd := c.Dim, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	x, xn := r.x[:T*dim], r.xn[:T*dim]
	q, k, v := r.q[:T*qd], r.k[:T*kvd], r.v[:T*kvd]
	pos := b.Positions
	l := &r.m.layers[li]
	kv := &r.kv[li]
	if err := r.pool.RMSNorm(xn, x, l.attnNorm, T, dim, c.NormEps); err != nil {
		return fmt.Errorf("model: layer %d attn norm: %w", li, err)
	}
	if err := r.matmuls(xn, T, [][]float32{q, k, v}, &l.q, &l.k, &l.v); err != nil {
		return fmt.Errorf("model: layer %d q/k/v: %w", li, err)
	}
	if l.qBias != nil {
		addRows(q, l.qBias)
		addRows(k, l.kBias)
		addRows(v, l.vBias)
	}
	if l.qNorm != nil {
		// Per-head RMSNorm: each head of each row is one row of HeadDim.
		if err := r.pool.RMSNorm(q, q, l.qNorm, T*c.Heads, c.HeadDim, c.NormEps); err != nil {
			return fmt.Errorf("model: layer %d q norm: %w", li, err)
		}
		if err := r.pool.RMSNorm(k, k, l.kNorm, T*c.KVHeads, c.HeadDim, c.NormEps); err != nil {
			return fmt.Errorf("model: layer %d k norm: %w", li, err)
		}
	}
	cs := r.ropeCS[:T*c.HeadDim]
	if err := kernels.RoPEApply(q, cs, T, c.Heads, c.HeadDim, c.RopeNeox); err != nil {
		return fmt.Errorf("model: layer %d rope q: %w", li, err)
	}
	if err := kernels.RoPEApply(k, cs, T, c.KVHeads, c.HeadDim, c.RopeNeox); err != nil {
		return fmt.Errorf("model: layer %d rope k: %w", li, err)
	}
	for i := range r.attnSeqs {
		s := &r.attnSeqs[i]
		t0, t1 := int(s.QStart), int(s.QStart+s.NumQ)
		if err := kernels.KVWrite(kv, k[t0*kvd:t1*kvd], v[t0*kvd:t1*kvd], pos[t0:t1], s.BlockTable); err != nil {
			return fmt.Errorf("model: layer %d kv write of seq %d: %w", li, i, err)
		}
	}
	return nil
}

// compactSampled moves the rows that matter in the last layer to the front
// and describes their attention in r.lastSeqs: row j is the last token of
// the j-th sampled sequence (j ≤ its old index, so the in-place moves never
// overwrite a row still to be read).
func (r *CPURunner) compactSampled(b *step.Batch) {
	c := &r.m.cfg
	dim, qd := c.Dim, c.Heads*c.HeadDim
	x, q := r.x, r.q
	r.lastSeqs = r.lastSeqs[:0]
	for j, si := range r.sampled {
		sb := &b.Seqs[si]
		row := int(sb.TokenStart + sb.NumTokens - 1)
		copy(x[j*dim:(j+1)*dim], x[row*dim:(row+1)*dim])
		copy(q[j*qd:(j+1)*qd], q[row*qd:(row+1)*qd])
		r.lastSeqs = append(r.lastSeqs, kernels.AttnSeq{QStart: int32(j), NumQ: 1, ContextLen: sb.ContextLen, BlockTable: sb.BlockTable,
			Window: r.m.attnWindow()})
	}
	// The groups carry over to the sampled rows: a member that does not
	// sample has no row in the last layer.
	r.lastGroups, r.lastMembers = r.lastGroups[:0], r.lastMembers[:0]
	if len(r.groups) == 0 {
		return
	}
	for i := range b.Seqs {
		r.lastRow[i] = -1
	}
	for j, si := range r.sampled {
		r.lastRow[si] = int32(j)
	}
	for _, g := range r.groups {
		from := len(r.lastMembers)
		for _, m := range g.Members {
			if row := r.lastRow[m]; row >= 0 {
				r.lastMembers = append(r.lastMembers, row)
			}
		}
		if len(r.lastMembers)-from >= 2 {
			r.lastGroups = append(r.lastGroups, kernels.AttnGroup{SharedBlocks: g.SharedBlocks, Members: r.lastMembers[from:]})
		} else {
			r.lastMembers = r.lastMembers[:from]
		}
	}
}

// attention continues layer li on the first rows rows of the activations,
// whose K/V are already in the cache: attention of seqs (each group's shared
// run read once for its members), the output projection and residual, and
// the ffn norm into r.xn that the MLP reads.
func (r *CPURunner) attention(li, rows int, seqs []kernels.AttnSeq, groups []kernels.AttnGroup) error {
	c := &r.m.cfg
	l := &r.m.layers[li]
	dim, qd := c.Dim, c.Heads*c.HeadDim
	x, xn, tmp := r.x[:rows*dim], r.xn[:rows*dim], r.tmp[:rows*dim]
	q, att := r.q[:rows*qd], r.att[:rows*qd]
	var macs int // attention multiply-adds (QKᵀ and PV), for the pool choice
	for _, s := range seqs {
		keys := int(s.ContextLen)
		if s.Window > 0 {
			keys = min(keys, int(s.Window)) // the kernels skip the rest
		}
		macs += int(s.NumQ) * keys
	}
	macs *= 2 * qd
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	if err := r.workersFor(macs).PagedAttentionGroups(att, q, &r.kv[li], seqs, groups, c.Heads, scale); err != nil {
		return fmt.Errorf("model: layer %d attention: %w", li, err)
	}
	if err := r.matmul(tmp, att, rows, &l.o); err != nil {
		return fmt.Errorf("model: layer %d attn output: %w", li, err)
	}
	addInPlace(x, tmp)
	if err := r.pool.RMSNorm(xn, x, l.ffnNorm, rows, dim, c.NormEps); err != nil {
		return fmt.Errorf("model: layer %d ffn norm: %w", li, err)
	}
	return nil
}

// mlp finishes layer li on the first rows rows: the SwiGLU MLP of their ffn
// norms and the residual add, with the whole MLP or, sharded, joined with
// every rank's rows (rows may then be 0).
func (r *CPURunner) mlp(li, rows int, last bool) error {
	if r.shard != nil {
		return r.shardedMLP(li, rows, last)
	}
	c := &r.m.cfg
	w := &r.ffn[li]
	dim := c.Dim
	x, xn, tmp := r.x[:rows*dim], r.xn[:rows*dim], r.tmp[:rows*dim]
	gate, up := r.gate[:rows*c.FFN], r.up[:rows*c.FFN]
	if err := r.matmuls(xn, rows, [][]float32{gate, up}, &w.gate, &w.up); err != nil {
		return fmt.Errorf("model: layer %d ffn gate/up: %w", li, err)
	}
	if err := kernels.SiLUMul(gate, gate, up); err != nil {
		return fmt.Errorf("model: layer %d silu: %w", li, err)
	}
	if err := r.matmul(tmp, gate, rows, &w.down); err != nil {
		return fmt.Errorf("model: layer %d ffn down: %w", li, err)
	}
	addInPlace(x, tmp)
	return nil
}

// sample draws one token per sampled sequence from its logits row and
// records the step in the seats' cursors; sequences without Sample get -1.
func (r *CPURunner) sample(b *step.Batch, out *step.Output) error {
	vocab := r.capacity.Vocab
	if err := r.host.waitMasks(b); err != nil {
		return err
	}
	r.host.resetOutput(b, out)
	for j, si := range r.sampled {
		if _, err := r.host.sample(b, out, int(si), r.logits[j*vocab:(j+1)*vocab]); err != nil {
			return err
		}
	}
	r.host.end(b, out)
	return nil
}

// embed writes the embedding rows of tokens (validated ids) to x, one
// cgo call for all of them.
func (r *CPURunner) embed(x []float32, tokens []int32) error {
	if err := kernels.Embedding(x[:len(tokens)*r.m.embd.Cols], r.m.embd, tokens); err != nil {
		return fmt.Errorf("model: embedding: %w", err)
	}
	return nil
}

// addRows adds bias [n] to every row of x [len(x)/n][n].
func addRows(x, bias []float32) {
	n := len(bias)
	for r := 0; r+n <= len(x); r += n {
		row := x[r : r+n]
		for i, b := range bias {
			row[i] += b
		}
	}
}

// addInPlace adds d to x elementwise (the residual connection).
func addInPlace(x, d []float32) {
	d = d[:len(x)]
	for i := range x {
		x[i] += d[i]
	}
}

// DefaultCPUKVType is the CPU runner's KV cache type under
// --kv-cache-dtype auto: the cheapest type that keeps greedy outputs on
// stories260K identical to an f32 cache, else f16 (llama.cpp's default).
// Evidence: TestKVTypeGreedyStories (16 prompts × 200 greedy tokens).
const DefaultCPUKVType = kernels.F16
