// Package nccl binds the few NCCL calls turnstile's ranks need for device
// tensors (unique id, communicator init/destroy/abort, all-reduce, all-gather,
// reduce-scatter, broadcast, group start/end) through dlopen/dlsym into a C
// table of function pointers, so that building turnstile needs no NCCL headers
// or libraries and a machine without NCCL runs everything else; a missing
// library or symbol is an error naming it.
//
// The binding targets NCCL 2.x's C ABI (libnccl.so.2), with the prototypes
// declared here (no nccl.h). A communicator's UniqueID is made by rank 0;
// broadcasting it (over MPI) is the caller's job. Every argument is checked
// in Go before the call. It imports nothing of
// turnstile's: device buffers are CUdeviceptr values and streams CUstream
// handles, both passed as uintptr (package cuda's DevicePtr converts directly;
// 0 is the default stream). The caller keeps the CUDA context of the rank's
// device current on the calling OS thread, as NCCL requires.
//
// Every collective is one C call that enqueues work on the stream and returns:
// the buffers must stay allocated until the stream has run it. Every rank must
// call the same collectives in the same order with matching counts; a rank that
// does not leaves its peers spinning on the GPU, which is why callers need a
// watchdog, AsyncError and Abort.
//
// Status: compile-checked and tested without a GPU (loading, argument checks);
// the one-GPU all-reduce runs in scripts/gpu-check.sh, and multi-GPU use is
// unverified until a multi-GPU machine exists.
package nccl

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
	"sync/atomic"
	"unsafe"

	"github.com/turnstile-llm/turnstile/internal/dl"
)

// Library is the soname of NCCL 2.x, the one Open loads first.
const Library = "libnccl.so.2"

// libraryNames are the names Open tries, in order.
func libraryNames() []string { return []string{Library, "libnccl.so"} }

// ErrLibraryNotFound is wrapped by the error Open returns when none of the
// library's candidate names could be loaded.
var ErrLibraryNotFound = dl.ErrLibraryNotFound

// ErrMissingSymbol is wrapped by the error Open returns when the loaded library
// lacks an entry point turnstile needs (for example an NCCL older than 2.x).
var ErrMissingSymbol = dl.ErrMissingSymbol

// ErrDestroyed is wrapped by every call on a Comm after Destroy or Abort.
var ErrDestroyed = errors.New("nccl: communicator destroyed")

// DataType is an ncclDataType_t, in NCCL 2.x's numbering.
type DataType int

// The NCCL data types turnstile may pass (NCCL's ncclDataType_t values).
const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	Bfloat16 DataType = 9 // NCCL ≥ 2.10 built with CUDA ≥ 11
)

var dataTypes = [...]struct {
	name string
	size int
}{
	Int8: {"ncclInt8", 1}, Uint8: {"ncclUint8", 1},
	Int32: {"ncclInt32", 4}, Uint32: {"ncclUint32", 4},
	Int64: {"ncclInt64", 8}, Uint64: {"ncclUint64", 8},
	Float16: {"ncclFloat16", 2}, Float32: {"ncclFloat32", 4}, Float64: {"ncclFloat64", 8},
	Bfloat16: {"ncclBfloat16", 2},
}

func (d DataType) known() bool { return d >= 0 && int(d) < len(dataTypes) }

func (d DataType) String() string {
	if d.known() {
		return dataTypes[d].name
	}
	return fmt.Sprintf("ncclDataType_t(%d)", int(d))
}

// Size is the element size in bytes, or 0 for an unknown type.
func (d DataType) Size() int {
	if d.known() {
		return dataTypes[d].size
	}
	return 0
}

// Error is a failed NCCL call.
type Error struct {
	Op      string // the NCCL entry, e.g. "ncclAllReduce"
	Code    int    // the ncclResult_t
	Message string // ncclGetErrorString's text, or "" when it had none
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("nccl: %s: ncclResult_t %d", e.Op, e.Code)
	}
	return fmt.Sprintf("nccl: %s: %s (ncclResult_t %d)", e.Op, e.Message, e.Code)
}

// Lib is a loaded libnccl. It holds only the library handle and its function
// table; the library stays mapped for the life of the process, since NCCL's
// proxy threads run its code for every communicator.
type Lib struct {
	name string
	// t lives in Go memory and holds only C function pointers, so it may be
	// passed to C for each call.
	t C.tsn_nccl
}

// Open loads NCCL (libnccl.so.2, then libnccl.so) and resolves every entry
// point. Without the library the error names every candidate and wraps
// ErrLibraryNotFound; with a library lacking an entry point, ErrMissingSymbol
// naming the symbol.
func Open() (*Lib, error) { return openWith(libraryNames()) }

// openWith is Open with the library's candidate names.
func openWith(names []string) (*Lib, error) {
	lib, err := dl.Open("nccl", names, false)
	if err != nil {
		return nil, err
	}
	h := lib.Handle
	l := &Lib{name: lib.Name}
	var missing *C.char
	if C.tsn_load(h, &l.t, &missing) != 0 {
		lib.Close()
		return nil, fmt.Errorf("nccl: %s lacks symbol %s: %w", l.name, C.GoString(missing), ErrMissingSymbol)
	}
	return l, nil
}

// Library is the library name that was loaded.
func (l *Lib) Library() string { return l.name }

// check turns an ncclResult_t into nil or an *Error with NCCL's message.
func (l *Lib) check(op string, code C.int) error {
	if code == C.TSN_SUCCESS {
		return nil
	}
	e := &Error{Op: op, Code: int(code)}
	if s := C.tsn_error_string(&l.t, code); s != nil {
		e.Message = C.GoString(s)
	}
	return e
}

// Version is NCCL's version code (ncclGetVersion), e.g. 22105 for 2.21.5.
func (l *Lib) Version() (int, error) {
	var v C.int
	if err := l.check("ncclGetVersion", C.tsn_get_version(&l.t, &v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// UniqueID is an ncclUniqueId: rank 0 makes one with (*Lib).UniqueID and every
// rank of the communicator passes the same bytes to InitRank. Carrying it to
// the other ranks is the caller's job: broadcast its 128 bytes over MPI (for
// example dist/mpi's BcastBytes from rank 0) before InitRank.
type UniqueID [C.TSN_UNIQUE_ID_BYTES]byte

// UniqueID makes a new communicator id (ncclGetUniqueId). Call it on rank 0 only.
func (l *Lib) UniqueID() (UniqueID, error) {
	var id C.tsn_unique_id
	if err := l.check("ncclGetUniqueId", C.tsn_get_unique_id(&l.t, &id)); err != nil {
		return UniqueID{}, err
	}
	var out UniqueID
	copy(out[:], unsafe.Slice((*byte)(unsafe.Pointer(&id.internal[0])), len(out)))
	return out, nil
}

// GroupStart opens an NCCL group (ncclGroupStart): collectives issued until
// GroupEnd are launched together. Every GroupStart needs its GroupEnd on the
// same thread.
func (l *Lib) GroupStart() error { return l.check("ncclGroupStart", C.tsn_group_start(&l.t)) }

// GroupEnd closes the group GroupStart opened and launches its collectives.
func (l *Lib) GroupEnd() error { return l.check("ncclGroupEnd", C.tsn_group_end(&l.t)) }

// Comm is an NCCL communicator of one rank. Collectives are not safe for
// concurrent use on one Comm (NCCL's rule), and Destroy must not race them;
// Abort may be called from another goroutine to unblock a rank stuck in NCCL.
type Comm struct {
	lib          *Lib
	h            C.tsn_comm
	nranks, rank int
	done         atomic.Bool // Destroy or Abort ran: h is gone
}

// InitRank joins rank rank of an nranks-rank communicator identified by id
// (ncclCommInitRank). Every rank calls it with the same id and nranks; it
// blocks until all have joined. The calling thread's current CUDA device is the
// rank's device.
func (l *Lib) InitRank(nranks, rank int, id UniqueID) (*Comm, error) {
	if nranks < 1 {
		return nil, fmt.Errorf("nccl: ncclCommInitRank: nranks %d, want at least 1", nranks)
	}
	if rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("nccl: ncclCommInitRank: rank %d outside [0, %d)", rank, nranks)
	}
	if nranks > maxInt32 {
		return nil, fmt.Errorf("nccl: ncclCommInitRank: nranks %d exceeds NCCL's int limit %d", nranks, maxInt32)
	}
	var cid C.tsn_unique_id
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&cid.internal[0])), len(id)), id[:])
	c := &Comm{lib: l, nranks: nranks, rank: rank}
	if err := l.check("ncclCommInitRank", C.tsn_comm_init_rank(&l.t, &c.h, C.int(nranks), &cid, C.int(rank))); err != nil {
		return nil, fmt.Errorf("rank %d of %d: %w", rank, nranks, err)
	}
	return c, nil
}

const maxInt32 = 1<<31 - 1

// Ranks is the communicator's number of ranks.
func (c *Comm) Ranks() int { return c.nranks }

// Rank is this communicator's rank, in [0, Ranks()).
func (c *Comm) Rank() int { return c.rank }

// live refuses a call on a destroyed or aborted communicator.
func (c *Comm) live(op string) error {
	if c.done.Load() || c.lib == nil {
		return fmt.Errorf("nccl: %s: %w", op, ErrDestroyed)
	}
	return nil
}

// AllReduceSum sums count elements of type dt element-wise across ranks
// (ncclAllReduce with ncclSum): every rank's recv receives the sum of every
// rank's send. send == recv is in place. send and recv are CUdeviceptr values,
// stream a CUstream (0: the default stream).
func (c *Comm) AllReduceSum(send, recv uintptr, count int, dt DataType, stream uintptr) error {
	const op = "ncclAllReduce"
	if err := checkBuffers(op, send, recv, count, dt); err != nil {
		return err
	}
	if err := c.live(op); err != nil {
		return err
	}
	return c.lib.check(op, C.tsn_all_reduce_sum(&c.lib.t, C.uintptr_t(send), C.uintptr_t(recv),
		C.size_t(count), C.int(dt), c.h, C.uintptr_t(stream)))
}

// AllGather gathers sendCount elements from every rank into recv, rank r's at
// element offset r*sendCount: recv holds Ranks()*sendCount elements. send may
// be recv + Rank()*sendCount elements (in place).
func (c *Comm) AllGather(send, recv uintptr, sendCount int, dt DataType, stream uintptr) error {
	const op = "ncclAllGather"
	if err := checkBuffers(op, send, recv, sendCount, dt); err != nil {
		return err
	}
	if err := checkTotal(op, "sendCount", sendCount, c.nranks, dt); err != nil {
		return err
	}
	if err := c.live(op); err != nil {
		return err
	}
	return c.lib.check(op, C.tsn_all_gather(&c.lib.t, C.uintptr_t(send), C.uintptr_t(recv),
		C.size_t(sendCount), C.int(dt), c.h, C.uintptr_t(stream)))
}

// ReduceScatterSum sums send (Ranks()*recvCount elements) element-wise across
// ranks and gives rank r block r of the sum in recv (recvCount elements)
// (ncclReduceScatter with ncclSum).
func (c *Comm) ReduceScatterSum(send, recv uintptr, recvCount int, dt DataType, stream uintptr) error {
	const op = "ncclReduceScatter"
	if err := checkBuffers(op, send, recv, recvCount, dt); err != nil {
		return err
	}
	if err := checkTotal(op, "recvCount", recvCount, c.nranks, dt); err != nil {
		return err
	}
	if err := c.live(op); err != nil {
		return err
	}
	return c.lib.check(op, C.tsn_reduce_scatter_sum(&c.lib.t, C.uintptr_t(send), C.uintptr_t(recv),
		C.size_t(recvCount), C.int(dt), c.h, C.uintptr_t(stream)))
}

// Broadcast copies count elements of root's send into every rank's recv
// (ncclBroadcast). send is read on root only: other ranks may pass 0.
func (c *Comm) Broadcast(send, recv uintptr, count int, dt DataType, root int, stream uintptr) error {
	const op = "ncclBroadcast"
	if root < 0 || root >= c.nranks {
		return fmt.Errorf("nccl: %s: root %d outside [0, %d)", op, root, c.nranks)
	}
	s := send
	if c.rank != root {
		s = 1 // send is not read off root: only root's is checked
	}
	if err := checkBuffers(op, s, recv, count, dt); err != nil {
		return err
	}
	if err := c.live(op); err != nil {
		return err
	}
	return c.lib.check(op, C.tsn_broadcast(&c.lib.t, C.uintptr_t(send), C.uintptr_t(recv),
		C.size_t(count), C.int(dt), C.int(root), c.h, C.uintptr_t(stream)))
}

// AsyncError reports an error NCCL met asynchronously on the communicator
// (ncclCommGetAsyncError), for example a peer that failed: nil while healthy or
// still in progress. A watchdog polls it and calls Abort on an error.
func (c *Comm) AsyncError() error {
	const op = "ncclCommGetAsyncError"
	if err := c.live(op); err != nil {
		return err
	}
	var async C.int
	if err := c.lib.check(op, C.tsn_comm_async_error(&c.lib.t, c.h, &async)); err != nil {
		return err
	}
	if async == C.TSN_IN_PROGRESS {
		return nil
	}
	return c.lib.check("communicator (asynchronous)", async)
}

// Destroy frees the communicator after its pending work completes
// (ncclCommDestroy). It is idempotent: later calls, and calls after Abort,
// return nil; every collective after it fails with ErrDestroyed.
func (c *Comm) Destroy() error {
	if c.lib == nil || !c.done.CompareAndSwap(false, true) {
		return nil
	}
	return c.lib.check("ncclCommDestroy", C.tsn_comm_destroy(&c.lib.t, c.h))
}

// Abort frees the communicator without waiting for pending work
// (ncclCommAbort), unblocking a rank whose peers will never arrive. It may run
// while another goroutine is inside a collective on c. Like Destroy it is
// idempotent and ends the communicator.
func (c *Comm) Abort() error {
	if c.lib == nil || !c.done.CompareAndSwap(false, true) {
		return nil
	}
	return c.lib.check("ncclCommAbort", C.tsn_comm_abort(&c.lib.t, c.h))
}

// checkBuffers refuses a negative count, an unknown type, and a zero device
// address when there is something to move.
func checkBuffers(op string, send, recv uintptr, count int, dt DataType) error {
	if count < 0 {
		return fmt.Errorf("nccl: %s: count %d is negative", op, count)
	}
	if !dt.known() {
		return fmt.Errorf("nccl: %s: unknown data type %v", op, dt)
	}
	if count > 0 && send == 0 {
		return fmt.Errorf("nccl: %s: send buffer is 0 for count %d", op, count)
	}
	if count > 0 && recv == 0 {
		return fmt.Errorf("nccl: %s: recv buffer is 0 for count %d", op, count)
	}
	return nil
}

// checkTotal refuses a per-rank count whose all-rank buffer would overflow the
// address space.
func checkTotal(op, what string, count, nranks int, dt DataType) error {
	if count > 0 && nranks > 0 && count > math.MaxInt/nranks/dt.Size() {
		return fmt.Errorf("nccl: %s: %s %d × %d ranks × %d bytes overflows", op, what, count, nranks, dt.Size())
	}
	return nil
}
