// Package seatpool owns sequence seats: the one definition of how many
// sequences may be live at once, O(1) leases of a seat index, and the start-up
// check that every seat-indexed consumer agrees with that number.
//
// # Why one definition
//
// A seat is the row a live sequence occupies in every seat-indexed structure:
// block-table rows, sampler state, runner buffers, speculative-decoding state.
// If those structures each derive their row count from the batch size on their
// own, the formulas drift apart; a pool larger than a consumer hands out a
// seat index the consumer cannot hold (a crash mid-run), and a pool smaller
// than admission assumes leaves admitted work without a seat (it is deferred
// straight back: lost throughput). [Seats] is the only place the number is
// derived, and [Pool.Validate] checks every consumer against it in both
// directions at start-up. The engine's configuration is the number's one
// source (executor.Config.DeriveSeats calls [Seats]): executor.New sizes its
// pool with it and validates the consumers against the pool, once; whoever
// builds the engine sizes the runner (its Capacity.Seats) with the same
// call.
//
// # The derivation
//
//	seats = MaxBatchSize + headroom
//	headroom = MaxBatchSize   if Overlap && DeferredTeardown
//	         = 0              otherwise
//
// One step schedules at most MaxBatchSize sequences, so MaxBatchSize seats are
// always needed. With the overlap scheduler on, step n+1 is planned while step
// n runs, so a request whose last token comes out of step n is only seen as
// finished, and torn down, during step n+1. If teardown is deferred like that,
// the request is retiring for one iteration: never scheduled again, yet still
// holding its seat. In the worst case every one of the MaxBatchSize sequences
// of step n finishes at once and stays resident while step n+1 admits a full
// batch of new ones, so one iteration of teardown headroom is MaxBatchSize
// more seats. Without overlap (or with immediate teardown) a finished request
// frees its seat before the next batch is built, and no headroom is needed.
//
// # States and counts
//
// Each seat is in exactly one [State]: [Free], [Live] (admitted, schedulable)
// or [Retiring] (finished, awaiting teardown). [Pool.Live] is what admission
// charges; [Pool.Live] + [Pool.Retiring] is what liveness counts, since a
// retiring sequence is still resident. Keeping those two counts apart is the
// point: charging retiring seats against admission starves a rank, and not
// counting them for liveness lets it block while its peers wait on it.
//
// A Pool is not safe for concurrent use; its owner (the executor's step loop)
// serializes every call.
package seatpool
