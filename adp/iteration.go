package adp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
)

// errStopped ends Step on every process when one of them stops.
var errStopped = errors.New("adp: a process of the deployment stopped")

// Step runs one lockstep iteration. It reports idle, without stepping any
// rank, when the queue is empty and every rank may block (MayBlock); Run
// then waits for work. Step must not be called concurrently with Run or
// itself; across processes every process calls it the same number of
// times.
func (d *Deployment) Step() (idle bool, err error) {
	if d.stopped {
		return false, ErrClosed
	}
	defer d.wd.watch(d.lastIdle, d.m.Iterations)()
	if d.proc == 0 {
		d.drain()
	}
	d.localLivenessWait()

	// Gather: one fixed-size exchange of every rank's counts and every
	// process's own words; then the output of requests served elsewhere.
	if err := d.gather(); err != nil {
		return false, err
	}
	if err := d.gatherOutput(); err != nil {
		return false, err
	}
	for q := range d.ps {
		if d.ps[q].Stop {
			return false, errStopped
		}
	}
	ComputeLoads(d.states, d.cfg.Ablation, &d.loads)
	d.m.gathered(d.states)
	queued, control, open := d.ps[0].Queued, d.ps[0].Control, 0
	for q := range d.ps {
		open += d.ps[q].Open
	}
	if queued == 0 && control == 0 && open == 0 && d.allMayBlock() {
		d.lastIdle = true
		d.publish()
		return true, nil
	}
	d.lastIdle = false

	// Admit: every process computes the same n from the same rows.
	n := min(queued, d.maxPlaced, d.loads.Admit)
	d.pend.reset()
	if d.proc == 0 {
		d.pend.take(d.queue[:n])
	}
	if (d.procs > 1 && n > 0) || control > 0 {
		if err := d.broadcast(n); err != nil {
			return false, err
		}
	}

	// Match (for routers that read it) and place.
	if n > 0 {
		if wr, ok := d.router.(MatchReader); ok {
			if need := wr.Reads(); need.Hits || need.Resident {
				for i, r := range d.ranks {
					r.Match(&d.local[i], d.pend.reqs, need)
				}
				d.wd.enter("the match allgather (a peer has not entered it)")
				if err := d.wire.Matches(d.comm, d.local, d.states, d.maxPlaced); err != nil {
					return false, err
				}
			}
		}
		d.out = resize(d.out, n)
		d.router.Route(&d.loads, d.pend.view, d.out)
		if err := d.verify(d.out); err != nil {
			return false, err
		}
		d.hand(d.out)
	}
	return false, d.step()
}

// allMayBlock: every rank may block (no live request anywhere).
func (d *Deployment) allMayBlock() bool {
	for i := range d.states {
		if !MayBlock(&d.states[i], 0) {
			return false
		}
	}
	return true
}

// gather exchanges this process's ranks' states and its own words: every
// rank's state (d.states) and every process's words (d.ps) come back,
// alike on every process.
func (d *Deployment) gather() error {
	for i, r := range d.ranks {
		r.State(&d.local[i])
	}
	d.x.poll(d.ranks, d.first, d.local)
	d.me = ProcState{Queued: len(d.queue), Control: d.x.control(), Out: d.x.out(), Open: d.x.open(), Stop: d.stopping}
	d.wd.enter("the gather's allgather (a peer has not entered it)")
	// After an idle iteration the gather waits for process 0 to get work,
	// possibly for hours: it sleeps between polls instead of spinning.
	return d.wire.Gather(d.comm, d.local, d.states, &d.me, d.ps, d.lastIdle)
}

// gatherOutput brings process 0 the output of requests served elsewhere,
// when any process has some (every process knows from the gathered
// words).
func (d *Deployment) gatherOutput() error {
	total := 0
	for q := range d.ps {
		total += d.ps[q].Out
	}
	if d.procs == 1 || total == 0 {
		return nil
	}
	d.wd.enter("the output gather (a peer has not entered it)")
	reports, err := d.x.gatherOutput(d.comm, d.ps)
	d.board.report(reports)
	return err
}

// broadcast sends process 0's bulletin (aborts, releases, the n pending
// requests) to every process and applies its control; elsewhere the
// pending requests are the bulletin's.
func (d *Deployment) broadcast(n int) error {
	d.wd.enter("the bulletin's broadcast (a peer has not entered it)")
	b, err := d.x.broadcast(d.comm, d.pend.ids, d.pend.reqs)
	if err != nil {
		return err
	}
	if d.proc != 0 {
		if len(b.reqs) != n {
			return fmt.Errorf("adp: bulletin from process 0 has %d requests, this process admits %d", len(b.reqs), n)
		}
		d.pend.fromBulletin(b, d.cfg.Tokens)
	}
	d.x.apply(b, d.ranks)
	return nil
}

// verify allgathers a hash of this iteration's placements and fails when
// any process placed differently (Config.VerifyPlacement; otherwise it
// does nothing).
func (d *Deployment) verify(placements []int) error {
	if !d.cfg.VerifyPlacement {
		return nil
	}
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], d.m.Iterations)
	h.Write(b[:])
	for _, r := range placements {
		binary.LittleEndian.PutUint64(b[:], uint64(int64(r)))
		h.Write(b[:])
	}
	mine := [1]int64{int64(h.Sum64())}
	all := make([]int64, d.procs)
	d.wd.enter("the placement check's allgather")
	if err := d.comm.AllgatherInt64(mine[:], all); err != nil {
		return fmt.Errorf("adp: placement check: %w", err)
	}
	for q, v := range all {
		if v != all[0] {
			return fmt.Errorf("adp: placement check at iteration %d: process %d placed %d requests differently from process 0 (hash %x, want %x)",
				d.m.Iterations, q, len(placements), uint64(v), uint64(all[0]))
		}
	}
	return nil
}

// hand gives each placed pending request to its rank: this process's ranks
// get theirs; on process 0 a request placed in another process becomes a
// relay its output streams into. Process 0 keeps the unplaced ones queued
// in order.
func (d *Deployment) hand(placements []int) {
	L := len(d.ranks)
	for j, r := range placements {
		if r < 0 {
			continue
		}
		switch owner := r / L; {
		case d.proc == 0 && owner == 0:
			h := d.queue[j]
			s, err := d.ranks[r].Submit(h.ctx, h.req)
			if err != nil {
				d.m.Refused++
				h.finish(nil, r, fmt.Errorf("adp: rank %d refused the request: %w", r, err))
				continue
			}
			h.finish(s, r, nil)
		case d.proc == 0:
			h := d.queue[j]
			h.finish(d.x.relay(h, d.pend.ids[j], r), r, nil)
		case owner == d.proc:
			d.x.serve(d.ranks[r-d.first], d.pend.ids[j], d.pend.reqs[j])
		}
		// Routed on every process alike (a refusal elsewhere than here
		// travels back as an aborted stream, not as a count).
		d.m.routed(r, d.pend.view[j].Tokens)
	}
	if d.proc == 0 {
		d.dequeue(placements)
	}
	d.pend.reset() // the requests are the handles' (or ranks') now
}

// step steps every rank of this process at once and waits for all.
func (d *Deployment) step() error {
	d.wd.enter("its step")
	for i := range d.ranks {
		d.work[i] <- struct{}{}
	}
	var err error
	for range d.ranks {
		res := <-d.results
		d.m.stepped(d.first+res.rank, res.busy)
		if res.err != nil && err == nil {
			err = fmt.Errorf("adp: rank %d: %w", d.first+res.rank, res.err)
		}
	}
	d.x.stepped()
	d.m.Iterations++
	d.publish()
	return err
}
