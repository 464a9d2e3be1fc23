// Package cuda binds the CUDA driver API (libcuda), the runtime compiler (NVRTC)
// and cuBLASLt through dlopen/dlsym into C tables of function pointers, so that
// building and testing turnstile needs no CUDA toolkit and a missing library or
// symbol is an error value, never a crash. It also compiles kernel sources to
// cubin with an on-disk cache, runs every driver call on one goroutine locked to
// its OS thread, discovers GPUs through NVML (go-nvml) and parses the --device
// backend selection. cuBLASLt GEMMs are planned once per shape (the
// descriptors and the heuristic's algorithm), kept in an LRU of 256 plans.
//
// Ownership: every handle type (Stream, Event, Module, Graph, ...) is owned by the
// Device it was made on and must be destroyed through that Device's Ctx; device
// memory (DevicePtr) is likewise freed through Ctx.Free.
package cuda
