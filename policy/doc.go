// Package policy is program-aware admission: it groups the turns of agentic
// programs, keeps an ACTIVE program's KV pinned between turns, pauses and
// resumes programs so that the KV they are charged for fits the pool, and
// accounts for them under one of three accountings: each program's tokens
// plus a buffer, the distinct KV blocks of all programs plus a growth
// reserve each, or the first with pause thresholds (docs/experiments.md
// cites the study they come from).
//
// The Controller is the one owner of program state (turns, ACTIVE and
// PAUSED, pins); the engine asks it, never keeps a copy. Accounting names
// how programs are charged: TokenAccounting, BlockAccounting and
// PausingAccounting, "tokens", "blocks" and "pausing" in flags and
// metrics (ParseAccounting also takes the study's names A, B and C).
// Every policy parameter's rule is stated once, in Config.Validate.
//
// # Programs
//
// A program is named by an id carried on its requests. Its lifecycle state is
// WAITING (new, never admitted), ACTIVE, PAUSED or TERMINATED (forgotten);
// an ACTIVE program's status is REASONING (a turn admitted or in flight) or
// ACTING (between turns, its tool running). A program's tokens are its
// context on its latest turn: the turn's prompt, grown by what the turn
// generates. A program ends on Release or after Config.Lease without a turn.
//
// ACTIVE ACTING programs hold a kvpool pin of their full blocks, owned by the
// Controller, so their next turn finds its context cached. A paused program
// holds nothing: its next turn recomputes whatever was evicted meanwhile.
//
// # Accounting (capacity = the pool's NumBlocks × BlockSize tokens)
//
//   - tokens (and pausing): used = Σ over ACTIVE programs of tokens × weight + Buffer,
//     weight 1 for REASONING and ActingTokenWeight for ACTING.
//   - blocks: used = (distinct blocks referenced by ACTIVE programs) × BlockSize,
//     plus the estimates of ACTIVE turns not yet started, plus Reserve ×
//     |ACTIVE|.
//     A per-block count of the ACTIVE programs referencing each block is
//     updated only for the program whose membership or blocks change, so a
//     family shared by several programs stays charged once while any ACTIVE
//     member still references it. An admitted turn has no blocks until the
//     engine starts it; until then it is charged its estimate (its tokens
//     minus its prefix-cache hit, in whole blocks), which assumes the hit is
//     already charged to another ACTIVE program.
//
// Both accountings are maintained whichever is configured (Metrics reports
// both); the configured one decides.
//
// # Decisions, at step boundaries (Tick) and on admission (Admit)
//
// Pausing: when used > PauseThreshold × capacity, the smallest ACTIVE ACTING
// program is paused (its pin released) until used ≤ PauseTarget × capacity;
// when none is left, the smallest REASONING program is marked and paused when
// its turn ends. Marks are cleared once used is back under the threshold.
// The last unmarked ACTIVE program is never paused (alone, it would be
// resumed at once).
//
// Resuming and admitting share one queue: programs with a pending turn that
// were paused, then new programs, then paused ACTING programs; within a class
// by effective size tokens / (1 + wait/AgingTau), ascending, so a large
// program's effective size shrinks while it waits. The best candidate is
// resumed while used + its estimate ≤ (PauseThreshold − ResumeHysteresis) ×
// capacity and fewer than MaxActive programs are ACTIVE. When it does not
// fit it stays the head until resumed (unless a higher class gets
// candidates) and nothing behind it is resumed: once aging makes a program
// the head, its wait ends as soon as room frees, so it cannot be starved.
// A pending turn that has waited ForcedResume is resumed even if it does not
// fit (pausing an ACTING program when the seats are full), and when nothing
// is ACTIVE the best candidate is resumed regardless: nothing waits forever.
// No resume follows a pause in the same Tick. A new program arriving with
// nothing queued ahead of it is decided at once by Admit.
//
// # Driving it (the engine's calls)
//
//   - every step boundary: Tick;
//   - a turn at the head of the waiting queue: Admit (Runnable first, to
//     skip the prefix lookup of a turn that waits); when admitted and its
//     sequence exists: Started; when it cannot start: Preempted;
//   - after appending to a running turn: Grew (optional: Tick observes it);
//   - recompute preemption: Preempted; finish or abort: TurnEnded before the
//     sequence is released (it pins from it); a waiting turn withdrawn:
//     TurnEnded; the program's explicit end: Release.
//
// # Concurrency
//
// A Controller is not safe for concurrent use: like kvpool, it belongs to the
// executor's loop goroutine.
package policy
