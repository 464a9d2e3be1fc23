package kernels

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Workers is a pool of goroutines that splits one kernel call into tiles and
// runs one cgo call per tile. The calling goroutine works too, so N workers
// means N-1 helper goroutines. Calls on one Workers are serialised by a
// mutex; use one Workers per forward pass. Per-worker scratch is kept and
// reused, so steady-state calls do not allocate.
//
// Hand-offs spin before they sleep: an idle helper polls the job counter for
// up to helperSpin, and the caller polls the helpers' done count for up to
// callerSpin, before parking on a channel. Decode issues a call every few
// tens of microseconds, so within a step the helpers need not go through
// the scheduler (a futex wake-up and sleep per call cost ~13% of F32
// decode); an idle pool parks after helperSpin and then burns no CPU.
type Workers struct {
	mu   sync.Mutex
	n    int
	path Path

	_ [64]byte // ctl and pending each on their own cache line (and
	// every region on its own): the helpers poll ctl while the workers
	// claim tiles and count down pending.
	ctl     atomic.Uint64 // job sequence<<ctlShift | helpers taking part; ctlQuit after Close
	_       [56]byte
	pending atomic.Int32 // helpers still working on the current job
	_       [60]byte

	// regions[i] holds worker i's share of the current job's tiles, see
	// drain; nreg of them are in use.
	regions []region
	nreg    int

	park   []parker       // one per helper goroutine: woken by the caller
	caller parker         // woken by the helper that finishes a job last
	quit   sync.WaitGroup // helpers still running (Close waits)

	job job
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
	jobQuantAct
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
	// several matrices sharing x (MatMuls, jobGemv and jobStream): tiles
	// [tend[i-1], tend[i]) are matrix i's, each nc rows of mats[i] into ys[i]
	nmat int
	mats [MaxMatMuls]Matrix
	ys   [MaxMatMuls][]float32
	tend [MaxMatMuls]int
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

// NewWorkers starts a pool of n workers (n < 1 means 1, at most 65536)
// using BestPath.
func NewWorkers(n int) *Workers {
	n = min(max(n, 1), maxWorkers)
	w := &Workers{n: n, path: BestPath(), feat: SupportedFeatures(), park: make([]parker, n-1), scratch: make([][]float32, n),
		regions: make([]region, n)}
	w.caller.ch = make(chan struct{}, 1)
	w.quit.Add(n - 1)
	for i := range w.park {
		w.park[i].ch = make(chan struct{}, 1)
		go w.helper(i + 1)
	}
	return w
}

// Spin budgets before a hand-off parks. 50 µs covers the gap between two
// kernel calls of a decode step (norms, RoPE, the KV write and Go code
// between the matmuls take a few µs to tens of µs on the 110M model) and
// the caller's wait for the helpers' last tile. It is kept short because
// spinning costs the other processes on a shared machine: with the CPU
// oversubscribed (load ~8 on 2 cores) 2 ms spins ran F32 tg64 at 0.4x the
// channel hand-off, 50 µs at about 1x (medians of 8 interleaved runs).
const (
	helperSpin = 50 * time.Microsecond
	callerSpin = 50 * time.Microsecond
)

const (
	ctlShift   = 16 // low bits of ctl: helpers taking part in the job
	maxWorkers = 1 << ctlShift
	ctlQuit    = ^uint64(0)
)

// parker puts one goroutine to sleep until another wakes it, with no lost
// wake-ups: the sleeper announces itself in asleep before it re-checks its
// condition, and the waker sends a token only if it clears asleep.
type parker struct {
	asleep atomic.Bool
	ch     chan struct{} // capacity 1: the waker never blocks
}

// sleep parks until ready() holds; ready is re-checked after asleep is
// set, so a wake between the caller's last check and the sleep is not lost.
// A token is not proof of readiness: a waker can be preempted between
// making the condition true and calling wake, so its wake may land in the
// sleeper's next wait (a helper finishing job n wakes the caller while it
// waits for job n+1). sleep therefore re-checks after every token.
func (p *parker) sleep(ready func() bool) {
	for {
		p.asleep.Store(true)
		if ready() && p.asleep.CompareAndSwap(true, false) {
			return
		}
		// Either not ready, or a waker cleared asleep and sends a token:
		// take it, then look again.
		<-p.ch
		if ready() {
			return
		}
	}
}

// wake wakes the goroutine if it is parked or about to park.
func (p *parker) wake() {
	if p.asleep.CompareAndSwap(true, false) {
		p.ch <- struct{}{}
	}
}

// spinUntil polls ready for up to d, yielding the processor between polls so
// other goroutines run, and reports whether it became true.
func spinUntil(d time.Duration, ready func() bool) bool {
	var start time.Time
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if i&15 == 15 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > d {
				return false
			}
			runtime.Gosched()
		}
	}
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
	w.ctl.Store(ctlQuit)
	for i := range w.park {
		w.park[i].wake()
	}
	w.quit.Wait()
}

// helper runs the jobs it takes part in until Close. It reads nothing of
// a job but ctl unless its id is among the job's helpers, so a helper that
// misses a job it has no part in never races with the caller's next one.
func (w *Workers) helper(id int) {
	defer w.quit.Done()
	p := &w.park[id-1]
	// ctl was 0 when NewWorkers started this goroutine; loading it here
	// instead could already see the first job and then wait past it.
	var seen uint64
	changed := func() bool { return w.ctl.Load() != seen }
	for {
		if !spinUntil(helperSpin, changed) {
			p.sleep(changed)
		}
		seen = w.ctl.Load()
		if seen == ctlQuit {
			return
		}
		if int(seen&(1<<ctlShift-1)) < id {
			continue
		}
		w.drain(id)
		if w.pending.Add(-1) == 0 {
			w.caller.wake()
		}
	}
}

// region is a run of tiles [lo, hi) packed in one word, lo<<32 | hi, so
// that its owner taking from the front and a thief taking from the back
// never both get the same tile.
type region struct {
	v atomic.Uint64
	_ [56]byte
}

func (r *region) set(lo, hi int) { r.v.Store(uint64(lo)<<32 | uint64(hi)) }

// take claims the first tile of the region (back: the last one) and
// reports false when it is empty.
func (r *region) take(back bool) (int, bool) {
	for {
		v := r.v.Load()
		lo, hi := v>>32, v&(1<<32-1)
		if lo >= hi {
			return 0, false
		}
		nv, t := (lo+1)<<32|hi, lo
		if back {
			nv, t = lo<<32|(hi-1), hi-1
		}
		if r.v.CompareAndSwap(v, nv) {
			return int(t), true
		}
	}
}

// drain runs worker id's region front to back, then takes tiles from the
// back of the others' until every tile is claimed. Contiguous regions keep
// each core on one ascending run of a weight matrix: with tiles dealt out
// alternately a core jumps to a new address every tile and its hardware
// prefetcher starts over (F32 decode ran 5-10% slower with 8 or 16 tiles
// per worker dealt that way than with 4), while stealing single tiles at
// the end keeps the cores' finish times a tile apart.
func (w *Workers) drain(id int) {
	for {
		t, ok := w.regions[id].take(false)
		if !ok {
			break
		}
		w.runTile(id, t)
	}
	for k := 1; k < w.nreg; k++ {
		r := &w.regions[(id+k)%w.nreg]
		for {
			t, ok := r.take(true)
			if !ok {
				break
			}
			w.runTile(id, t)
		}
	}
}

// run executes w.job over ntiles tiles on all workers; w.mu is held.
// Worker i starts on the i-th of helpers+1 equal contiguous shares.
func (w *Workers) run(ntiles int) {
	helpers := min(w.n-1, ntiles-1)
	w.nreg = helpers + 1
	for i := range w.nreg {
		w.regions[i].set(ntiles*i/w.nreg, ntiles*(i+1)/w.nreg)
	}
	if helpers <= 0 {
		w.drain(0)
		w.job = job{}
		return
	}
	w.pending.Store(int32(helpers))
	// Publishing ctl orders the job's fields before any helper reads them.
	seq := w.ctl.Load()>>ctlShift + 1
	w.ctl.Store(seq<<ctlShift | uint64(helpers))
	for i := 0; i < helpers; i++ {
		w.park[i].wake()
	}
	w.drain(0)
	done := func() bool { return w.pending.Load() == 0 }
	if !spinUntil(callerSpin, done) {
		w.caller.sleep(done)
	}
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

// setMats makes j a job over the rows of every matrix in Ws (outputs ys),
// in tiles of j.nc rows that never span two matrices, and returns the
// number of tiles.
func (j *job) setMats(ys [][]float32, Ws []Matrix) int {
	j.nmat = len(Ws)
	tiles := 0
	for i, W := range Ws {
		j.mats[i], j.ys[i] = W, ys[i]
		tiles += ceilDiv(W.Rows, j.nc)
		j.tend[i] = tiles
	}
	return tiles
}

// matTile is tile t of a matrix job: its matrix, output and weight rows
// [n0, n1), out of j.w alone or, with nmat > 0, out of j.mats.
func (j *job) matTile(t int) (W Matrix, y []float32, n0, n1 int) {
	W, y = j.w, j.y
	if j.nmat > 0 {
		i := 0
		for t >= j.tend[i] {
			i++
		}
		if i > 0 {
			t -= j.tend[i-1]
		}
		W, y = j.mats[i], j.ys[i]
	}
	n0 = t * j.nc
	return W, y, n0, min(n0+j.nc, W.Rows)
}

func (w *Workers) runTile(id, t int) {
	j := &w.job
	s := w.scratch[id]
	switch j.kind {
	case jobPackA:
		r0 := t * j.nc * gemmMR
		cPackA(j.path, j.x, j.w.Cols, r0, min(r0+j.nc*gemmMR, j.m), w.packA)
	case jobGemm:
		n0 := t * j.nc
		n1 := min(n0+j.nc, j.w.Rows)
		pb := s[:(j.nc+32)*gemmKC]
		cGemmTile(j.path, j.w, w.packA, j.m, j.y, n0, n1, pb, s[len(pb):])
	case jobGemv, jobStream:
		W, y, n0, n1 := j.matTile(t)
		if j.kind == jobGemv {
			cGemvTile(j.path, W, j.x, j.m, y, n0, n1, s)
		} else {
			cStreamTile(j.path, W, j.x, j.m, y, n0, n1, s)
		}
	case jobRMSNorm:
		r0 := t * j.nc
		cRMSNorm(j.path, j.y, j.x, j.weight, r0, min(r0+j.nc, j.rows), j.dim, j.eps)
	case jobAttn:
		task := w.tasks[t]
		sq := j.seqs[task.seq]
		cAttnTask(j.path, j.out, j.q, j.l, j.heads, sq.BlockTable, sq, task.kvh, task.i0, task.i1, j.scale, s)
	case jobCascade:
		w.cascadeTile(t, s)
	case jobQmm, jobMMBF16, jobPackABF16, jobGemmBF16, jobQuantAct:
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
// its elements; time it to get the machine's read bandwidth. Each worker
// reads its share as eight interleaved streams (tk_read_sum), which reach
// more of the bandwidth than one; for the full figure buf should be in huge
// pages (internal/hugemem), as the model's weights are.
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
