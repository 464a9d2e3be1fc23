// Package step is the step contract between the engine and every runner:
// the varlen batch one step executes (Batch, SeqBatch, FutureToken), what
// the step produced (Output), what a runner holds (Capacity), the Runner
// interface, and the Checker every runner validates batches with.
//
// It is a leaf: no cgo and nothing third-party, so the engine, the policy,
// the ranks and the server link no kernels, no CUDA bindings and no NVML.
// Its only import of ours is sampling, for the per-sequence sampling
// settings a batch carries.
//
// Words: a seat is a sequence's row in every seat-indexed runner buffer
// (sampler state, last-token row), handed out by seatpool; a position is a
// token's index in its sequence; a block holds BlockSize consecutive
// positions of one sequence's KV, named by a kvpool block id.
package step
