// Package model holds the llama-family model and the runners that execute
// it: GGUF loading (model/gguf) and the tokenizer (model/tokenizer), the
// forward pass expressed as kernel calls, and two implementations of
// step.Runner.
//
//   - CPURunner runs the C kernels (package kernels) over a paged F32 KV
//     cache it owns, indexed by kvpool block ids.
//   - CUDARunner runs the CUDA kernels through the driver API: weights
//     uploaded once, a KV cache sized from the device's free memory, decode
//     steps replayed from captured graphs. Its host half (cudaHost) touches
//     no device, so its planning is tested on any machine.
//
// Both share one host-side half, seatHost: the batch contract and seat
// cursors (step.Checker), sampler start and sampling of the rows the host
// samples, kept logits and Check. What stays per runner is only where the
// logits are computed and which rows the device samples itself.
//
// Ownership: a runner owns its KV cache, scratch and sampler state; the
// model (*Llama) must outlive every runner built on it. Runners are called
// from one goroutine at a time (the engine's device stream).
package model
