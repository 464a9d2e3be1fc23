package model

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/kernels"
)

// MLPComm is the communicator of the ranks a CPURunner's MLP is tensor-parallel across
// (attention-DP: each rank runs attention for its own sequences, and the MLP
// of every rank's tokens is split by FFN rows over the ranks). *mpi.World
// (and its Dup) satisfies it. Every rank must call the same methods in the
// same order with matching counts; a sharded CPURunner does, as long as every
// rank calls Execute or DummyStep once per step.
type MLPComm interface {
	// Rank is this rank, in [0, Size()).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// AllgatherInt64 gathers every rank's local (the same length on every
	// rank) into all, rank r's at all[r*len(local):(r+1)*len(local)].
	AllgatherInt64(local, all []int64) error
	// AllgathervFloat32 gathers counts[r] floats from each rank r into all,
	// in rank order; len(local) = counts[Rank()], len(all) = sum(counts).
	AllgathervFloat32(local []float32, counts []int, all []float32) error
	// ReduceScatterSumFloat32V sums send (len sum(counts)) element-wise over
	// the ranks and gives rank r its block: counts[r] floats at offset
	// sum(counts[:r]), into recv (len counts[Rank()]).
	ReduceScatterSumFloat32V(send []float32, counts []int, recv []float32) error
}

// ffnWeights are the MLP matrices one layer of a runner multiplies by: the
// model's own ([FFN][Dim] gate and up, [Dim][FFN] down) or one rank's shard
// of them ([FFN/N][Dim] and [Dim][FFN/N]).
type ffnWeights struct {
	gate, up, down kernels.Matrix
}

// mlpShard is a runner's share of a tensor-parallel MLP and the state of
// the collectives that join the shards.
type mlpShard struct {
	g          MLPComm
	rank, size int
	width      int // FFN/size: this shard's gate/up rows and down columns

	// local is this rank's [T, ns] of the current step. A slice of its own,
	// not an array in this struct: cgo's pointer check on an MPI
	// implementation would see the struct's other pointers and panic.
	local  []int64
	counts []int64 // [size][2]: every rank's [T, ns] of the current step
	sumT   int     // Σ T over the ranks: the rows of every layer's MLP but the last
	sumNS  int     // Σ ns: the rows of the last layer's MLP

	rowCounts []int     // [size] floats each rank contributes to the current layer's collectives
	gathered  []float32 // [Σrows][Dim] every rank's ffn-normed rows, in rank order
	partial   []float32 // [Σrows][Dim] this shard's term of the MLP output of every row
	downMem   []byte    // owns the down shards' data (a column slice is not contiguous in the file)
}

// blockElems is the number of columns a weight type packs together (32 for
// the legacy block types, 256 for the K-quants): a column shard must start
// and end on its boundary.
func blockElems(t kernels.DType) int { return t.BlockElems() }

// newMLPShard checks that m's MLP splits into g.Size() shards and builds
// rank g.Rank()'s: gate and up rows [rank·w, (rank+1)·w) as views of the
// model's (memory-mapped) data, and the same columns of down copied into
// owned memory, w = FFN/Size. tokens is the runner's MaxBatchTokens; the
// gathered buffers hold Size()·tokens rows.
func newMLPShard(m *Llama, g MLPComm, tokens int) (*mlpShard, []ffnWeights, error) {
	c := m.cfg
	n, rank := g.Size(), g.Rank()
	if n < 1 {
		return nil, nil, fmt.Errorf("model: CPURunnerConfig.MLP.Size() = %d, want ≥ 1", n)
	}
	if rank < 0 || rank >= n {
		return nil, nil, fmt.Errorf("model: CPURunnerConfig.MLP.Rank() = %d outside [0, %d)", rank, n)
	}
	if c.FFN%n != 0 {
		return nil, nil, fmt.Errorf("model: FFN %d does not split into %d equal MLP shards", c.FFN, n)
	}
	w := c.FFN / n
	var downBytes int
	for li := range m.layers {
		l := &m.layers[li]
		if l.gate.Rows != c.FFN || l.up.Rows != c.FFN || l.down.Cols != c.FFN {
			return nil, nil, fmt.Errorf("model: layer %d MLP shapes gate %dx%d, up %dx%d, down %dx%d disagree with FFN %d",
				li, l.gate.Rows, l.gate.Cols, l.up.Rows, l.up.Cols, l.down.Rows, l.down.Cols, c.FFN)
		}
		if be := blockElems(l.down.Type); w%be != 0 {
			return nil, nil, fmt.Errorf("model: FFN %d in %d MLP shards is %d columns each, not a multiple of the %v block size %d (layer %d ffn_down)",
				c.FFN, n, w, l.down.Type, be, li)
		}
		rb, err := l.down.Type.RowBytes(w)
		if err != nil {
			return nil, nil, fmt.Errorf("model: layer %d ffn_down shard: %w", li, err)
		}
		downBytes += l.down.Rows * rb
	}
	s := &mlpShard{
		g: g, rank: rank, size: n, width: w,
		local:     make([]int64, 2),
		counts:    make([]int64, 2*n),
		rowCounts: make([]int, n),
		gathered:  make([]float32, n*tokens*c.Dim),
		partial:   make([]float32, n*tokens*c.Dim),
		downMem:   make([]byte, downBytes),
	}
	ffn := make([]ffnWeights, len(m.layers))
	mem := s.downMem
	for li := range m.layers {
		l := &m.layers[li]
		var err error
		if ffn[li].gate, err = rowShard(l.gate, rank*w, w); err != nil {
			return nil, nil, fmt.Errorf("model: layer %d ffn_gate shard: %w", li, err)
		}
		if ffn[li].up, err = rowShard(l.up, rank*w, w); err != nil {
			return nil, nil, fmt.Errorf("model: layer %d ffn_up shard: %w", li, err)
		}
		if ffn[li].down, mem, err = colShard(l.down, rank*w, w, mem); err != nil {
			return nil, nil, fmt.Errorf("model: layer %d ffn_down shard: %w", li, err)
		}
	}
	return s, ffn, nil
}

// rowShard views rows [r0, r0+n) of w without copying (rows are contiguous).
func rowShard(w kernels.Matrix, r0, n int) (kernels.Matrix, error) {
	rb, err := w.Type.RowBytes(w.Cols)
	if err != nil {
		return kernels.Matrix{}, err
	}
	lo, hi := r0*rb, (r0+n)*rb
	return kernels.Matrix{Type: w.Type, Rows: n, Cols: w.Cols, Data: w.Data[lo:hi:hi]}, nil
}

// colShard copies columns [c0, c0+n) of every row of w (c0 and n on the
// type's block boundary) into the front of mem and returns the matrix and
// the rest of mem.
func colShard(w kernels.Matrix, c0, n int, mem []byte) (kernels.Matrix, []byte, error) {
	full, err := w.Type.RowBytes(w.Cols)
	if err != nil {
		return kernels.Matrix{}, nil, err
	}
	off, err := w.Type.RowBytes(c0)
	if err != nil {
		return kernels.Matrix{}, nil, err
	}
	rb, err := w.Type.RowBytes(n)
	if err != nil {
		return kernels.Matrix{}, nil, err
	}
	size := w.Rows * rb
	if len(mem) < size {
		return kernels.Matrix{}, nil, fmt.Errorf("model: column shard needs %d bytes, %d left", size, len(mem))
	}
	data := mem[:size:size]
	for r := range w.Rows {
		copy(data[r*rb:(r+1)*rb], w.Data[r*full+off:r*full+off+rb])
	}
	sh := kernels.Matrix{Type: w.Type, Rows: w.Rows, Cols: n, Data: data}
	if err := sh.Validate(); err != nil {
		return kernels.Matrix{}, nil, err
	}
	return sh, mem[size:], nil
}

// begin gathers every rank's [T, ns] for this step, so each rank knows
// every layer's row counts, and grows the gathered buffers when a peer's
// batches are larger than this runner's (never in a deployment whose ranks
// share one configuration). It reports idle when no rank has a token: then
// every rank skips the whole step alike.
func (s *mlpShard) begin(T, ns, dim int, r *CPURunner) (idle bool, err error) {
	s.local[0], s.local[1] = int64(T), int64(ns)
	if err := s.g.AllgatherInt64(s.local, s.counts); err != nil {
		return false, fmt.Errorf("model: sharded MLP: gather of step counts: %w", err)
	}
	s.sumT, s.sumNS = 0, 0
	for p := range s.size {
		t, n := s.counts[2*p], s.counts[2*p+1]
		// Every rank sees the same counts, so a bad one fails every rank
		// alike (no rank is left waiting in a collective).
		if t < 0 || n < 0 || n > t || t > 1<<31 {
			return false, fmt.Errorf("model: sharded MLP: rank %d reported %d tokens and %d sampled rows", p, t, n)
		}
		s.sumT += int(t)
		s.sumNS += int(n)
	}
	if need := s.sumT * dim; need > len(s.gathered) {
		s.gathered = make([]float32, need)
		s.partial = make([]float32, need)
	}
	if need := s.sumT * s.width; need > len(r.gate) {
		r.gate = make([]float32, need)
		r.up = make([]float32, need)
	}
	return s.sumT == 0, nil
}

// layerRows is every rank's row count in layer li's MLP (T, or ns in the
// last layer) as float counts of dim-wide rows in s.rowCounts, and their sum.
func (s *mlpShard) layerRows(last bool, dim int) int {
	total := 0
	for p := range s.size {
		n := int(s.counts[2*p])
		if last {
			n = int(s.counts[2*p+1])
		}
		s.rowCounts[p] = n * dim
		total += n
	}
	return total
}

// shardedMLP is layer li's MLP over every rank's rows: gather the rows' ffn
// norms (r.xn, rows of them from this rank), multiply by this rank's shard of
// gate/up/down, and sum the shards' terms back onto each rank's own rows
// (reduce-scatter), then the residual add. Every rank calls it for every
// layer, with rows = 0 when it has none.
func (r *CPURunner) shardedMLP(li, rows int, last bool) error {
	s := r.shard
	dim := r.m.cfg.Dim
	total := s.layerRows(last, dim)
	if total == 0 {
		return nil // every rank computes the same total and skips alike
	}
	g := s.gathered[:total*dim]
	if err := s.g.AllgathervFloat32(r.xn[:rows*dim], s.rowCounts, g); err != nil {
		return fmt.Errorf("model: layer %d MLP allgather of %d rows: %w", li, total, err)
	}
	w := &r.ffn[li]
	gate, up := r.gate[:total*s.width], r.up[:total*s.width]
	if err := r.matmul(gate, g, total, &w.gate); err != nil {
		return fmt.Errorf("model: layer %d ffn gate shard: %w", li, err)
	}
	if err := r.matmul(up, g, total, &w.up); err != nil {
		return fmt.Errorf("model: layer %d ffn up shard: %w", li, err)
	}
	if err := kernels.SiLUMul(gate, gate, up); err != nil {
		return fmt.Errorf("model: layer %d silu: %w", li, err)
	}
	part := s.partial[:total*dim]
	if err := r.matmul(part, gate, total, &w.down); err != nil {
		return fmt.Errorf("model: layer %d ffn down shard: %w", li, err)
	}
	tmp := r.tmp[:rows*dim]
	if err := s.g.ReduceScatterSumFloat32V(part, s.rowCounts, tmp); err != nil {
		return fmt.Errorf("model: layer %d MLP reduce-scatter of %d rows: %w", li, total, err)
	}
	addInPlace(r.x[:rows*dim], tmp)
	return nil
}
