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
//
// Its phases: gather the rows, decide from them alone (every process
// alike), gather the output owed to process 0, broadcast process 0's
// bulletin, match the pending requests, place them, hand each to its rank,
// step every rank.
func (d *Deployment) Step() (idle bool, err error) {
	if d.stopped {
		return false, ErrClosed
	}
	defer d.wd.watch(d.lastIdle, d.m.Iterations)()
	if d.proc == 0 {
		d.drain()
	}
	d.localLivenessWait()

	if err := d.gather(); err != nil {
		return false, err
	}
	dec := &d.dec
	decide(d.states, d.ps, d.router, d.maxPlaced, d.cfg.Ablation, dec)
	if err := d.gatherOutput(dec.output); err != nil {
		return false, err
	}
	if dec.stop {
		return false, errStopped
	}
	d.m.gathered(d.states)
	d.lastIdle = dec.idle
	if dec.idle {
		d.publish()
		return true, nil
	}
	if err := d.broadcast(dec); err != nil {
		return false, err
	}
	if dec.admit > 0 {
		if err := d.match(dec.match); err != nil {
			return false, err
		}
		dec.place(d.router, d.pend.view)
		if err := d.verify(dec.placements); err != nil {
			return false, err
		}
		d.hand(dec.placements)
	}
	return false, d.step()
}

// gather exchanges the rows: this process's ranks' states and its own
// words go out, every rank's state (d.states) and every process's words
// (d.ps) come back, alike on every process.
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

// gatherOutput brings process 0 the output of requests served elsewhere
// (bytes in all, as decided; none: no collective), and the metrics of
// their ranks, which it publishes before it delivers the output they
// count.
func (d *Deployment) gatherOutput(bytes int) error {
	if bytes == 0 {
		return nil
	}
	d.wd.enter("the output gather (a peer has not entered it)")
	return d.x.gatherOutput(d.comm, d.ps, d.board.report)
}

// broadcast makes the decided pending requests known to every process:
// process 0 takes them from its queue and, when decided, broadcasts its
// bulletin (them, aborts, program releases), whose control every process
// then applies.
func (d *Deployment) broadcast(dec *decision) error {
	d.pend.reset()
	if d.proc == 0 {
		d.pend.take(d.queue[:dec.admit])
	}
	if !dec.bulletin {
		return nil
	}
	d.wd.enter("the bulletin's broadcast (a peer has not entered it)")
	b, err := d.x.broadcast(d.comm, d.pend.ids, d.pend.reqs)
	if err != nil {
		return err
	}
	if d.proc != 0 {
		if len(b.reqs) != dec.admit {
			return fmt.Errorf("adp: bulletin from process 0 has %d requests, this process admits %d", len(b.reqs), dec.admit)
		}
		d.pend.fromBulletin(b, d.cfg.Tokens)
	}
	d.x.apply(b, d.ranks)
	return nil
}

// match asks this process's ranks what need says of the pending requests
// and exchanges the reports into d.states, which the decision's loads
// alias (none asked: no collective).
func (d *Deployment) match(need Needs) error {
	if !need.Hits && !need.Resident {
		return nil
	}
	for i, r := range d.ranks {
		r.Match(&d.local[i], d.pend.reqs, need)
	}
	d.wd.enter("the match allgather (a peer has not entered it)")
	return d.wire.Matches(d.comm, d.local, d.states, d.maxPlaced)
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
	clear(d.pend.reqs) // the requests are the handles' (or ranks') now
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
