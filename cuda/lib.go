package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "table.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/turnstile-llm/turnstile/internal/dl"
)

// ErrLibraryNotFound is wrapped by every error reporting that none of a
// library's candidate names could be loaded.
var ErrLibraryNotFound = dl.ErrLibraryNotFound

// ErrMissingSymbol is wrapped by every error reporting that a loaded library
// lacks an entry point turnstile needs (for example a driver older than the API).
var ErrMissingSymbol = dl.ErrMissingSymbol

// library is one dlopen handle and the name that loaded it.
type library struct {
	h    unsafe.Pointer
	name string
}

// openLibrary dlopens the first loadable name of names (RTLD_LOCAL). The
// error names every candidate tried and the loader's last message.
func openLibrary(what string, names []string) (library, error) {
	l, err := dl.Open("cuda: "+what, names, false)
	if err != nil {
		return library{}, err
	}
	return library{h: l.Handle, name: l.Name}, nil
}

func (l library) close() {
	dl.Library{Handle: l.h, Name: l.name}.Close()
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
