package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "table.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"
)

// ErrLibraryNotFound is wrapped by every error reporting that none of a
// library's candidate names could be loaded.
var ErrLibraryNotFound = errors.New("library not found")

// ErrMissingSymbol is wrapped by every error reporting that a loaded library
// lacks an entry point turnstile needs (for example a driver older than the API).
var ErrMissingSymbol = errors.New("missing symbol")

// library is one dlopen handle and the name that loaded it.
type library struct {
	h    unsafe.Pointer
	name string
}

// openLibrary dlopens the first loadable name of names. The error names every
// candidate tried and the loader's last message.
func openLibrary(what string, names []string) (library, error) {
	if len(names) == 0 {
		return library{}, fmt.Errorf("cuda: %s: no candidate names: %w", what, ErrLibraryNotFound)
	}
	cnames := make([]*C.char, len(names))
	for i, n := range names {
		cnames[i] = C.CString(n)
	}
	defer func() {
		for _, p := range cnames {
			C.free(unsafe.Pointer(p))
		}
	}()
	// The array of C string pointers itself must live in C memory for cgo's rules.
	arr := (**C.char)(C.malloc(C.size_t(len(names)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(arr))
	copy(unsafe.Slice(arr, len(names)), cnames)

	var which C.int
	var msg [512]C.char
	h := C.tsc_open(arr, C.int(len(names)), &which, &msg[0], C.size_t(len(msg)))
	if h == nil {
		return library{}, fmt.Errorf("cuda: %s: none of [%s] could be loaded (last: %s): %w",
			what, strings.Join(names, ", "), C.GoString(&msg[0]), ErrLibraryNotFound)
	}
	return library{h: h, name: names[int(which)]}, nil
}

func (l library) close() {
	C.tsc_close(l.h)
}

// missingSymbolError reports the first symbol of a table that lib lacks.
func missingSymbolError(what string, lib library, sym *C.char) error {
	return fmt.Errorf("cuda: %s %s lacks symbol %s: %w", what, lib.name, C.GoString(sym), ErrMissingSymbol)
}

// cudaHomeCandidates expands sonames under the CUDA installation directories:
// cudaHome (when not empty) and /usr/local/cuda, each in lib64 and lib.
func cudaHomeCandidates(cudaHome string, sonames []string) []string {
	var out []string
	out = append(out, sonames...)
	homes := []string{}
	if cudaHome != "" {
		homes = append(homes, cudaHome)
	}
	if cudaHome != "/usr/local/cuda" {
		homes = append(homes, "/usr/local/cuda")
	}
	for _, home := range homes {
		for _, dir := range []string{"lib64", "lib"} {
			for _, so := range sonames {
				out = append(out, filepath.Join(home, dir, so))
			}
		}
	}
	return out
}

// CUDAHome is $CUDA_HOME, or $CUDA_PATH when that is unset, or "".
func CUDAHome() string {
	if h := os.Getenv("CUDA_HOME"); h != "" {
		return h
	}
	return os.Getenv("CUDA_PATH")
}
