// Package executor is the engine: request lifecycle, scheduler and step loop.
// It owns every decision about what runs; a Runner (the CPU runner in model,
// the simulated one in sim) executes one model.Batch per step.
//
// # Lifecycle
//
//	WAITING ──admit──▶ RUNNING (chunked prefill, then decode) ──last token──▶ FINISHED
//	   ▲                  │  └──last token while in the next step──▶ RETIRING ─teardown─▶ FINISHED
//	   └──preempt (recompute)┘
//	ABORTED from any state (request context cancelled, or engine shut down)
//
// Every transition releases exactly what the request holds: its seat
// (seatpool), its KV sequence (kvpool) and its admission charge (the
// Admission hook's Release), each exactly once. Engine.Check proves it.
//
// # Scheduler, per step
//
// The step has a token budget (MaxNumBatchedTokens) and a sequence budget
// (MaxBatchSize). Running requests are served first, oldest admission first:
// decodes (one token each), then the next chunk of partially prefilled ones;
// then waiting requests are admitted in arrival order (preempted ones go back
// to the front), each with a kvpool prefix lookup and the Admission hook,
// while the token budget, the sequence budget, seats and blocks allow. When a
// running request cannot get a block, the newest running request not already
// in this step is preempted by recompute (its blocks and seat are released,
// its tokens so far become its new prompt); a lone request that cannot grow
// even then finishes with "length".
//
// # Overlap
//
// With Config.Overlap, step n+1 is planned and launched (overlap.Pipeline)
// while step n runs; then n's results are processed. A request sampled in n
// decodes in n+1 with model.FutureToken as input: the runner substitutes the
// token from its own per-seat row, with no host round trip. kvpool learns the
// token's value when n is processed: its slot is reserved when n+1 is
// planned (kvpool.Reserve allocates the block when the slot opens one, so
// the runner writes the KV into the sequence's own block, with no copy) and
// filled when n is processed (kvpool.Fill), and only then is a block it
// completes hashed and published. When no block is available for the slot,
// the request skips n+1 and decodes in n+2 with the known token. A finish
// known in advance (max tokens, context length) is never planned into n+1.
// A finish seen only when n is processed (EOS, stop token, stop string)
// leaves the request RETIRING in n+1: its n+1 output is discarded and its
// seat and blocks are released when n+1 is processed (teardown). The user
// sees the finish at once.
//
// Retiring requests are not charged against admission or the step budgets
// (Config.ChargeRetiring restores the charging of seed 004's BASE, for
// measurement) but they count for liveness: the loop blocks waiting for work
// only when nothing is running, retiring or in flight.
//
// The ordering rule that makes early release safe: the runner executes steps
// in launch order, so a block or seat released while a step that used it is
// still in flight may be handed to a later step. Preemption uses that for
// blocks (it needs them now); seats of requests in flight always retire.
//
// # Threads
//
// One goroutine drives the loop (Run, or Step from tests); Submit, Snapshot
// and Stream methods are safe from any goroutine. With overlap the runner's
// Execute runs on the pipeline's stream goroutine, never concurrently with
// itself. Nothing on the step path allocates in steady state: step buffers
// are double-buffered, per-seat block-table rows and per-request buffers are
// reused, and stream output is appended to per-request buffers the consumer
// drains (Recv), so a slow consumer never blocks the loop.
package executor
