package cuda

/*
#include <stdlib.h>
#include "calls.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// DriverLibrary is the soname of the CUDA driver API library.
const DriverLibrary = "libcuda.so.1"

// Driver is the loaded libcuda function table. Its methods other than Close may
// be called from any goroutine; per-context work goes through a Device.
type Driver struct {
	lib library
	t   *C.tsc_cuda // C memory: the table is read by C on every call

	initOnce sync.Once
	initErr  error
	inited   bool // cuInit ran: the library has started threads and stays mapped
}

// LoadDriver loads the driver API from the first loadable of names (default:
// libcuda.so.1) and resolves every entry point. Without a driver it returns an
// error wrapping ErrLibraryNotFound; with a driver lacking an entry point, one
// wrapping ErrMissingSymbol that names the symbol.
func LoadDriver(names ...string) (*Driver, error) {
	if len(names) == 0 {
		names = []string{DriverLibrary}
	}
	lib, err := openLibrary("CUDA driver", names)
	if err != nil {
		return nil, err
	}
	t := (*C.tsc_cuda)(C.calloc(1, C.size_t(unsafe.Sizeof(C.tsc_cuda{}))))
	var missing *C.char
	if C.tsc_load_cuda(lib.h, t, &missing) != 0 {
		err := missingSymbolError("CUDA driver", lib, missing)
		C.free(unsafe.Pointer(t))
		lib.close()
		return nil, err
	}
	return &Driver{lib: lib, t: t}, nil
}

// Path is the library name that was loaded.
func (d *Driver) Path() string { return d.lib.name }

// Close releases the table. Devices opened on d must be closed first. Once
// cuInit has run the library stays mapped: the driver's own threads still run
// its code, so unmapping it could crash the process.
func (d *Driver) Close() {
	if d.t != nil {
		C.free(unsafe.Pointer(d.t))
		d.t = nil
		if !d.inited {
			d.lib.close()
		}
	}
}

// Error is a failed driver API call.
type Error struct {
	Op   string // the API entry, e.g. "cuMemAlloc"
	Code int    // the CUresult
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY", or "" when the driver has none
}

func (e *Error) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("cuda: %s: CUresult %d", e.Op, e.Code)
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Name, e.Code)
}

// check turns a CUresult into nil or an *Error named through cuGetErrorName.
func (d *Driver) check(op string, r C.tsc_result) error {
	if r == 0 {
		return nil
	}
	e := &Error{Op: op, Code: int(r)}
	var name *C.char
	if C.tsc_cu_error_name(d.t, r, &name) == 0 && name != nil {
		e.Name = C.GoString(name)
	}
	return e
}

// Init calls cuInit once; later calls return the first result.
func (d *Driver) Init() error {
	d.initOnce.Do(func() {
		d.inited = true
		d.initErr = d.check("cuInit", C.tsc_cu_init(d.t))
	})
	return d.initErr
}

// Version is the driver's CUDA version, 1000*major + 10*minor (12040 is 12.4).
func (d *Driver) Version() (int, error) {
	var v C.int
	if err := d.check("cuDriverGetVersion", C.tsc_cu_driver_version(d.t, &v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount initialises the driver and counts its devices.
func (d *Driver) DeviceCount() (int, error) {
	if err := d.Init(); err != nil {
		return 0, err
	}
	var n C.int
	if err := d.check("cuDeviceGetCount", C.tsc_cu_device_count(d.t, &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Driver device attribute numbers (CUdevice_attribute).
const (
	attrMaxThreadsPerBlock       = 1
	attrMultiprocessorCount      = 16
	attrComputeCapabilityMajor   = 75
	attrComputeCapabilityMinor   = 76
	attrMaxSharedPerBlockOptin   = 97
	funcAttrMaxDynamicSharedSize = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
)

// Props are the properties of one device.
type Props struct {
	Ordinal            int
	Name               string
	Major, Minor       int    // compute capability
	SMs                int    // multiprocessors
	MaxThreadsPerBlock int    //
	MaxSharedOptin     int    // bytes of shared memory a block may opt in to
	TotalMemory        uint64 // bytes
}

// Arch is the NVRTC architecture for the device, e.g. "sm_90".
func (p Props) Arch() string { return Arch(p.Major, p.Minor) }

// Arch names compute capability major.minor as an NVRTC architecture ("sm_80").
func Arch(major, minor int) string { return fmt.Sprintf("sm_%d%d", major, minor) }

// Device is one GPU with its primary context current on a dedicated locked
// thread. All work on it goes through Do.
type Device struct {
	drv   *Driver
	thr   *Thread
	dev   C.tsc_device
	ctx   C.tsc_handle
	props Props
}

// Open retains device ordinal's primary context and makes it current on a new
// locked thread.
func (d *Driver) Open(ordinal int) (*Device, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: device %d out of range: the driver reports %d devices", ordinal, n)
	}
	dev := &Device{drv: d, thr: StartThread(), props: Props{Ordinal: ordinal}}
	err = dev.thr.Do(func() error { return dev.open(ordinal) })
	if err != nil {
		dev.thr.Close()
		return nil, fmt.Errorf("cuda: open device %d: %w", ordinal, err)
	}
	return dev, nil
}

// open runs on the device thread.
func (dev *Device) open(ordinal int) error {
	d := dev.drv
	if err := d.check("cuDeviceGet", C.tsc_cu_device_get(d.t, &dev.dev, C.int(ordinal))); err != nil {
		return err
	}
	var name [256]C.char
	if err := d.check("cuDeviceGetName", C.tsc_cu_device_name(d.t, &name[0], C.int(len(name)), dev.dev)); err != nil {
		return err
	}
	dev.props.Name = C.GoString(&name[0])
	attrs := []struct {
		attr int
		dst  *int
	}{
		{attrComputeCapabilityMajor, &dev.props.Major},
		{attrComputeCapabilityMinor, &dev.props.Minor},
		{attrMultiprocessorCount, &dev.props.SMs},
		{attrMaxThreadsPerBlock, &dev.props.MaxThreadsPerBlock},
		{attrMaxSharedPerBlockOptin, &dev.props.MaxSharedOptin},
	}
	for _, a := range attrs {
		var v C.int
		if err := d.check("cuDeviceGetAttribute", C.tsc_cu_device_attr(d.t, &v, C.int(a.attr), dev.dev)); err != nil {
			return fmt.Errorf("attribute %d: %w", a.attr, err)
		}
		*a.dst = int(v)
	}
	var total C.size_t
	if err := d.check("cuDeviceTotalMem", C.tsc_cu_device_total_mem(d.t, &total, dev.dev)); err != nil {
		return err
	}
	dev.props.TotalMemory = uint64(total)
	if err := d.check("cuDevicePrimaryCtxRetain", C.tsc_cu_primary_retain(d.t, &dev.ctx, dev.dev)); err != nil {
		return err
	}
	if err := d.check("cuCtxSetCurrent", C.tsc_cu_ctx_set_current(d.t, dev.ctx)); err != nil {
		C.tsc_cu_primary_release(d.t, dev.dev)
		return err
	}
	return nil
}

// Props are the device's properties, read at Open.
func (dev *Device) Props() Props { return dev.props }

// Do runs f on the device's locked thread with its context current. The Ctx is
// valid only during f and must not be kept.
func (dev *Device) Do(f func(c Ctx) error) error {
	return dev.thr.Do(func() error { return f(Ctx{dev: dev}) })
}

// Close synchronises, releases the primary context and stops the thread.
// Resources not destroyed by then are released with the context.
func (dev *Device) Close() error {
	err := dev.thr.Do(func() error {
		d := dev.drv
		serr := d.check("cuCtxSynchronize", C.tsc_cu_ctx_sync(d.t))
		rerr := d.check("cuDevicePrimaryCtxRelease", C.tsc_cu_primary_release(d.t, dev.dev))
		if serr != nil {
			return serr
		}
		return rerr
	})
	dev.thr.Close()
	return err
}
