package adp

// decision is one iteration's agreed decision. Every process of a
// deployment computes it from the same gathered rows under the same rules,
// so every process takes the same branches and enters the same collectives
// in the same order without a message more: the transport (the gather,
// the bulletin, the match report, the output gather) only moves rows, and
// the decision is computed from them alone, never from what one process
// knows by itself (its queue, its streams, its history).
//
// decide fills all but the placements, which need two rows that follow it
// (the bulletin's pending requests and the match report); place fills
// those. Its slices are reused across iterations.
type decision struct {
	// stop: a process is shutting down (ProcState.Stop); every process
	// stops at this gather, once its output is gathered.
	stop bool
	// output is the bytes the processes send process 0 at this gather
	// (Σ ProcState.Out, 0 with one process); an output gather follows
	// when it is > 0.
	output int
	// idle: no request queued, no control to broadcast, nothing owed to
	// process 0 and every rank may block (MayBlock): no rank steps, and
	// the loop waits for work.
	idle bool
	// admit is how many of process 0's queued requests this iteration
	// places, in queue order (the pending requests): min(queued,
	// Config.MaxPlaced, Loads.Admit).
	admit int
	// bulletin: process 0 broadcasts its bulletin (the pending requests,
	// when other processes must learn them; aborts and releases).
	bulletin bool
	// match is what the router reads of the ranks' match reports for the
	// pending requests; none: no match allgather.
	match Needs
	// loads is the gathered load (ComputeLoads over the gathered states,
	// which it aliases); place consumes its room.
	loads Loads
	// placements[j] is the rank of pending request j, -1 when no rank has
	// room; len admit once place ran, empty before.
	placements []int
}

// decide computes the iteration's decision into dec from the gathered rows:
// every rank's state (states, rank-major; dec.loads aliases it) and every
// process's words (procs, process 0's first), under the rules every
// process is configured with alike: the router r (only what it reads),
// maxPlaced (> 0) and the ablation a. It reads nothing else, so processes
// that gathered the same rows reach the same value.
func decide(states []RankState, procs []ProcState, r Router, maxPlaced int, a Ablation, dec *decision) {
	dec.stop, dec.idle, dec.bulletin = false, false, false
	dec.output, dec.admit, dec.match = 0, 0, Needs{}
	dec.placements = dec.placements[:0]
	open := 0
	for q := range procs {
		p := &procs[q]
		dec.stop = dec.stop || p.Stop
		open += p.Open
		if len(procs) > 1 {
			dec.output += p.Out
		}
	}
	ComputeLoads(states, a, &dec.loads)
	if dec.stop {
		return
	}
	front := &procs[0] // process 0 holds the queue and the control
	if front.Queued == 0 && front.Control == 0 && open == 0 && allMayBlock(states) {
		dec.idle = true
		return
	}
	dec.admit = min(front.Queued, maxPlaced, dec.loads.Admit)
	dec.bulletin = (len(procs) > 1 && dec.admit > 0) || front.Control > 0
	if mr, ok := r.(MatchReader); ok && dec.admit > 0 {
		dec.match = mr.Reads()
	}
}

// place routes the pending requests (len dec.admit, in process 0's queue
// order, as its bulletin carries them) with r on dec.loads, whose States
// carry the ranks' match reports when dec.match asked for them, into
// dec.placements. Like decide, it reads only rows every process holds
// alike.
func (dec *decision) place(r Router, pending []Pending) {
	dec.placements = resize(dec.placements, dec.admit)
	r.Route(&dec.loads, pending, dec.placements)
}

// allMayBlock: every rank may block (no live request anywhere).
func allMayBlock(states []RankState) bool {
	for i := range states {
		if !MayBlock(&states[i], 0) {
			return false
		}
	}
	return true
}
