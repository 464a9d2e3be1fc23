package mpi

// Multi-process tests: the test binary re-executes itself under mpirun with
// TURNSTILE_MPI_WORKER naming what the ranks run (TestMPIWorker), and the
// parent checks the exit status and each rank's report. Bounded: mpirun gets a
// deadline and is terminated past it, so a rank stuck in a collective fails the
// test instead of hanging it.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/dist/launch"
)

const (
	// workerEnv selects the worker's job: collectives, abort, mlp-shard, bench-allgather, bench-mlp, ...
	workerEnv = "TURNSTILE_MPI_WORKER"
	// itersEnv is a benchmark worker's iteration count.
	itersEnv = "TURNSTILE_MPI_ITERS"
	// mpiDeadline bounds one mpirun.
	mpiDeadline = 60 * time.Second
	// mpiPackage is the Debian package that provides mpirun and libmpi.so.40.
	mpiPackage = "openmpi-bin"
)

// rankOK is the line each collectives worker prints when every check passed.
var rankOK = regexp.MustCompile(`(?m)^rank (\d+) ok$`)

// mpirunPath finds mpirun, skipping tb without it, or failing under CI=true,
// where the MPI tests must not skip unnoticed.
func mpirunPath(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("mpirun")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("CI=true: mpirun not on PATH (%v): install the Debian package %s (make deps does)", err, mpiPackage)
		}
		tb.Skipf("mpirun not on PATH (%v): MPI tests skip; install the Debian package %s (make deps does)", err, mpiPackage)
	}
	return p
}

// runMPI runs this test binary's TestMPIWorker in np processes under mpirun
// with the worker job mode and extra environment variables (NAME=value, also
// forwarded to every rank), and returns the combined output and mpirun's error.
func runMPI(tb testing.TB, np int, mode string, env ...string) (string, error) {
	tb.Helper()
	mpirun := mpirunPath(tb)
	exe, err := os.Executable()
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), mpiDeadline)
	defer cancel()
	env = append(env, workerEnv+"="+mode)
	args := []string{"-np", strconv.Itoa(np), "--oversubscribe", "--bind-to", "none"}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		args = append(args, "-x", name)
	}
	args = append(args, exe, "-test.run", "^TestMPIWorker$", "-test.count", "1",
		"-test.timeout", (mpiDeadline - 10*time.Second).String())
	cmd := exec.CommandContext(ctx, mpirun, args...)
	// Root runs need Open MPI's explicit consent; the shared-memory transport
	// is enough on one host and keeps Open MPI from probing networks.
	cmd.Env = append(os.Environ(),
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
		"OMPI_MCA_btl=self,vader")
	cmd.Env = append(cmd.Env, env...)
	// Past the deadline, SIGTERM lets mpirun take its ranks down; SIGKILL follows.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("mpirun -np %d (%s) ran past %v: %w", np, mode, mpiDeadline, errors.Join(err, ctx.Err()))
	}
	return string(out), err
}

// requireEveryRankOK checks that each of the np ranks printed "rank N ok"
// exactly once in out.
func requireEveryRankOK(t *testing.T, out string, np int) {
	t.Helper()
	var ranks []int
	for _, m := range rankOK.FindAllStringSubmatch(out, -1) {
		r, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	want := make([]int, np)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, ranks, "every rank reports success exactly once:\n%s", out)
}

// TestMPICollectives runs every collective across 1, 3 and 4 processes (more
// than the cores: oversubscribed) and checks each result exactly on every rank.
func TestMPICollectives(t *testing.T) {
	mpirunPath(t)
	for _, np := range []int{1, 3, 4} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			out, err := runMPI(t, np, "collectives")
			require.NoError(t, err, "mpirun -np %d:\n%s", np, out)
			requireEveryRankOK(t, out, np)
		})
	}
}

// TestMPIAbort: one rank's Abort takes the whole job down, with a non-zero
// exit status, while its peer waits in a barrier that can never complete.
func TestMPIAbort(t *testing.T) {
	start := time.Now()
	out, err := runMPI(t, 2, "abort")
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "mpirun must exit non-zero:\n%s", out)
	require.NotZero(t, ee.ExitCode(), out)
	require.Less(t, time.Since(start), mpiDeadline, "the abort must not wait for the deadline:\n%s", out)
	require.Contains(t, out, "rank 1 aborting", out)
}

// TestMPIWorker is one rank's side of the tests and benchmarks above; it skips
// unless run by them under mpirun.
func TestMPIWorker(t *testing.T) {
	mode := os.Getenv(workerEnv)
	if mode == "" {
		t.Skipf("run by TestMPICollectives and the benchmarks under mpirun (%s unset)", workerEnv)
	}
	w, err := Open()
	require.NoError(t, err)
	switch mode {
	case "collectives":
		checkCollectives(t, w)
		checkDup(t, w)
		late, err := w.Dup() // left open past MPI_Finalize
		require.NoError(t, err)
		require.NoError(t, w.Close())
		require.ErrorIs(t, late.Barrier(), ErrClosed, "no MPI call after the origin finalised")
		require.NoError(t, late.Close(), "a Dup closed after MPI_Finalize frees nothing")
		require.NoError(t, w.Close(), "Close is idempotent")
		require.ErrorIs(t, w.Barrier(), ErrClosed)
		fmt.Printf("rank %d ok\n", w.Rank())
	case "abort":
		if w.Rank() == 1 {
			fmt.Printf("rank 1 aborting\n")
			w.Abort(3)
		}
		err := w.Barrier() // never completes: rank 1 never enters it
		t.Fatalf("rank %d: barrier returned (%v) though rank 1 aborted", w.Rank(), err)
	default:
		run, ok := map[string]func(*testing.T, *World){
			"liveness": livenessWorker, "gather-route": gatherRouteWorker, "bench-gather-route": benchGatherRouteWorker,
			"bench-allgather": benchAllgatherWorker, "bench-mlp": benchMLPWorker,
			"mlp-shard": shardWorker, "idle-cpu": idleCPUWorker, "patient-latency": patientLatencyWorker, "deploy": deployWorker, "ladder": ladderWorker, "bench-step": benchStepWorker,
		}[mode]
		if !ok {
			t.Fatalf("%s=%q: unknown worker mode", workerEnv, mode)
		}
		run(t, w)
		require.NoError(t, w.Close())
	}
}

// checkCollectives checks every collective's result exactly on this rank.
func checkCollectives(t *testing.T, w *World) {
	rank, size := w.Rank(), w.Size()
	require.Equal(t, ThreadMultiple, w.ThreadLevel())
	require.Equal(t, Library, w.Library())

	// The launcher's environment agrees with MPI.
	l, err := launch.Detect(os.Getenv)
	require.NoError(t, err)
	require.True(t, l.Launched)
	require.Equal(t, rank, l.Rank)
	require.Equal(t, size, l.Size)
	require.Equal(t, rank, l.LocalRank, "one host: local rank is the world rank")
	require.NoError(t, launch.ValidateWorld(size, l))
	require.ErrorIs(t, launch.ValidateWorld(size+1, l), launch.ErrWorldMismatch)

	// Allgather of a rank-dependent vector.
	local := []int64{int64(rank), -int64(rank) - 1, 1<<40 + int64(rank)}
	all := make([]int64, size*len(local))
	require.NoError(t, w.AllgatherInt64(local, all))
	for r := range size {
		require.Equal(t, []int64{int64(r), -int64(r) - 1, 1<<40 + int64(r)}, all[r*3:r*3+3], "allgather: rank %d's block", r)
	}
	// A zero-length allgather is a valid no-op.
	require.NoError(t, w.AllgatherInt64(nil, nil))
	// The patient allgather gives the same result, also when rank 0 comes
	// late (the others poll and sleep meanwhile).
	if rank == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	clear(all)
	require.NoError(t, w.AllgatherInt64Patient(local, all))
	for r := range size {
		require.Equal(t, []int64{int64(r), -int64(r) - 1, 1<<40 + int64(r)}, all[r*3:r*3+3], "patient allgather: rank %d's block", r)
	}
	require.ErrorContains(t, w.AllgatherInt64Patient(local, all[:1]), "MPI_Allgather")

	// Allgatherv with uneven counts, rank 1's being zero.
	pattern := []int{2, 0, 3, 1}
	counts := make([]int, size)
	for r := range counts {
		counts[r] = pattern[r%len(pattern)]
	}
	mine := make([]float32, counts[rank])
	for i := range mine {
		mine[i] = float32(rank*100+i) + 0.5
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	gathered := make([]float32, total)
	require.NoError(t, w.AllgathervFloat32(mine, counts, gathered))
	off := 0
	for r, n := range counts {
		for i := range n {
			require.Equal(t, float32(r*100+i)+0.5, gathered[off+i], "allgatherv: rank %d's element %d", r, i)
		}
		off += n
	}

	// Gatherv of bytes to the last rank, rank 1's count zero; the other
	// ranks pass no receive buffer.
	root := size - 1
	payload := make([]byte, counts[rank])
	for i := range payload {
		payload[i] = byte(rank*16 + i)
	}
	var into []byte
	if rank == root {
		into = make([]byte, total)
	}
	require.NoError(t, w.GathervBytes(payload, counts, into, root))
	if rank == root {
		off := 0
		for r, n := range counts {
			for i := range n {
				require.Equal(t, byte(r*16+i), into[off+i], "gatherv: rank %d's byte %d", r, i)
			}
			off += n
		}
	}
	// Every count zero: a valid no-op that every rank skips alike.
	require.NoError(t, w.GathervBytes(nil, make([]int, size), nil, 0))
	// Root 0 with a non-empty buffer on the others, which they ignore.
	require.NoError(t, w.GathervBytes(payload, counts, make([]byte, total), 0))

	// Broadcast from the last rank (non-zero whenever size > 1).
	msg := fmt.Sprintf("from rank %d of %d", root, size)
	buf := make([]byte, 32)
	if rank == root {
		copy(buf, msg)
	}
	require.NoError(t, w.BcastBytes(buf, root))
	require.Equal(t, msg, strings.TrimRight(string(buf), "\x00"))

	// All-reduce: small integers, so the float sums are exact.
	sum := make([]float32, 5)
	for i := range sum {
		sum[i] = float32((rank + 1) * (i + 1))
	}
	require.NoError(t, w.AllreduceSumFloat32(sum))
	for i := range sum {
		require.Equal(t, float32((i+1)*size*(size+1)/2), sum[i], "allreduce element %d", i)
	}

	// Reduce-scatter-block: rank r sends send[j] = r + j and receives block
	// rank of the sum: recv[i] = Σ_r (r + rank·k + i).
	const k = 4
	send := make([]float32, size*k)
	for j := range send {
		send[j] = float32(rank + j)
	}
	recv := make([]float32, k)
	require.NoError(t, w.ReduceScatterSumFloat32(send, recv))
	for i := range recv {
		require.Equal(t, float32(size*(size-1)/2+size*(rank*k+i)), recv[i], "reduce-scatter element %d", i)
	}

	// Reduce-scatter with variable blocks, rank 1's empty: rank r sends
	// send[j] = r + j, and receives its block of the sum at offset
	// off(rank): recv[i] = Σ_r (r + off(rank) + i). Two sizes: a few floats,
	// and 64 tokens × 64 floats per block, past the point where Open MPI
	// switches algorithm.
	for _, scale := range []int{1, 64 * 64} {
		vcounts := make([]int, size)
		vtotal, off := 0, 0
		for r := range vcounts {
			vcounts[r] = pattern[r%len(pattern)] * scale
			if r < rank {
				off += vcounts[r]
			}
			vtotal += vcounts[r]
		}
		vsend := make([]float32, vtotal)
		for j := range vsend {
			vsend[j] = float32(rank + j%1000)
		}
		vrecv := make([]float32, vcounts[rank])
		require.NoError(t, w.ReduceScatterSumFloat32V(vsend, vcounts, vrecv))
		for i := range vrecv {
			require.Equal(t, float32(size*(size-1)/2+size*((off+i)%1000)), vrecv[i], "reduce-scatter-v ×%d element %d", scale, i)
		}
	}
	// Every count zero: a valid no-op that every rank skips alike.
	require.NoError(t, w.ReduceScatterSumFloat32V(nil, make([]int, size), nil))

	// Validation errors are local and identical on every rank: no rank
	// enters the collective, so nobody hangs.
	require.ErrorContains(t, w.AllgatherInt64(local, all[:1]), "len(all) = 1")
	require.ErrorContains(t, w.BcastBytes(buf, size), fmt.Sprintf("root %d outside [0, %d)", size, size))

	require.NoError(t, w.Barrier())
}

// checkDup: a duplicated communicator has the world's ranks, and its
// collectives run while a world collective is blocked on another goroutine.
// Rank 0 enters a world barrier that the other ranks join only after an
// allreduce on the duplicate, which rank 0 must complete meanwhile: were the
// two communicators (or their locks) shared, rank 0's allreduce would wait
// behind its barrier and the job would hang until mpirun's deadline.
func checkDup(t *testing.T, w *World) {
	d, err := w.Dup()
	require.NoError(t, err)
	require.Equal(t, w.Rank(), d.Rank())
	require.Equal(t, w.Size(), d.Size())

	barrier := make(chan error, 1)
	if w.Rank() == 0 {
		go func() { barrier <- w.Barrier() }()
	}
	sum := []float32{float32(w.Rank() + 1)}
	require.NoError(t, d.AllreduceSumFloat32(sum))
	require.Equal(t, float32(w.Size()*(w.Size()+1)/2), sum[0])
	if w.Rank() != 0 {
		go func() { barrier <- w.Barrier() }()
	}
	require.NoError(t, <-barrier)

	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "Close is idempotent")
	require.ErrorIs(t, d.Barrier(), ErrClosed)
	require.NoError(t, w.Barrier(), "closing the Dup leaves the world running")
}

// iters reads the benchmark worker's iteration count.
func iters(t *testing.T) int {
	n, err := strconv.Atoi(os.Getenv(itersEnv))
	require.NoError(t, err, "%s=%q", itersEnv, os.Getenv(itersEnv))
	require.Positive(t, n, "%s", itersEnv)
	return n
}
