package cuda

/*
#include <stdlib.h>
#include "calls.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// DevicePtr is a device memory address (CUdeviceptr). Zero is no allocation.
type DevicePtr uint64

// Add offsets p by n bytes.
func (p DevicePtr) Add(n uint64) DevicePtr { return p + DevicePtr(n) }

// Stream is a CUDA stream; the zero Stream is the context's default stream.
type Stream struct{ h C.tsc_handle }

// Event is a CUDA event used for ordering and timing.
type Event struct{ h C.tsc_handle }

// Module is a loaded cubin.
type Module struct{ h C.tsc_handle }

// Function is a kernel entry point of a Module.
type Function struct {
	h    C.tsc_handle
	name string
}

// Name is the kernel's entry-point name.
func (f Function) Name() string { return f.name }

// Graph is a captured, not yet instantiated, CUDA graph.
type Graph struct{ h C.tsc_handle }

// GraphExec is an instantiated graph, launched with one call.
type GraphExec struct{ h C.tsc_handle }

// HostBuffer is page-locked host memory, the source or destination of
// asynchronous copies. Bytes aliases C memory: it is valid until FreeHost.
type HostBuffer struct {
	p     unsafe.Pointer
	Bytes []byte
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Ctx gives the driver calls of one Device. It exists only inside Device.Do, on
// the device's locked thread with its context current; do not keep it.
type Ctx struct{ dev *Device }

func (c Ctx) drv() *Driver { return c.dev.drv }

// Props are the device's properties.
func (c Ctx) Props() Props { return c.dev.props }

// MemInfo reports free and total device memory in bytes.
func (c Ctx) MemInfo() (free, total uint64, err error) {
	var f, t C.size_t
	err = c.drv().check("cuMemGetInfo", C.tsc_cu_mem_info(c.drv().t, &f, &t))
	return uint64(f), uint64(t), err
}

// Alloc allocates n bytes of device memory.
func (c Ctx) Alloc(n uint64) (DevicePtr, error) {
	var p C.tsc_deviceptr
	if err := c.drv().check("cuMemAlloc", C.tsc_cu_mem_alloc(c.drv().t, &p, C.size_t(n))); err != nil {
		return 0, fmt.Errorf("alloc %d bytes: %w", n, err)
	}
	return DevicePtr(p), nil
}

// Free releases memory from Alloc.
func (c Ctx) Free(p DevicePtr) error {
	return c.drv().check("cuMemFree", C.tsc_cu_mem_free(c.drv().t, C.tsc_deviceptr(p)))
}

// HostAlloc allocates n bytes of page-locked host memory.
func (c Ctx) HostAlloc(n int) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: host alloc of %d bytes: size must be positive", n)
	}
	var p unsafe.Pointer
	if err := c.drv().check("cuMemHostAlloc", C.tsc_cu_host_alloc(c.drv().t, &p, C.size_t(n), 0)); err != nil {
		return nil, fmt.Errorf("host alloc %d bytes: %w", n, err)
	}
	return &HostBuffer{p: p, Bytes: unsafe.Slice((*byte)(p), n)}, nil
}

// FreeHost releases b; b.Bytes must not be used afterwards.
func (c Ctx) FreeHost(b *HostBuffer) error {
	err := c.drv().check("cuMemFreeHost", C.tsc_cu_host_free(c.drv().t, b.p))
	b.p, b.Bytes = nil, nil
	return err
}

// MemsetD8Async sets n bytes at p to v.
func (c Ctx) MemsetD8Async(p DevicePtr, v byte, n uint64, s Stream) error {
	return c.drv().check("cuMemsetD8Async", C.tsc_cu_memset8(c.drv().t, C.tsc_deviceptr(p), C.uchar(v), C.size_t(n), s.h))
}

// MemsetD32Async sets n 32-bit words at p to v.
func (c Ctx) MemsetD32Async(p DevicePtr, v uint32, n uint64, s Stream) error {
	return c.drv().check("cuMemsetD32Async", C.tsc_cu_memset32(c.drv().t, C.tsc_deviceptr(p), C.uint(v), C.size_t(n), s.h))
}

// CopyHtoD copies src to dst synchronously. src may be Go or mapped memory.
func (c Ctx) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.drv().check("cuMemcpyHtoD", C.tsc_cu_htod(c.drv().t, C.tsc_deviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// CopyDtoH copies len(dst) bytes from src synchronously.
func (c Ctx) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.drv().check("cuMemcpyDtoH", C.tsc_cu_dtoh(c.drv().t, unsafe.Pointer(&dst[0]), C.tsc_deviceptr(src), C.size_t(len(dst))))
}

// hostRange checks [off, off+n) lies in b and returns its address.
func hostRange(b *HostBuffer, off, n int) (unsafe.Pointer, error) {
	if b == nil || b.p == nil {
		return nil, fmt.Errorf("cuda: async copy with a freed or nil host buffer")
	}
	if off < 0 || n < 0 || off+n > len(b.Bytes) {
		return nil, fmt.Errorf("cuda: async copy of %d bytes at offset %d outside a %d-byte host buffer", n, off, len(b.Bytes))
	}
	return unsafe.Add(b.p, off), nil
}

// CopyHtoDAsync copies n bytes from pinned src at off to dst on s.
func (c Ctx) CopyHtoDAsync(dst DevicePtr, src *HostBuffer, off, n int, s Stream) error {
	p, err := hostRange(src, off, n)
	if err != nil {
		return err
	}
	return c.drv().check("cuMemcpyHtoDAsync", C.tsc_cu_htod_async(c.drv().t, C.tsc_deviceptr(dst), p, C.size_t(n), s.h))
}

// CopyDtoHAsync copies n bytes from src to pinned dst at off on s.
func (c Ctx) CopyDtoHAsync(dst *HostBuffer, off, n int, src DevicePtr, s Stream) error {
	p, err := hostRange(dst, off, n)
	if err != nil {
		return err
	}
	return c.drv().check("cuMemcpyDtoHAsync", C.tsc_cu_dtoh_async(c.drv().t, p, C.tsc_deviceptr(src), C.size_t(n), s.h))
}

// CopyDtoDAsync copies n bytes between device buffers on s.
func (c Ctx) CopyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error {
	return c.drv().check("cuMemcpyDtoDAsync", C.tsc_cu_dtod_async(c.drv().t, C.tsc_deviceptr(dst), C.tsc_deviceptr(src), C.size_t(n), s.h))
}

// NewStream creates a stream that does not synchronise with the default stream.
func (c Ctx) NewStream() (Stream, error) {
	var s Stream
	const nonBlocking = 1 // CU_STREAM_NON_BLOCKING
	err := c.drv().check("cuStreamCreate", C.tsc_cu_stream_create(c.drv().t, &s.h, nonBlocking))
	return s, err
}

// DestroyStream destroys s.
func (c Ctx) DestroyStream(s Stream) error {
	return c.drv().check("cuStreamDestroy", C.tsc_cu_stream_destroy(c.drv().t, s.h))
}

// Sync waits for all work on s.
func (c Ctx) Sync(s Stream) error {
	return c.drv().check("cuStreamSynchronize", C.tsc_cu_stream_sync(c.drv().t, s.h))
}

// Synchronize waits for all work in the context.
func (c Ctx) Synchronize() error {
	return c.drv().check("cuCtxSynchronize", C.tsc_cu_ctx_sync(c.drv().t))
}

// NewEvent creates an event; timing events can be passed to Elapsed.
func (c Ctx) NewEvent(timing bool) (Event, error) {
	var e Event
	var flags C.uint
	if !timing {
		flags = 2 // CU_EVENT_DISABLE_TIMING
	}
	err := c.drv().check("cuEventCreate", C.tsc_cu_event_create(c.drv().t, &e.h, flags))
	return e, err
}

// DestroyEvent destroys e.
func (c Ctx) DestroyEvent(e Event) error {
	return c.drv().check("cuEventDestroy", C.tsc_cu_event_destroy(c.drv().t, e.h))
}

// Record records e on s.
func (c Ctx) Record(e Event, s Stream) error {
	return c.drv().check("cuEventRecord", C.tsc_cu_event_record(c.drv().t, e.h, s.h))
}

// EventSync waits for e.
func (c Ctx) EventSync(e Event) error {
	return c.drv().check("cuEventSynchronize", C.tsc_cu_event_sync(c.drv().t, e.h))
}

// Elapsed is the time in milliseconds between two recorded timing events.
func (c Ctx) Elapsed(start, end Event) (float32, error) {
	var ms C.float
	err := c.drv().check("cuEventElapsedTime", C.tsc_cu_event_elapsed(c.drv().t, &ms, start.h, end.h))
	return float32(ms), err
}

// LoadModule loads a cubin image.
func (c Ctx) LoadModule(cubin []byte) (Module, error) {
	var m Module
	if err := checkELF(cubin); err != nil {
		return m, err
	}
	err := c.drv().check("cuModuleLoadData", C.tsc_cu_module_load(c.drv().t, &m.h, unsafe.Pointer(&cubin[0])))
	return m, err
}

// UnloadModule unloads m; its Functions become invalid.
func (c Ctx) UnloadModule(m Module) error {
	return c.drv().check("cuModuleUnload", C.tsc_cu_module_unload(c.drv().t, m.h))
}

// Function looks up the kernel entry point name in m.
func (c Ctx) Function(m Module, name string) (Function, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	f := Function{name: name}
	if err := c.drv().check("cuModuleGetFunction", C.tsc_cu_module_function(c.drv().t, &f.h, m.h, cname)); err != nil {
		return f, fmt.Errorf("kernel %q: %w", name, err)
	}
	return f, nil
}

// SetMaxDynamicShared lets f use up to bytes of dynamic shared memory (needed
// above 48 KiB).
func (c Ctx) SetMaxDynamicShared(f Function, bytes int) error {
	err := c.drv().check("cuFuncSetAttribute", C.tsc_cu_func_set_attr(c.drv().t, f.h, funcAttrMaxDynamicSharedSize, C.int(bytes)))
	if err != nil {
		return fmt.Errorf("kernel %q: %d bytes of shared memory: %w", f.name, bytes, err)
	}
	return nil
}

// Launch runs f over grid×block with shmem bytes of dynamic shared memory and
// the packed arguments args on s.
func (c Ctx) Launch(f Function, grid, block Dim3, shmem uint32, s Stream, args *Args) error {
	var p unsafe.Pointer
	var n C.size_t
	if args != nil && len(args.buf) > 0 {
		p, n = unsafe.Pointer(&args.buf[0]), C.size_t(len(args.buf))
	}
	r := C.tsc_launch(c.drv().t, f.h, C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z),
		C.uint(block.X), C.uint(block.Y), C.uint(block.Z), C.uint(shmem), s.h, p, n)
	if err := c.drv().check("cuLaunchKernel", r); err != nil {
		return fmt.Errorf("kernel %q grid %v block %v: %w", f.name, grid, block, err)
	}
	return nil
}

// BeginCapture starts capturing the work launched on s (from this thread) into
// a graph instead of running it.
func (c Ctx) BeginCapture(s Stream) error {
	const threadLocal = 1 // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	return c.drv().check("cuStreamBeginCapture", C.tsc_cu_begin_capture(c.drv().t, s.h, threadLocal))
}

// EndCapture ends the capture on s and returns the graph.
func (c Ctx) EndCapture(s Stream) (Graph, error) {
	var g Graph
	err := c.drv().check("cuStreamEndCapture", C.tsc_cu_end_capture(c.drv().t, s.h, &g.h))
	return g, err
}

// Instantiate makes g launchable.
func (c Ctx) Instantiate(g Graph) (GraphExec, error) {
	var e GraphExec
	err := c.drv().check("cuGraphInstantiateWithFlags", C.tsc_cu_graph_instantiate(c.drv().t, &e.h, g.h))
	return e, err
}

// LaunchGraph launches e on s: the whole captured step in one call.
func (c Ctx) LaunchGraph(e GraphExec, s Stream) error {
	return c.drv().check("cuGraphLaunch", C.tsc_cu_graph_launch(c.drv().t, e.h, s.h))
}

// DestroyGraph destroys g.
func (c Ctx) DestroyGraph(g Graph) error {
	return c.drv().check("cuGraphDestroy", C.tsc_cu_graph_destroy(c.drv().t, g.h))
}

// DestroyGraphExec destroys e.
func (c Ctx) DestroyGraphExec(e GraphExec) error {
	return c.drv().check("cuGraphExecDestroy", C.tsc_cu_graph_exec_destroy(c.drv().t, e.h))
}

// Args packs kernel arguments into one buffer, each at its natural alignment,
// the layout the kernel's parameter list has. Reset and reuse it to launch
// without allocating.
type Args struct{ buf []byte }

// Reset empties a for reuse.
func (a *Args) Reset() *Args { a.buf = a.buf[:0]; return a }

// Len is the packed size in bytes.
func (a *Args) Len() int { return len(a.buf) }

func (a *Args) align(n int) {
	for len(a.buf)%n != 0 {
		a.buf = append(a.buf, 0)
	}
}

// Ptr appends a device pointer (8 bytes).
func (a *Args) Ptr(p DevicePtr) *Args { return a.U64(uint64(p)) }

// U64 appends an unsigned 64-bit integer.
func (a *Args) U64(v uint64) *Args {
	a.align(8)
	a.buf = binary.LittleEndian.AppendUint64(a.buf, v)
	return a
}

// I32 appends a signed 32-bit integer.
func (a *Args) I32(v int32) *Args { return a.U32(uint32(v)) }

// U32 appends an unsigned 32-bit integer.
func (a *Args) U32(v uint32) *Args {
	a.align(4)
	a.buf = binary.LittleEndian.AppendUint32(a.buf, v)
	return a
}

// F32 appends a float.
func (a *Args) F32(v float32) *Args { return a.U32(math.Float32bits(v)) }

// Bytes is the packed buffer (for tests and debugging).
func (a *Args) Bytes() []byte { return a.buf }
