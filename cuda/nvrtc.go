package cuda

/*
#include <stdlib.h>
#include "calls.h"
*/
import "C"

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unsafe"
)

// nvrtcSonames are the NVRTC library names tried, newest first.
func nvrtcSonames() []string {
	return []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}
}

// NVRTC is the loaded runtime compiler. Compile may be called from any
// goroutine: every call uses its own program object.
type NVRTC struct {
	lib          library
	t            *C.tsc_nvrtc // C memory
	major, minor int
}

// NVRTCCandidates lists the library names LoadNVRTC tries for cudaHome.
func NVRTCCandidates(cudaHome string) []string {
	return cudaHomeCandidates(cudaHome, nvrtcSonames())
}

// LoadNVRTC loads NVRTC from the first loadable of names, or by default from
// NVRTCCandidates(CUDAHome()).
func LoadNVRTC(names ...string) (*NVRTC, error) {
	if len(names) == 0 {
		names = NVRTCCandidates(CUDAHome())
	}
	lib, err := openLibrary("NVRTC", names)
	if err != nil {
		return nil, err
	}
	t := (*C.tsc_nvrtc)(C.calloc(1, C.size_t(unsafe.Sizeof(C.tsc_nvrtc{}))))
	var missing *C.char
	if C.tsc_load_nvrtc(lib.h, t, &missing) != 0 {
		err := missingSymbolError("NVRTC", lib, missing)
		C.free(unsafe.Pointer(t))
		lib.close()
		return nil, err
	}
	n := &NVRTC{lib: lib, t: t}
	var maj, min C.int
	if err := n.check("nvrtcVersion", C.tsc_nvrtc_version(t, &maj, &min)); err != nil {
		n.Close()
		return nil, err
	}
	n.major, n.minor = int(maj), int(min)
	return n, nil
}

// Close unloads the library.
func (n *NVRTC) Close() {
	if n.t != nil {
		C.free(unsafe.Pointer(n.t))
		n.t = nil
		n.lib.close()
	}
}

// Path is the library name that was loaded.
func (n *NVRTC) Path() string { return n.lib.name }

// Version is NVRTC's CUDA version.
func (n *NVRTC) Version() (major, minor int) { return n.major, n.minor }

// VersionString is "major.minor".
func (n *NVRTC) VersionString() string { return fmt.Sprintf("%d.%d", n.major, n.minor) }

func (n *NVRTC) check(op string, r C.tsc_result) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s (nvrtcResult %d)", op, C.GoString(C.tsc_nvrtc_error(n.t, r)), int(r))
}

// CompileError is a kernel source NVRTC rejected; Log is the compiler's output.
type CompileError struct {
	Name, Arch string
	Log        string
	Err        error
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("cuda: compile %s for %s: %v\n%s", e.Name, e.Arch, e.Err, strings.TrimSpace(e.Log))
}

func (e *CompileError) Unwrap() error { return e.Err }

var archPattern = regexp.MustCompile(`^sm_[0-9]{2,3}[af]?$`)

// Compile compiles the CUDA C++ source src (name is its file name in messages)
// for arch ("sm_80") straight to cubin with the extra NVRTC options opts. It
// returns the cubin and the compiler log (warnings; may be empty).
func (n *NVRTC) Compile(src, name, arch string, opts []string) (cubin []byte, log string, err error) {
	if !archPattern.MatchString(arch) {
		return nil, "", fmt.Errorf("cuda: compile %s: architecture %q is not of the form sm_NN", name, arch)
	}
	if n.t == nil {
		return nil, "", fmt.Errorf("cuda: compile %s: %w", name, ErrClosed)
	}
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog C.tsc_handle
	if err := n.check("nvrtcCreateProgram", C.tsc_nvrtc_create(n.t, &prog, csrc, cname)); err != nil {
		return nil, "", err
	}
	defer C.tsc_nvrtc_destroy(n.t, &prog)

	all := append([]string{"--gpu-architecture=" + arch}, opts...)
	copts := (**C.char)(C.malloc(C.size_t(len(all)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(copts))
	cs := unsafe.Slice(copts, len(all))
	for i, o := range all {
		cs[i] = C.CString(o)
	}
	defer func() {
		for _, p := range cs {
			C.free(unsafe.Pointer(p))
		}
	}()

	cerr := n.check("nvrtcCompileProgram", C.tsc_nvrtc_compile(n.t, prog, C.int(len(all)), copts))
	log = n.programLog(prog)
	if cerr != nil {
		return nil, log, &CompileError{Name: name, Arch: arch, Log: log, Err: cerr}
	}
	var size C.size_t
	if err := n.check("nvrtcGetCUBINSize", C.tsc_nvrtc_cubin_size(n.t, prog, &size)); err != nil {
		return nil, log, err
	}
	if size == 0 {
		return nil, log, fmt.Errorf("cuda: compile %s for %s: NVRTC produced an empty cubin", name, arch)
	}
	cubin = make([]byte, int(size))
	if err := n.check("nvrtcGetCUBIN", C.tsc_nvrtc_cubin(n.t, prog, (*C.char)(unsafe.Pointer(&cubin[0])))); err != nil {
		return nil, log, err
	}
	return cubin, log, nil
}

func (n *NVRTC) programLog(prog C.tsc_handle) string {
	var size C.size_t
	if C.tsc_nvrtc_log_size(n.t, prog, &size) != 0 || size <= 1 {
		return ""
	}
	buf := make([]byte, int(size))
	if C.tsc_nvrtc_log(n.t, prog, (*C.char)(unsafe.Pointer(&buf[0]))) != 0 {
		return ""
	}
	return string(bytes.TrimRight(buf, "\x00"))
}

// errNotELF is wrapped when a cubin is not an ELF image.
var errNotELF = errors.New("not an ELF image")

// checkELF verifies b starts with the ELF magic every cubin has.
func checkELF(b []byte) error {
	if len(b) < 4 || string(b[:4]) != "\x7fELF" {
		return fmt.Errorf("cuda: cubin of %d bytes: %w", len(b), errNotELF)
	}
	return nil
}

// CubinFunctions lists the global function symbols (kernel entry points) of a
// cubin, parsed from its ELF symbol table.
func CubinFunctions(cubin []byte) ([]string, error) {
	if err := checkELF(cubin); err != nil {
		return nil, err
	}
	// NVIDIA's ELF header carries its own ABI version in e_version (118 for
	// CUDA 11+), which debug/elf rejects; parse a copy that says EV_CURRENT.
	img := bytes.Clone(cubin)
	if len(img) >= 24 {
		binary.LittleEndian.PutUint32(img[20:24], uint32(elf.EV_CURRENT))
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("cuda: parse cubin: %w", err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("cuda: cubin symbol table: %w", err)
	}
	var out []string
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
			out = append(out, s.Name)
		}
	}
	return out, nil
}
