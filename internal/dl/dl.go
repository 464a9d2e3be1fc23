// Package dl opens shared libraries with dlopen from a list of candidate
// names: the one loader behind the CUDA, MPI and NCCL bindings, which then
// resolve their own function tables from the handle. A library that cannot
// be loaded is an error naming every candidate, never a crash.
package dl

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "dl.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// ErrLibraryNotFound is wrapped by every error reporting that none of a
// library's candidate names could be loaded.
var ErrLibraryNotFound = errors.New("library not found")

// ErrMissingSymbol is for the bindings to wrap when a loaded library lacks
// an entry point they need.
var ErrMissingSymbol = errors.New("missing symbol")

// Library is one dlopen handle and the name that loaded it. The handle is
// the C library's; bindings pass it to their C code to resolve symbols.
type Library struct {
	Handle unsafe.Pointer
	Name   string
}

// Open dlopens the first loadable name of names, with RTLD_GLOBAL when
// global (a library whose plugins resolve its symbols, like Open MPI's),
// else RTLD_LOCAL. what names the library in errors ("mpi: libmpi").
func Open(what string, names []string, global bool) (Library, error) {
	if len(names) == 0 {
		return Library{}, fmt.Errorf("%s: no candidate names: %w", what, ErrLibraryNotFound)
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
	// The array of C string pointers must itself live in C memory (cgo's rules).
	arr := (**C.char)(C.malloc(C.size_t(len(names)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(arr))
	copy(unsafe.Slice(arr, len(names)), cnames)

	g := C.int(0)
	if global {
		g = 1
	}
	var which C.int
	var msg [512]C.char
	h := C.tsdl_open(arr, C.int(len(names)), g, &which, &msg[0], C.size_t(len(msg)))
	if h == nil {
		return Library{}, fmt.Errorf("%s: none of [%s] could be loaded (last: %s): %w",
			what, strings.Join(names, ", "), C.GoString(&msg[0]), ErrLibraryNotFound)
	}
	return Library{Handle: h, Name: names[int(which)]}, nil
}

// Close dlcloses the library; a zero Library is a no-op.
func (l Library) Close() {
	C.tsdl_close(l.Handle)
}
