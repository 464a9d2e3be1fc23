// Package model holds the llama-family model and the runners that execute
// it: GGUF loading (model/gguf) and the tokenizer (model/tokenizer), the
// forward pass expressed as kernel calls, and two implementations of
// step.Runner.
//
//   - CPURunner runs the C kernels (package kernels) over a paged KV cache
//     it owns (F32, F16 or BF16), indexed by kvpool block ids.
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
// Architectures differ as data, not as copies of the pass: gguf.ArchSpec
// and the configuration's flags choose NEOX or adjacent RoPE over one
// frequency table with Llama 3's factors (the CPU runner builds one
// (cos, sin) table per step, kernels.RoPETable, that every layer's q and k
// reuse), Q/K/V biases, per-head Q/K norms and a decoupled head dimension.
// A sliding window (one for every layer) is masked by the CPU and the CUDA
// attention kernels alike.
//
// LoadLlama is the one entry point, for a GGUF file or a Hugging Face
// directory (config.json, memory-mapped safetensors shards, tokenizer.json,
// generation_config.json's stop ids). It copies the matrices a step
// streams out of the file mapping into one huge-page region
// (internal/hugemem); the CUDA runner and a sharded MLP keep them mapped
// instead (LlamaOptions.Mmap). WriteHFDir writes a GGUF model's Hugging
// Face twin, for tests.
//
// With CPURunnerConfig.MLP (an MLPComm, in practice a duplicate of the MPI
// world) the CPU runner's MLP is tensor-parallel across the attention-DP
// ranks (mlp_shard.go): each rank holds 1/N of the MLP's rows and joins
// every layer's collectives, with DummyStep when it has nothing to run.
//
// Ownership: a runner owns its KV cache, scratch and sampler state; the
// model (*Llama) must outlive every runner built on it. Runners are called
// from one goroutine at a time (the engine's device stream).
package model
