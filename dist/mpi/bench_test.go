package mpi

// Benchmarks across processes, through the same re-exec as the tests: each
// sub-benchmark runs one mpirun whose rank 0 times a fixed number of
// iterations and prints "bench NAME NS" (nanoseconds per iteration); the parent
// reports it. The mpirun is run once per sub-benchmark and its figures are
// reported for every b.N the framework asks for, so -bench . costs one launch
// per row (about a second each) and never scales with b.N. The iteration
// column the framework prints is therefore meaningless; ns/op (and the µs
// metric beside it) is rank 0's per-iteration figure over its own fixed loop.

import (
	"fmt"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	// rankStateLen is the per-rank state vector of the gather point (int64s).
	rankStateLen = 16
	// storiesDim is stories260K's model width, the per-token row of the MLP's
	// hidden-state collectives.
	storiesDim = 64
	// benchAllgatherIters and benchMLPIters are the timed iterations per row.
	benchAllgatherIters = 2000
	benchMLPIters       = 500
)

// mlpTokens are the per-rank token counts the MLP collectives are timed at.
var mlpTokens = []int{1, 8, 64}

var benchLine = regexp.MustCompile(`(?m)^bench (\S+) (\d+(?:\.\d+)?)$`)

// runBench runs one benchmark worker job and returns rank 0's figures by name
// (nanoseconds per iteration).
func runBench(b *testing.B, np int, mode string, iters int) map[string]float64 {
	b.Helper()
	out, err := runMPI(b, np, mode, fmt.Sprintf("%s=%d", itersEnv, iters))
	require.NoError(b, err, "mpirun -np %d:\n%s", np, out)
	res := map[string]float64{}
	for _, m := range benchLine.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(b, err)
		res[m[1]] = v
	}
	return res
}

// BenchmarkAllgatherRankState: one AllgatherInt64 of a 16-int64 rank state
// per rank, the gather point's per-iteration collective, across 2 and 4
// processes (4 oversubscribes a 2-core machine). ns/op is one allgather.
func BenchmarkAllgatherRankState(b *testing.B) {
	mpirunPath(b)
	for _, np := range []int{2, 4} {
		var res map[string]float64 // measured once, reported on every call
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			if res == nil {
				res = runBench(b, np, "bench-allgather", benchAllgatherIters)
			}
			ns, ok := res["allgather"]
			require.True(b, ok, "rank 0 reported no allgather figure: %v", res)
			b.ReportMetric(ns, "ns/op")
			b.ReportMetric(ns/1e3, "us/allgather")
		})
	}
}

// BenchmarkMLPCollectives: one layer's MLP collectives on the CPU as the
// sharded CPURunner issues them, an AllgathervFloat32 of every rank's hidden
// states (tokens × 64 floats per rank) followed by a ReduceScatterSumFloat32V
// returning each rank its own tokens,
// across 2 and 4 processes at 1, 8 and 64 tokens per rank. ns/op is one layer.
func BenchmarkMLPCollectives(b *testing.B) {
	mpirunPath(b)
	for _, np := range []int{2, 4} {
		var res map[string]float64
		for _, tokens := range mlpTokens {
			b.Run(fmt.Sprintf("np%d/tokens%d", np, tokens), func(b *testing.B) {
				if res == nil {
					res = runBench(b, np, "bench-mlp", benchMLPIters)
				}
				ns, ok := res[fmt.Sprintf("mlp-t%d", tokens)]
				require.True(b, ok, "rank 0 reported no figure for %d tokens: %v", tokens, res)
				b.ReportMetric(ns, "ns/op")
				b.ReportMetric(ns/1e3, "us/layer")
			})
		}
	}
}

// benchAllgatherWorker times AllgatherInt64 of a rankStateLen vector.
func benchAllgatherWorker(t *testing.T, w *World) {
	n := iters(t)
	local := make([]int64, rankStateLen)
	for i := range local {
		local[i] = int64(w.Rank()*rankStateLen + i)
	}
	all := make([]int64, w.Size()*rankStateLen)
	ns := timeIters(t, w, n, func() error { return w.AllgatherInt64(local, all) })
	require.Equal(t, int64((w.Size()-1)*rankStateLen), all[(w.Size()-1)*rankStateLen])
	if w.Rank() == 0 {
		fmt.Printf("bench allgather %.1f\n", ns)
	}
}

// benchMLPWorker times one layer's allgatherv + reduce-scatter(v) at each
// of mlpTokens tokens per rank.
func benchMLPWorker(t *testing.T, w *World) {
	n := iters(t)
	for _, tokens := range mlpTokens {
		per := tokens * storiesDim
		local := make([]float32, per)
		for i := range local {
			local[i] = float32(w.Rank())
		}
		counts := make([]int, w.Size())
		for r := range counts {
			counts[r] = per
		}
		all := make([]float32, w.Size()*per)
		out := make([]float32, per)
		ns := timeIters(t, w, n, func() error {
			if err := w.AllgathervFloat32(local, counts, all); err != nil {
				return err
			}
			return w.ReduceScatterSumFloat32V(all, counts, out)
		})
		if w.Rank() == 0 {
			fmt.Printf("bench mlp-t%d %.1f\n", tokens, ns)
		}
	}
}

// timeIters runs f n/10 times to warm up, synchronises the ranks, then times
// n runs; it returns nanoseconds per run as this rank saw it.
func timeIters(t *testing.T, w *World, n int, f func() error) float64 {
	for range max(n/10, 1) {
		require.NoError(t, f())
	}
	require.NoError(t, w.Barrier())
	start := time.Now()
	for range n {
		require.NoError(t, f())
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// idleWait is how long rank 0 keeps the others waiting in
// TestMPIIdleGatherCPU's gathers.
const idleWait = 500 * time.Millisecond

var idleCPULine = regexp.MustCompile(`(?m)^rank (\d+) (blocking|patient) wait cpu (\S+) of wall (\S+)$`)

// TestMPIIdleGatherCPU: while rank 0 keeps them waiting, the other ranks
// burn a core in the blocking allgather (MPI polls) and next to none in
// the patient one (it sleeps between polls). The CPU times are logged, not
// asserted (they are the machine's); the gathers' results are checked.
func TestMPIIdleGatherCPU(t *testing.T) {
	mpirunPath(t)
	out, err := runMPI(t, 2, "idle-cpu")
	require.NoError(t, err, out)
	ms := idleCPULine.FindAllStringSubmatch(out, -1)
	require.Len(t, ms, 2, out)
	for _, m := range ms {
		t.Logf("rank %s, %s allgather waiting for rank 0: CPU %s in %s", m[1], m[2], m[3], m[4])
	}
}

// idleCPUWorker: rank 1 waits idleWait for rank 0 in a blocking, then a
// patient allgather, and reports its CPU time during each.
func idleCPUWorker(t *testing.T, w *World) {
	local, all := []int64{int64(w.Rank())}, make([]int64, w.Size())
	for _, mode := range []string{"blocking", "patient"} {
		require.NoError(t, w.Barrier())
		if w.Rank() == 0 {
			time.Sleep(idleWait)
		}
		cpu0, start := cpuTime(t), time.Now()
		gather := w.AllgatherInt64
		if mode == "patient" {
			gather = w.AllgatherInt64Patient
		}
		require.NoError(t, gather(local, all))
		require.Equal(t, []int64{0, 1}, all)
		if w.Rank() == 1 {
			fmt.Printf("rank 1 %s wait cpu %v of wall %v\n", mode, (cpuTime(t) - cpu0).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		}
	}
}

// patientLate is how long rank 0 keeps rank 1 waiting in
// TestMPIPatientGatherLatency. Without its cap, a backoff doubling from
// 10 µs polls at about 164 and 328 ms: rank 1 would return about 128 ms
// after rank 0 enters at 200 ms (at 300 ms only about 28 ms, too close to
// the bound to tell).
const patientLate = 200 * time.Millisecond

// patientBound is the most rank 1 may return after rank 0 entered: the
// capped backoff polls every PatientPoll (1 ms), and the rest is margin
// for a loaded 2-core machine.
const patientBound = 100 * time.Millisecond

var patientLine = regexp.MustCompile(`(?m)^rank 1 patient gather returned (\d+) us after rank 0 entered$`)

// TestMPIPatientGatherLatency: the patient allgather's sleeps are capped,
// so a rank that waited long still returns within a few polls of its
// peer's arrival, not as late again as it waited.
func TestMPIPatientGatherLatency(t *testing.T) {
	mpirunPath(t)
	out, err := runMPI(t, 2, "patient-latency")
	require.NoError(t, err, out)
	m := patientLine.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	us, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	late := time.Duration(us) * time.Microsecond
	t.Logf("rank 1 returned %v after rank 0 entered (rank 0 came %v late)", late, patientLate)
	require.Less(t, late, patientBound, "rank 1 woke long after rank 0 entered: is the backoff capped at PatientPoll?")
}

// patientLatencyWorker: rank 1 waits in the patient allgather for rank 0,
// which enters patientLate later; rank 1 reports how long after rank 0's
// entry it returned (one host: both read the same wall clock).
func patientLatencyWorker(t *testing.T, w *World) {
	local, all := []int64{int64(w.Rank())}, make([]int64, w.Size())
	require.NoError(t, w.Barrier())
	var entered int64
	if w.Rank() == 0 {
		time.Sleep(patientLate)
		entered = time.Now().UnixNano()
	}
	require.NoError(t, w.AllgatherInt64Patient(local, all))
	returned := time.Now().UnixNano()
	require.Equal(t, []int64{0, 1}, all)
	times := make([]int64, 2*w.Size())
	require.NoError(t, w.AllgatherInt64([]int64{entered, returned}, times))
	if w.Rank() == 1 {
		fmt.Printf("rank 1 patient gather returned %d us after rank 0 entered\n", (times[3]-times[0])/1000)
	}
}

// cpuTime is this process's user + system CPU time.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
