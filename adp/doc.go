// Package adp runs attention-DP ranks: N ranks, each its own executor (KV
// pool, seats, runner or device), stepping in lockstep behind one global
// queue, with one gather point per step where every rank's load is computed
// and every router reads it.
//
// # The iteration
//
// Deployment.Step is one lockstep iteration, as attention-DP runs it:
//
//  1. Gather: every rank fills a RankState (active, waiting and retiring
//     requests and tokens, and for the routing window each queued request's
//     prefix hit and program residency on that rank). Gather turns the
//     states into Loads. This is the only place load is computed, so the
//     retiring correction applies to every router at once. RankState is
//     plain data, so the gather can become an MPI allgather (one process per
//     GPU) without touching the routers: every process then holds the same
//     queue, gathers the same states, computes the same (deterministic)
//     assignment and keeps its own share.
//  2. Admission: each rank may take Room = Capacity − (Active + Waiting)
//     new requests; retiring requests are excluded (Policy.ChargeRetiring
//     counts them, for experiments that measure the rule).
//  3. Placement: the Router assigns the admitted window to ranks.
//  4. Every rank steps at once, one goroutine per rank; a rank without work
//     runs a dummy step; the iteration ends when every rank's step has.
//
// # Three quantities, kept apart
//
//   - Admission (how many enter): Loads.Room; retiring excluded.
//   - Placement (which rank): Loads.Count and Loads.Load. A rank that has
//     just retired work looks lightest, yet it still tears down in the next
//     step. Decision: placement does not add retiring work back. A retiring
//     request takes no compute in the next step, which is what placement
//     balances, and its seat comes from the overlap headroom; leaving it out
//     entirely (not even as a tie-break) makes FIX route exactly as the plain
//     loop (OVLOFF) does, to the request. Policy.PlaceRetiring adds it back
//     for experiments. Its effect shows only where placement, not admission,
//     decides (a window smaller than the room): BenchmarkLadder's last,
//     partial window then avoids the rank still tearing down, which finishes
//     the run one teardown step sooner, and FIX's routing no longer equals
//     OVLOFF's.
//   - Liveness: live = active + waiting + retiring (RankState.Live). A rank
//     with no live request and an empty queue may block (MayBlock); any other
//     must step, or its retiring requests are never torn down. Since ranks
//     step together, the deployment blocks only when every rank may.
//
// # Routers
//
// LoadBalanced (default) balances prompt tokens, request count as
// tie-break, under a fair-share cap; CacheAware balances the tokens not
// already cached on each rank, weighted against load; ProgramAware keeps a
// program on the rank where it is resident while that rank has room. All are
// deterministic: the same loads give the same assignment.
//
// # The retiring ladder, worked out for this loop
//
// Context-only requests (one step each), max batch B = 2, a saturated queue,
// overlap on. A request admitted in step n has its last token in flight at
// the next gather: it is retiring there and is torn down while step n+1
// runs. Let r_i be rank i's retiring requests at a gather. BASE charges
// them, so rank i is admitted 2 − r_i; FIX admits 2.
//
// When every rank holds at most one retiring request, a rank holding one
// (penalised: half its two-seat batch over-reported, "a factor of two") is
// admitted 1 and every other rank 2. With k penalised ranks the gather
// admits 2dp − k requests, so a penalised rank's share is 1/(2dp − k) and
// an unpenalised one's 2/(2dp − k); k = 0 gives 1/dp. TestLadder asserts
// this at every such gather, from the metrics.
//
// Over a run, r_i(n+1) = 2 − r_i(n) on a rank whose retiring requests are
// still resident at the gather ("late"): it stays at one (one seat
// permanently held: occupancy exactly 1.000, the seed's glm-5 row) or
// alternates 2, 0 (a full batch, then a dummy step). Either way it runs one
// request per step, against two on a rank whose requests are torn down
// before it reaches the gather. So with k late ranks the cumulative shares
// are the rungs, the role's capacity is dp − k/2 per step, and BASE runs at
// 1 − k/(2dp) of FIX: +33% at dp = 2 and +14% at dp = 4 for k = 1 (the seed
// measured +27.3% and +11.5%, the same model over-predicting by 2–4 pp
// there), +100% for k = dp. That assumes a step costs the same whatever
// its batch (so a healthy rank's full batch sets every iteration's time):
// with k = dp and step time that scales with the batch (a half batch
// about half, an empty iteration nothing, as on the simulated lockstep of
// bench/adprun) BASE loses only per-step fixed costs. Which ranks are
// late is timing: in this
// in-process lockstep loop every overlapping engine is late (k = dp); the
// seed's k = 1 runs have one. EngineRank.SetEarly chooses it on real
// engines: an early rank flushes its step (executor.Engine.Flush) before
// the gather, so only the other ranks are late and k is their number. The
// ladder tests set k per rank (a simulated rank processing its step before
// the gather, or early engine ranks) and assert rank 0's logged share is
// its rung and the throughput ratio is 1 − k/(2dp). FIX and OVLOFF
// admit two per rank per step whatever the timing: share 1/dp, with
// identical per-rank counts.
//
// # Flags the CLI wires
//
// --dp N builds N ranks and New(cfg, ranks); --charge-retiring sets
// Policy.ChargeRetiring together with each rank's executor.Config
// ChargeRetiring (BASE); --no-overlap turns each rank's overlap off
// (OVLOFF).
package adp
