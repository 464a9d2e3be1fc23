// Package adp runs attention-DP ranks: N ranks, each its own executor (KV
// pool, seats, runner or device), stepping in lockstep behind one global
// queue, with one gather point per step where every rank's load is computed
// and every router reads it.
//
// # The iteration
//
// Deployment.Step is one lockstep iteration, as attention-DP runs it, in
// phases of a few lines each (iteration.go):
//
//  1. Gather: every rank fills a RankState (active, waiting and retiring
//     requests and tokens); one allgather (Exchange.Gather) moves every
//     rank's counts and every process's own words (ProcState) to every
//     process. These are the rows.
//  2. Decide: every process computes one decision from the rows alone
//     (decide.go), so all take the same branches and enter the same
//     collectives: whether a process stops, whether the deployment is
//     idle, how many queued requests are placed, whether process 0
//     broadcasts, what the router reads; output owed to process 0 is
//     gathered right after. ComputeLoads turns the states into Loads
//     there: the only place load is computed, so the retiring correction
//     applies to every router at once. Admission: each rank may take
//     Room = Capacity − (Active + Waiting) new requests; retiring requests
//     are excluded (Ablation.Engine.ChargeRetiring counts them, for
//     experiments that measure the rule). At most Config.MaxPlaced queued
//     requests are placed per iteration: the pending requests.
//  3. Broadcast: process 0 broadcasts its bulletin (the pending requests,
//     aborts, program releases) when another process must learn it.
//  4. Match: for routers that read it (MatchReader) each rank reports, per
//     pending request, its prefix hit and program residency (Rank.Match),
//     exchanged in one more allgather (Exchange.Matches).
//  5. Place: the Router assigns the pending requests to ranks on the
//     decision's loads; every process places alike.
//  6. Hand: each process hands its own ranks theirs; process 0 relays the
//     output of those placed elsewhere.
//  7. Step: every rank steps at once, one goroutine per rank; a rank
//     without work runs a dummy step; the iteration ends when every rank's
//     step has.
//
// The decision is a pure function of the rows and of the rules every
// process holds alike (the router, Config.MaxPlaced, the Ablation):
// FuzzDecide runs the same rows on simulated processes with different
// histories and requires one value.
//
// # One process or many
//
// The same loop runs in one process or across processes. Collective is
// what the gather needs (defined here, so adp stays cgo-free): Local
// implements it in one process, dist/mpi's World across processes. Across
// processes the deployment needs a Comm: the gather plus a byte broadcast
// (process 0's bulletin) and a byte gatherv (output owed to process 0).
// The gather's wire format is Exchange's fixed-size int64 rows: CountWords
// per rank, then each process's ProcState (queued, control, output bytes,
// open, stop), and MatchWords(w) per rank for the match reports when the
// router is a MatchReader. The bulletin is a compact byte format whose
// reader checks every length (codec.go). Config.VerifyPlacement hashes
// every iteration's placements and stops the job if a process placed
// differently. Output of a request served in another process is polled
// there and gathered back to process 0 into an executor relay stream
// (executor.NewRelayStream), so the server reads it as any other. A
// watchdog (Config.Watchdog) names the process, its ranks and the
// collective it is stuck in, and ends the job through Config.OnStuck.
//
// Frontend puts a deployment behind the server's one-engine interface
// (Submit, Snapshot, ReleaseProgram, ProgramStates), so the server serves
// one engine or N ranks alike.
//
// # Three quantities, kept apart
//
//   - Admission (how many enter): Loads.Room; retiring excluded.
//   - Placement (which rank): Loads.Count and Loads.Load. A rank that has
//     just retired work looks lightest, yet it still tears down in the next
//     step. Decision: placement does not add retiring work back. A retiring
//     request takes no compute in the next step, which is what placement
//     balances, and its seat comes from the overlap headroom; leaving it out
//     entirely (not even as a tie-break) makes routing with overlap equal
//     routing without it, to the request. Ablation.PlaceRetiring adds it
//     back for experiments.
//   - Liveness: live = active + waiting + retiring (RankState.Live). A rank
//     with no live request and an empty queue may block (MayBlock); any other
//     must step, or its retiring requests are never torn down. Since ranks
//     step together, the deployment is idle only when every rank may block
//     and nothing is owed to process 0 (output, answers).
//
// # Routers
//
// LoadBalanced (default) balances prompt tokens, request count as
// tie-break, under a fair-share cap; CacheAware balances the tokens not
// already cached on each rank, weighted against load; ProgramAware keeps a
// program on the rank where it is resident while that rank has room. All are
// deterministic: the same loads give the same assignment.
//
// What charging retiring requests costs, rank by rank, is worked out in
// docs/experiments.md (the retiring ladder), and measured by turnstile bench
// adp. EngineRank.SetEarly chooses which engine ranks process their step
// before the gather (executor.Engine.Flush), which that derivation needs.
//
// # Experiment switches
//
// Ablation holds them, zero for serving: Engine is the one source of the
// ranks' engines' switches (executor.Ablation; New refuses engines built
// otherwise), PlaceRetiring adds retiring work back into placement, and
// LocalLiveness restores the broken liveness rule (a process whose ranks
// hold only retiring requests waits for work of its own instead of
// entering the gather its peers wait in).
//
// # Flags the CLI wires
//
// --dp N builds N ranks and New(cfg, ranks); --charge-retiring sets
// Ablation.Engine.ChargeRetiring; --no-overlap turns each rank's overlap
// off.
package adp
