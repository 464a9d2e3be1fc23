// Package executor is the engine: request lifecycle, scheduler and step loop.
// It owns every decision about what runs; a Runner (the CPU runner in model,
// the simulated one in sim) executes one step.Batch per step.
//
// # Lifecycle
//
// A request is in one State:
//
//	   ┌──── preempt ─────┐
//	   ▼                  │
//	WAITING ──admit──▶ RUNNING (chunked prefill, then decode) ──last token──▶ FINISHED
//	   │                  │
//	   └───── abort ──────┴──▶ ABORTED
//
// Preemption is by recompute: the request's tokens so far become its
// prompt. An abort comes from the request's context or the engine's
// shutdown.
//
// Each transition gives back exactly what the request holds, exactly once:
// leaving RUNNING, its seat (seatpool) and KV sequence (kvpool); ending
// (FINISHED or ABORTED), its program turn (see Programs). Engine.Check
// proves it.
//
// RETIRING is a seat's state (seatpool.Retiring), not a request's: a seat
// that a launched, unprocessed step still uses when its request leaves
// RUNNING (finished, aborted or preempted) is given back only when that
// step is processed (its teardown), with the request's blocks unless a
// preemption released them at once (see Overlap). The request has moved on
// meanwhile: its stream has its finish, or it waits to be recomputed.
// Metrics.Retiring and RankLoad count a finished request's retiring seat as
// a retiring request.
//
// A request's state is grouped by its owners (seq.go): what it is and
// where it is in its lifecycle, its KV sequence and prefix chain (kvpool),
// its seat (seatpool, and the per-seat consumers that follow it, such as
// the guided decoder), its part in its program's turn (the program
// policy), and its stop conditions, text, stream and usage.
//
// # Sizing
//
// Config.DeriveSeats is the engine's sizing rule over seatpool.Seats and
// the seat count's one source: New sizes its seat pool with it and checks
// every seat-indexed consumer against the pool once, in both directions
// (the runner's Capacity.Seats, the block-table rows, the guided decoder's
// matcher slots); whoever builds an engine sizes its runner with the same
// call.
//
// # Scheduler, per step
//
// The step has a token budget (MaxNumBatchedTokens) and a sequence budget
// (MaxBatchSize). Running requests are served first, oldest admission first:
// decodes (one token each), then the next chunk of partially prefilled ones;
// then waiting requests are admitted in arrival order (preempted ones go back
// to the front), each with a kvpool prefix lookup and program admission
// (the program policy), while the token budget, the sequence budget, seats and
// blocks allow (a turn the program policy holds back is skipped). When a
// running request cannot get a block, the newest running request not already
// in this step is preempted by recompute (its blocks and seat are released,
// its tokens so far become its new prompt); a lone request that cannot grow
// even then finishes with "length".
//
// Every planned step is grouped by shared leading blocks (step.Grouper):
// sequences whose block tables begin with at least Config.CascadeMinBlocks
// of the same block ids share a prefix's KV, which the runner may attend
// to once for the group (cascade attention).
//
// # Overlap
//
// With Config.Overlap, step n+1 is planned and launched (overlap.Pipeline)
// while step n runs; then n's results are processed. A request sampled in n
// decodes in n+1 with step.FutureToken as input: the runner substitutes the
// token from its own per-seat row, with no host round trip. kvpool learns the
// token's value when n is processed: its slot is reserved when n+1 is
// planned (kvpool.Pool.Reserve allocates the block when the slot opens one, so
// the runner writes the KV into the sequence's own block, with no copy) and
// filled when n is processed (kvpool.Pool.Fill), and only then is a block it
// completes hashed and published. When no block is available for the slot,
// the request skips n+1 and decodes in n+2 with the known token. A finish
// known in advance (max tokens, context length) is never planned into n+1.
// A finish seen only when n is processed (EOS, stop token, stop string)
// ends the request at once (the user sees the finish) and leaves its seat
// and blocks RETIRING in n+1: its n+1 output is discarded and they are
// released when n+1 is processed (teardown).
//
// Retiring requests are not charged against admission or the step budgets
// (Config.Ablation.ChargeRetiring restores that charging, to measure what it costs) but they count for liveness: the loop blocks waiting for work
// only when nothing is running, retiring or in flight.
//
// The ordering rule that makes early release safe: the runner executes steps
// in launch order, so a block or seat released while a step that used it is
// still in flight may be handed to a later step. Preemption uses that for
// blocks (it needs them now); seats of requests in flight always retire.
//
// # Programs (Config.Programs)
//
// With a program policy (package policy: tokens, blocks or pausing), requests that carry a
// ProgramID are turns of agentic programs; requests without one bypass it.
// The engine drives the policy's Controller from the loop goroutine through
// one hook, admission (noPolicy without a policy, so no call site asks
// whether there is one):
//
//   - every Step begins with Tick (pauses, resumes, leases);
//   - admission asks Admit for a waiting turn, first to register it and then
//     only while its program is ACTIVE (Runnable); a turn the policy holds
//     back (a new program that does not fit, a paused one) is skipped, so
//     it never blocks the queue behind it. A program runs one turn at a
//     time: its other requests wait, in order, until the turn ends;
//   - a turn's sequence is handed over (Started) only when its prompt is
//     fully appended: until then the policy charges its estimate, not the
//     blocks chunked prefill has appended so far, and the program keeps its
//     previous pin. Appends afterwards (including a future token's Fill)
//     are reported with Grew;
//   - recompute preemption calls Preempted before the sequence is released,
//     and so does an admitted turn that cannot start (no blocks); a finish or abort calls TurnEnded before it (the program pins its full
//     blocks from it), a withdrawn waiting turn calls TurnEnded too, and
//     Request.ProgramRelease, ReleaseProgram (the server's DELETE, applied
//     at the next step boundary) and Close call Release.
//
// The liveness rule: when nothing runs, retires or is in flight and the next
// request still lacks blocks (or a lone request cannot grow), only pins hold
// the pool, and the engine ends the pinned program with the most tokens
// (Metrics.PinsDropped) rather than wait for a lease. Policy pins are why
// Check proves kvpool's referenced blocks exactly only while no program is
// ACTIVE; the Controller's Check, which Engine.Check runs, proves the pins.
//
// # Structured output (Config.Guide)
//
// A request with a Grammar is constrained by the guided decoder (package
// guided), one matcher slot per seat: its matcher starts at its seat's
// first sampled step (replaying its output after a preemption), reads
// every delivered token and is freed when the request leaves. Each step's
// token masks are a step.Masks the runner waits on before sampling: filled
// at plan time, or, for a token still in flight under overlap, right after
// the previous step is processed, while this step's forward pass runs
// (guided.go). A matcher that fails ends its request aborted, with
// Delta.Err. Without a guided decoder, a request with a grammar is refused.
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
//
// # Simulated time
//
// A runner that spends simulated time implements StepSpender: the engine
// calls SpendStep on its own goroutine as it processes each step's results,
// in step order, so a virtual clock moves at a deterministic point even with
// overlap (sim.Runner with DeferSpend, sim.Recorder with SpendOn). Flush
// processes the steps in flight without launching one, for an
// attention-DP rank that must see its step's results before the next gather
// (adp's "early" ranks).
package executor
