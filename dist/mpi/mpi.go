// Package mpi binds the few MPI calls turnstile's ranks need (init with a thread
// level, rank and size, communicator duplication, allgather(v), gatherv,
// broadcast, all-reduce, reduce-scatter(v), barrier, abort, finalize) through
// dlopen/dlsym into a C table of function pointers, so that building turnstile
// needs no MPI headers or libraries and a machine without MPI runs everything
// else; a missing library or symbol is an error naming it.
//
// The binding targets Open MPI's ABI (libmpi.so.40, Open MPI 4.x): its handles
// are pointers and its predefined handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM,
// ...) are the addresses of exported objects such as ompi_mpi_comm_world.
//
// Every collective runs on the World's communicator (MPI_COMM_WORLD, or a
// duplicate from Dup for collectives that run concurrently with the world's),
// is one C call, and is blocking: the buffers are Go memory lent to MPI for the
// duration of the call only. Every rank must call the same collectives in the
// same order with matching shapes; a rank that does not leaves its peers
// waiting, which is why callers need a watchdog and Abort.
//
// The collectives are those attention-DP needs across processes: int64
// allgather, and a patient one (AllgatherInt64Patient) that polls a
// nonblocking allgather and sleeps, so an idle rank does not spin a core;
// float32 allgatherv; byte gatherv to a root; byte broadcast; float32
// all-reduce, reduce-scatter-block and variable reduce-scatter; barrier. A
// World from Dup has its own lock, for collectives that run concurrently
// with the world's (the sharded MLP's on the runner's goroutine). Every
// argument is checked in Go before the call.
package mpi

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "calls.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/turnstile-llm/turnstile/internal/dl"
)

// Library is the soname of Open MPI 4.x's C library, the one Open loads first.
const Library = "libmpi.so.40"

// libraryNames are the names Open tries, in order.
func libraryNames() []string { return []string{Library, "libmpi.so"} }

// ErrLibraryNotFound is wrapped by the error Open returns when none of the
// library's candidate names could be loaded.
var ErrLibraryNotFound = dl.ErrLibraryNotFound

// ErrMissingSymbol is wrapped by the error Open returns when the loaded library
// lacks an entry point or predefined handle turnstile needs (for example an MPI
// that is not Open MPI).
var ErrMissingSymbol = dl.ErrMissingSymbol

// ErrClosed is wrapped by every call on a World after Close.
var ErrClosed = errors.New("mpi: world closed")

// ThreadLevel is an MPI thread support level (MPI_THREAD_*), in Open MPI's
// numbering.
type ThreadLevel int

// The MPI thread support levels, lowest first.
const (
	ThreadSingle     ThreadLevel = C.TSM_THREAD_SINGLE
	ThreadFunneled   ThreadLevel = C.TSM_THREAD_FUNNELED
	ThreadSerialized ThreadLevel = C.TSM_THREAD_SERIALIZED
	ThreadMultiple   ThreadLevel = C.TSM_THREAD_MULTIPLE
)

func (l ThreadLevel) String() string {
	switch l {
	case ThreadSingle:
		return "MPI_THREAD_SINGLE"
	case ThreadFunneled:
		return "MPI_THREAD_FUNNELED"
	case ThreadSerialized:
		return "MPI_THREAD_SERIALIZED"
	case ThreadMultiple:
		return "MPI_THREAD_MULTIPLE"
	}
	return fmt.Sprintf("MPI thread level %d", int(l))
}

// Error is a failed MPI call.
type Error struct {
	Op      string // the MPI entry, e.g. "MPI_Allgather"
	Code    int    // the MPI error code
	Message string // MPI_Error_string's text, or "" when it had none
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("mpi: %s: error code %d", e.Op, e.Code)
	}
	return fmt.Sprintf("mpi: %s: %s (error code %d)", e.Op, e.Message, e.Code)
}

// World is MPI_COMM_WORLD of an initialised MPI, or a duplicate of it (Dup).
// There is at most one MPI_COMM_WORLD World per process: MPI can be initialised
// once, and after Close (MPI_Finalize) never again.
//
// Collectives may be called from any goroutine (Open asks for
// MPI_THREAD_MULTIPLE and refuses a level below MPI_THREAD_SERIALIZED); the
// World serialises them, since collectives on one communicator must be issued in
// one order. Collectives on two Worlds (the original and a Dup, or two Dups)
// proceed concurrently, each under its own lock. Abort does not wait for a
// collective in flight.
type World struct {
	lib  unsafe.Pointer // the dlopen handle; never closed once MPI_Init ran
	name string         // the library name that loaded
	// t lives in Go memory and holds only C function pointers and C handle
	// addresses, so it may be passed to C for each call. t.comm is this
	// World's communicator.
	t C.tsm_mpi

	rank, size int
	level      ThreadLevel

	// origin is the MPI_COMM_WORLD World this one was duplicated from, nil
	// for that World itself: its finalized flag is the process's.
	origin *World

	mu        sync.Mutex  // serialises collectives and Close; a Dup has its own
	closed    bool        // guarded by mu
	finalized atomic.Bool // MPI_Finalize was called: Abort must not call MPI; set on the origin only
}

// Open loads Open MPI's libmpi (libmpi.so.40, then libmpi.so), initialises MPI
// asking for MPI_THREAD_MULTIPLE, and returns MPI_COMM_WORLD with errors
// returned as values (MPI_ERRORS_RETURN) instead of aborting the job. Without
// the library the error wraps ErrLibraryNotFound; with a library lacking an
// entry point, ErrMissingSymbol naming the symbol. MPI that is already
// initialised or finalised in this process is an error: there is one World per
// process.
func Open() (*World, error) { return openWith(libraryNames()) }

// openWith is Open with the library's candidate names.
func openWith(names []string) (*World, error) {
	w := &World{}
	if err := w.load(names); err != nil {
		return nil, err
	}
	if err := w.init(); err != nil {
		return nil, err
	}
	return w, nil
}

// load dlopens the first loadable of names and resolves w.t from it.
func (w *World) load(names []string) error {
	// RTLD_GLOBAL: the components Open MPI loads later resolve its symbols.
	lib, err := dl.Open("mpi", names, true)
	if err != nil {
		return err
	}
	h := lib.Handle
	name := lib.Name
	var missing *C.char
	if C.tsm_load(h, &w.t, &missing) != 0 {
		lib.Close()
		return fmt.Errorf("mpi: %s lacks symbol %s: %w", name, C.GoString(missing), ErrMissingSymbol)
	}
	w.lib, w.name = h, name
	w.t.comm = w.t.comm_world
	return nil
}

// init runs MPI_Init_thread once for the process and reads rank and size.
func (w *World) init() error {
	var flag C.int
	if err := w.check("MPI_Finalized", C.tsm_finalized(&w.t, &flag)); err != nil {
		return err
	}
	if flag != 0 {
		return fmt.Errorf("mpi: %s: MPI was finalized in this process and cannot be initialised again", w.name)
	}
	if err := w.check("MPI_Initialized", C.tsm_initialized(&w.t, &flag)); err != nil {
		return err
	}
	if flag != 0 {
		return fmt.Errorf("mpi: %s: MPI is already initialised in this process: one World per process", w.name)
	}
	var provided C.int
	if err := w.check("MPI_Init_thread", C.tsm_init_thread(&w.t, C.TSM_THREAD_MULTIPLE, &provided)); err != nil {
		return err
	}
	w.level = ThreadLevel(provided)
	// From here on MPI has started its own threads: the library stays mapped.
	fail := func(err error) error {
		w.finalized.Store(true)
		C.tsm_finalize(&w.t)
		return err
	}
	if w.level < ThreadSerialized {
		return fail(fmt.Errorf("mpi: %s provides %v, asked for %v: goroutines move between OS threads, so at least %v is needed",
			w.name, w.level, ThreadMultiple, ThreadSerialized))
	}
	if err := w.check("MPI_Comm_set_errhandler", C.tsm_errors_return(&w.t)); err != nil {
		return fail(err)
	}
	var r, n C.int
	if err := w.check("MPI_Comm_rank", C.tsm_rank(&w.t, &r)); err != nil {
		return fail(err)
	}
	if err := w.check("MPI_Comm_size", C.tsm_size(&w.t, &n)); err != nil {
		return fail(err)
	}
	w.rank, w.size = int(r), int(n)
	return nil
}

// check turns an MPI return code into nil or an *Error with MPI's message.
func (w *World) check(op string, code C.int) error {
	if code == 0 { // MPI_SUCCESS
		return nil
	}
	e := &Error{Op: op, Code: int(code)}
	var buf [C.TSM_MAX_ERROR_STRING]C.char
	var n C.int
	if C.tsm_error_string(&w.t, code, &buf[0], &n) == 0 && n > 0 {
		e.Message = C.GoStringN(&buf[0], n)
	}
	return e
}

// Library is the library name that was loaded.
func (w *World) Library() string { return w.name }

// Rank is this process's rank in MPI_COMM_WORLD, in [0, Size()).
func (w *World) Rank() int { return w.rank }

// Size is the number of ranks in MPI_COMM_WORLD.
func (w *World) Size() int { return w.size }

// ThreadLevel is the thread support MPI_Init_thread provided.
func (w *World) ThreadLevel() ThreadLevel { return w.level }

// mpiFinalized reports whether MPI_Finalize ran in this process, through
// this World or the one it was duplicated from.
func (w *World) mpiFinalized() bool {
	if w.origin != nil {
		return w.origin.finalized.Load()
	}
	return w.finalized.Load()
}

// call runs one MPI call under the World's lock, refusing it after Close (of
// this World, or for a Dup of its origin, since no MPI call is allowed after
// MPI_Finalize).
func (w *World) call(op string, f func() C.int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.mpiFinalized() {
		return fmt.Errorf("mpi: %s: %w", op, ErrClosed)
	}
	return w.check(op, f())
}

// Dup duplicates this World's communicator (MPI_Comm_dup, collective: every
// rank must call it) into a new World with the same ranks and library and its
// own lock, so that its collectives and this World's may run concurrently on
// different goroutines without one's blocking call holding up the other's.
// Closing the Dup frees its communicator (MPI_Comm_free, also collective) and
// never finalises MPI. Close every Dup before the MPI_COMM_WORLD World: closing
// that one finalises MPI and makes every Dup's calls fail with ErrClosed.
func (w *World) Dup() (*World, error) {
	var comm C.tsm_handle
	if err := w.call("MPI_Comm_dup", func() C.int { return C.tsm_comm_dup(&w.t, &comm) }); err != nil {
		return nil, err
	}
	origin := w.origin
	if origin == nil {
		origin = w
	}
	d := &World{lib: w.lib, name: w.name, t: w.t, rank: w.rank, size: w.size, level: w.level, origin: origin}
	d.t.comm = comm
	// The duplicate inherits the error handler; setting it again keeps
	// "errors are values" true whatever the library does.
	if err := d.check("MPI_Comm_set_errhandler", C.tsm_errors_return(&d.t)); err != nil {
		C.tsm_comm_free(&d.t)
		return nil, err
	}
	return d, nil
}

// AllgatherInt64 gathers every rank's local vector into all, rank r's at
// all[r*len(local) : (r+1)*len(local)]. Every rank passes the same len(local);
// len(all) must be Size()*len(local). Both slices are only borrowed.
func (w *World) AllgatherInt64(local, all []int64) error {
	if err := checkAllgather(w.size, len(local), len(all)); err != nil {
		return err
	}
	return w.call("MPI_Allgather", func() C.int {
		return C.tsm_allgather_int64(&w.t, ptr(local), C.int(len(local)), ptr(all))
	})
}

// PatientPoll is the longest sleep between polls of AllgatherInt64Patient:
// the most it adds to noticing that the last peer arrived.
const PatientPoll = time.Millisecond

// AllgatherInt64Patient is AllgatherInt64 for a gather that may wait long
// (an idle deployment's processes waiting for process 0 to get work, possibly for
// hours): it polls a nonblocking allgather (MPI_Iallgather, MPI_Test) and
// sleeps between polls, up to PatientPoll, so the waiting thread sleeps
// instead of spinning a core as MPI's blocking collectives do. MPI never
// matches a nonblocking collective with a blocking one: every rank must
// call AllgatherInt64Patient at the same point.
func (w *World) AllgatherInt64Patient(local, all []int64) error {
	if err := checkAllgather(w.size, len(local), len(all)); err != nil {
		return err
	}
	return w.call("MPI_Iallgather", func() C.int {
		return C.tsm_allgather_int64_patient(&w.t, ptr(local), C.int(len(local)), ptr(all), C.long(PatientPoll/time.Microsecond))
	})
}

// AllgathervFloat32 gathers every rank's local floats into all, rank by rank:
// counts[r] is rank r's number of floats (zero allowed), so rank r's lie at
// all[sum(counts[:r]) : sum(counts[:r+1])]. Every rank passes the same counts;
// len(counts) must be Size(), len(local) counts[Rank()], len(all) sum(counts).
// All slices are only borrowed.
func (w *World) AllgathervFloat32(local []float32, counts []int, all []float32) error {
	if err := checkAllgatherv(w.rank, w.size, len(local), counts, len(all)); err != nil {
		return err
	}
	ccounts, displs := countsDispls(counts)
	return w.call("MPI_Allgatherv", func() C.int {
		return C.tsm_allgatherv_float(&w.t, ptr(local), C.int(len(local)), ptr(all), &ccounts[0], &displs[0])
	})
}

// GathervBytes gathers every rank's local bytes into root's all, rank by rank:
// counts[r] is rank r's byte count (zero allowed), so on root rank r's bytes
// lie at all[sum(counts[:r]) : sum(counts[:r+1])]. Every rank passes the same
// counts and root; len(counts) must be Size() and len(local) counts[Rank()]. On
// root len(all) must be sum(counts); on the other ranks all is ignored (nil is
// fine). All slices are only borrowed.
//
// When every count is zero no rank calls MPI: the counts are identical on every
// rank, so every rank skips alike and the ranks stay matched.
func (w *World) GathervBytes(local []byte, counts []int, all []byte, root int) error {
	if err := checkRootOp("MPI_Gatherv", root, w.size); err != nil {
		return err
	}
	total, err := checkCounts("MPI_Gatherv", "local", w.rank, w.size, len(local), counts)
	if err != nil {
		return err
	}
	if w.rank != root {
		all = nil
	} else if len(all) != total {
		return fmt.Errorf("mpi: MPI_Gatherv: len(all) = %d on root %d, want sum(counts) = %d", len(all), root, total)
	}
	if total == 0 {
		return w.call("MPI_Gatherv", func() C.int { return 0 })
	}
	ccounts, displs := countsDispls(counts)
	return w.call("MPI_Gatherv", func() C.int {
		return C.tsm_gatherv_bytes(&w.t, ptr(local), C.int(len(local)), ptr(all), &ccounts[0], &displs[0], C.int(root))
	})
}

// BcastBytes copies root's buf into every other rank's buf. Every rank passes a
// buf of the same length. buf is only borrowed.
func (w *World) BcastBytes(buf []byte, root int) error {
	if err := checkCount("MPI_Bcast", "buf", len(buf)); err != nil {
		return err
	}
	if err := checkRoot(root, w.size); err != nil {
		return err
	}
	return w.call("MPI_Bcast", func() C.int {
		return C.tsm_bcast_bytes(&w.t, ptr(buf), C.int(len(buf)), C.int(root))
	})
}

// AllreduceSumFloat32 replaces buf on every rank by the element-wise sum of
// every rank's buf. Every rank passes the same len(buf). buf is only borrowed.
func (w *World) AllreduceSumFloat32(buf []float32) error {
	if err := checkCount("MPI_Allreduce", "buf", len(buf)); err != nil {
		return err
	}
	return w.call("MPI_Allreduce", func() C.int {
		return C.tsm_allreduce_sum_float(&w.t, ptr(buf), C.int(len(buf)))
	})
}

// ReduceScatterSumFloat32 sums send element-wise across ranks and gives rank r
// block r of the sum: recv = sum over ranks of send[r*len(recv) : (r+1)*len(recv)].
// Every rank passes the same len(recv); len(send) must be Size()*len(recv). Both
// slices are only borrowed.
func (w *World) ReduceScatterSumFloat32(send, recv []float32) error {
	if err := checkReduceScatter(w.size, len(send), len(recv)); err != nil {
		return err
	}
	return w.call("MPI_Reduce_scatter_block", func() C.int {
		return C.tsm_reduce_scatter_sum_float(&w.t, ptr(send), ptr(recv), C.int(len(recv)))
	})
}

// ReduceScatterSumFloat32V sums send element-wise across ranks and gives each
// rank its own block of the sum, the blocks of variable length: counts[r] is
// rank r's number of floats (zero allowed), and rank r receives
// recv = sum over ranks of send[sum(counts[:r]) : sum(counts[:r+1])]. Every
// rank passes the same counts; len(counts) must be Size(), len(send)
// sum(counts) and len(recv) counts[Rank()]. Both slices are only borrowed.
//
// When every count is zero no rank calls MPI: the counts are identical on every
// rank, so every rank skips alike and the ranks stay matched.
func (w *World) ReduceScatterSumFloat32V(send []float32, counts []int, recv []float32) error {
	total, err := checkCounts("MPI_Reduce_scatter", "recv", w.rank, w.size, len(recv), counts)
	if err != nil {
		return err
	}
	if len(send) != total {
		return fmt.Errorf("mpi: MPI_Reduce_scatter: len(send) = %d, want sum(counts) = %d", len(send), total)
	}
	if total == 0 {
		return w.call("MPI_Reduce_scatter", func() C.int { return 0 })
	}
	ccounts, _ := countsDispls(counts)
	return w.call("MPI_Reduce_scatter", func() C.int {
		return C.tsm_reduce_scatter_v_sum_float(&w.t, ptr(send), ptr(recv), &ccounts[0])
	})
}

// Barrier returns once every rank has entered it.
func (w *World) Barrier() error {
	return w.call("MPI_Barrier", func() C.int { return C.tsm_barrier(&w.t) })
}

// Abort asks MPI to terminate every rank of the job with exit code code, and
// does not return: if MPI returns (or was already finalized) the process exits
// with code (1 when code is 0, so that an abort is never a success). It does not
// wait for a collective in flight on another goroutine.
func (w *World) Abort(code int) {
	exit := code
	if exit == 0 {
		exit = 1
	}
	if !w.mpiFinalized() {
		C.tsm_abort(&w.t, C.int(code))
	}
	os.Exit(exit)
}

// Close finalises MPI (MPI_Finalize, which every rank must call), or on a Dup
// frees its communicator (MPI_Comm_free, which every rank must call too) and
// leaves MPI running. It is idempotent: later calls return nil, and every
// collective after it fails with ErrClosed. A Dup closed after its origin
// calls nothing: MPI_Finalize released its communicator. The library stays
// mapped, since MPI's threads may still run its code.
func (w *World) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.origin != nil {
		if w.mpiFinalized() {
			return nil
		}
		return w.check("MPI_Comm_free", C.tsm_comm_free(&w.t))
	}
	w.finalized.Store(true)
	return w.check("MPI_Finalize", C.tsm_finalize(&w.t))
}

// ptr is the address of s's first element, or nil for an empty slice (MPI reads
// no buffer for a zero count).
func ptr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// checkCount refuses a length that does not fit MPI's int count.
func checkCount(op, what string, n int) error {
	if n > math.MaxInt32 {
		return fmt.Errorf("mpi: %s: len(%s) = %d exceeds MPI's int count limit %d", op, what, n, math.MaxInt32)
	}
	return nil
}

func checkRoot(root, size int) error { return checkRootOp("MPI_Bcast", root, size) }

func checkRootOp(op string, root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("mpi: %s: root %d outside [0, %d)", op, root, size)
	}
	return nil
}

func checkAllgather(size, local, all int) error {
	if err := checkCount("MPI_Allgather", "local", local); err != nil {
		return err
	}
	if want := size * local; all != want {
		return fmt.Errorf("mpi: MPI_Allgather: len(all) = %d, want size %d × len(local) %d = %d", all, size, local, want)
	}
	return nil
}

func checkAllgatherv(rank, size, local int, counts []int, all int) error {
	total, err := checkCounts("MPI_Allgatherv", "local", rank, size, local, counts)
	if err != nil {
		return err
	}
	if all != total {
		return fmt.Errorf("mpi: MPI_Allgatherv: len(all) = %d, want sum(counts) = %d", all, total)
	}
	return nil
}

// checkCounts checks a v-collective's per-rank counts against the world and
// the length of this rank's own block (the slice named what), and returns
// their sum.
func checkCounts(op, what string, rank, size, local int, counts []int) (int, error) {
	if len(counts) != size {
		return 0, fmt.Errorf("mpi: %s: len(counts) = %d, want the world size %d", op, len(counts), size)
	}
	total := 0
	for r, n := range counts {
		if n < 0 {
			return 0, fmt.Errorf("mpi: %s: counts[%d] = %d is negative", op, r, n)
		}
		total += n
		if total > math.MaxInt32 {
			return 0, fmt.Errorf("mpi: %s: sum(counts[:%d]) = %d exceeds MPI's int displacement limit %d", op, r+1, total, math.MaxInt32)
		}
	}
	if local != counts[rank] {
		return 0, fmt.Errorf("mpi: %s: len(%s) = %d, want counts[%d] = %d", op, what, local, rank, counts[rank])
	}
	return total, nil
}

// countsDispls converts checked counts into MPI's int counts and their
// displacements (running sums).
func countsDispls(counts []int) (ccounts, displs []C.int) {
	ccounts = make([]C.int, len(counts))
	displs = make([]C.int, len(counts))
	off := 0
	for r, n := range counts {
		ccounts[r], displs[r] = C.int(n), C.int(off)
		off += n
	}
	return ccounts, displs
}

func checkReduceScatter(size, send, recv int) error {
	if err := checkCount("MPI_Reduce_scatter_block", "send", send); err != nil {
		return err
	}
	if want := size * recv; send != want {
		return fmt.Errorf("mpi: MPI_Reduce_scatter_block: len(send) = %d, want size %d × len(recv) %d = %d", send, size, recv, want)
	}
	return nil
}
