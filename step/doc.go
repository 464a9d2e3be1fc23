// Package step is the step contract between the engine and every runner:
// the varlen batch one step executes (Batch, SeqBatch, FutureToken), what
// the step produced (Output), what a runner holds (Capacity), the Runner
// interface, and the Checker every runner validates batches with.
//
// Checker.Validate checks a batch against the contract and the runner's
// Capacity, and the Checker owns the seats' cursors (Checker.Advance moves
// them after a step). Masks carries the token masks of constrained
// sequences, which a runner waits for before sampling. Group and Grouper
// name a step's sequences whose block tables begin with the same block
// ids (a shared prefix, straight from kvpool), which a runner may attend
// to once for the group (cascade attention).
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
