package kernels

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Workers is a pool of goroutines that splits one kernel call into tiles and
// runs one cgo call per tile. The calling goroutine works too, so N workers
// means N-1 helper goroutines. Calls on one Workers are serialised by a
// mutex; use one Workers per forward pass. Per-worker scratch is kept and
// reused, so steady-state calls do not allocate.
type Workers struct {
	mu   sync.Mutex
	n    int
	path Path
	wake []chan struct{} // one per helper goroutine
	done sync.WaitGroup  // helpers still working on the current job
	quit sync.WaitGroup  // helpers still running (Close waits)

	next   atomic.Int64 // next tile index to claim
	ntiles int64
	job    job
	// scratch[i] belongs to worker i (0 is the caller) during a job.
	scratch [][]float32
	packA   []float32 // x packed into MR-row panels for the GEMM
	tasks   []attnTask
	casc    cascade   // PagedAttentionGroups' plan and partial states
	act     []float32 // x rounded to bf16 or quantised to int8 (tk_lowp.c)
	feat    Features  // extensions the low-precision kernels may use
	exact   bool      // float32 activations for every weight type (SetExact)
	closed  bool
}

type jobKind uint8

const (
	jobPackA jobKind = iota
	jobGemm
	jobGemv
	jobStream
	jobRMSNorm
	jobAttn
	jobFMA
	jobRead
	jobCascade
	jobQmm
	jobMMBF16
	jobPackABF16
	jobGemmBF16
)

// job holds the arguments of the operation in flight. It is written only by
// the caller before the helpers are woken, and read by them afterwards.
type job struct {
	kind jobKind
	path Path
	// matmul
	w    Matrix
	x, y []float32
	m    int
	nc   int // items per tile: weight rows, x panels or norm rows
	lp   int // integer-dot level (jobQmm)
	kp   int // bf16 x row stride (jobMMBF16)
	// rmsnorm
	weight    []float32
	rows, dim int
	eps       float32
	// attention
	out, q []float32
	l      *KVLayer
	seqs   []AttnSeq
	heads  int
	scale  float32
	// probes
	iters int
	flops []float64
	sums  []float32
}

// ErrClosed is returned by calls on a closed Workers.
var ErrClosed = errors.New("kernels: workers closed")

// NewWorkers starts a pool of n workers (n < 1 means 1) using BestPath.
func NewWorkers(n int) *Workers {
	n = max(n, 1)
	w := &Workers{n: n, path: BestPath(), feat: SupportedFeatures(), wake: make([]chan struct{}, n-1), scratch: make([][]float32, n)}
	w.quit.Add(n - 1)
	for i := range w.wake {
		w.wake[i] = make(chan struct{})
		go w.helper(i + 1)
	}
	return w
}

// N returns the number of workers.
func (w *Workers) N() int { return w.n }

// Path returns the instruction-set path the kernels of this pool use.
func (w *Workers) Path() Path {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.path
}

// SetPath forces an instruction-set path (tests run every supported one).
func (w *Workers) SetPath(p Path) error {
	if !p.Supported() {
		return fmt.Errorf("kernels: path %v is not supported by this CPU (supported: %v)", p, SupportedPaths())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.path = p
	return nil
}

// Close stops the helper goroutines. Later calls return ErrClosed.
func (w *Workers) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	for _, c := range w.wake {
		close(c)
	}
	w.quit.Wait()
}

func (w *Workers) helper(id int) {
	defer w.quit.Done()
	for range w.wake[id-1] {
		w.drain(id)
		w.done.Done()
	}
}

// drain claims and runs tiles until none are left.
func (w *Workers) drain(id int) {
	for {
		t := w.next.Add(1) - 1
		if t >= w.ntiles {
			return
		}
		w.runTile(id, int(t))
	}
}

// run executes w.job over ntiles tiles on all workers; w.mu is held.
func (w *Workers) run(ntiles int) {
	w.next.Store(0)
	w.ntiles = int64(ntiles)
	helpers := min(w.n-1, ntiles-1)
	w.done.Add(helpers)
	for i := 0; i < helpers; i++ {
		w.wake[i] <- struct{}{}
	}
	w.drain(0)
	w.done.Wait()
	w.job = job{} // hold no caller memory between calls
}

// ensureScratch grows every worker's scratch to at least n floats.
func (w *Workers) ensureScratch(n int) {
	for i, s := range w.scratch {
		if len(s) < n {
			w.scratch[i] = make([]float32, n)
		}
	}
}

func (w *Workers) runTile(id, t int) {
	j := &w.job
	s := w.scratch[id]
	switch j.kind {
	case jobPackA:
		r0 := t * j.nc * gemmMR
		cPackA(j.x, j.w.Cols, r0, min(r0+j.nc*gemmMR, j.m), w.packA)
	case jobGemm:
		n0 := t * j.nc
		n1 := min(n0+j.nc, j.w.Rows)
		pb := s[:(j.nc+32)*gemmKC]
		cGemmTile(j.path, j.w, w.packA, j.m, j.y, n0, n1, pb, s[len(pb):])
	case jobGemv:
		n0 := t * j.nc
		n1 := min(n0+j.nc, j.w.Rows)
		cGemvTile(j.path, j.w, j.x, j.m, j.y, n0, n1, s)
	case jobStream:
		n0 := t * j.nc
		n1 := min(n0+j.nc, j.w.Rows)
		cStreamTile(j.path, j.w, j.x, j.m, j.y, n0, n1, s)
	case jobRMSNorm:
		r0 := t * j.nc
		cRMSNorm(j.path, j.y, j.x, j.weight, r0, min(r0+j.nc, j.rows), j.dim, j.eps)
	case jobAttn:
		task := w.tasks[t]
		sq := j.seqs[task.seq]
		cAttnTask(j.path, j.out, j.q, j.l, j.heads, sq.BlockTable, sq, task.kvh, task.i0, task.i1, j.scale, s)
	case jobCascade:
		w.cascadeTile(t, s)
	case jobQmm, jobMMBF16, jobPackABF16, jobGemmBF16:
		w.lowpTile(j, t, s)
	case jobFMA:
		j.flops[t] = cPeakFMA(j.path, j.iters)
	case jobRead:
		chunk := (len(j.x) + len(j.sums) - 1) / len(j.sums)
		lo := min(t*chunk, len(j.x))
		j.sums[t] = cReadSum(j.path, j.x[lo:min(lo+chunk, len(j.x))])
	}
}

// FMAProbe runs iters rounds of independent FMAs on each of cores workers
// at once (cores ≤ N) and returns the floating-point operations done in
// total; time it to get the machine's peak GFLOP/s for path p.
func (w *Workers) FMAProbe(p Path, cores, iters int) (float64, error) {
	if !p.Supported() {
		return 0, fmt.Errorf("kernels: path %v is not supported by this CPU", p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	if cores < 1 || cores > w.n {
		return 0, fmt.Errorf("kernels: FMAProbe on %d cores, pool has %d", cores, w.n)
	}
	flops := make([]float64, cores)
	w.job = job{kind: jobFMA, path: p, iters: iters, flops: flops}
	w.run(cores)
	var total float64
	for _, f := range flops {
		total += f
	}
	return total, nil
}

// ReadProbe reads buf once, split over cores workers, and returns the sum of
// its elements; time it to get the machine's read bandwidth.
func (w *Workers) ReadProbe(buf []float32, cores int) (float32, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	if cores < 1 || cores > w.n {
		return 0, fmt.Errorf("kernels: ReadProbe on %d cores, pool has %d", cores, w.n)
	}
	sums := make([]float32, cores)
	w.job = job{kind: jobRead, path: w.path, x: buf, sums: sums}
	w.run(cores)
	var total float32
	for _, s := range sums {
		total += s
	}
	return total, nil
}
