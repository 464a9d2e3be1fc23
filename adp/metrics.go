package adp

import (
	"sync"

	"github.com/turnstile-llm/turnstile/executor"
)

// RankMetrics are one rank's counters (since start) and its state at the
// last gather.
type RankMetrics struct {
	Routed, RoutedTokens uint64
	Steps, DummySteps    uint64
	// GathersRetiring counts the gathers at which the rank held a retiring
	// request (how often this rank was the one penalised, over time).
	GathersRetiring uint64
	// At the last gather.
	Active, Waiting, Retiring int
}

// Metrics is a snapshot of the deployment.
type Metrics struct {
	Iterations uint64 // lockstep iterations run
	IdleWaits  uint64 // times the loop found every rank idle and blocked
	Submitted  uint64
	Routed     uint64
	Refused    uint64 // a rank's Submit failed (the handle carries the error)
	Cancelled  uint64 // cancelled while queued
	Queued     int
	Ranks      []RankMetrics
}

// gathered records every rank's state at this gather (states: every rank's).
func (m *Metrics) gathered(states []RankState) {
	for i := range states {
		rm, s := &m.Ranks[i], &states[i]
		rm.Active, rm.Waiting, rm.Retiring = s.Active, s.Waiting, s.Retiring
		if s.Retiring > 0 {
			rm.GathersRetiring++
		}
	}
}

// routed records a request of tokens prompt tokens placed on rank r.
func (m *Metrics) routed(r, tokens int) {
	rm := &m.Ranks[r]
	rm.Routed++
	rm.RoutedTokens += uint64(tokens)
	m.Routed++
}

// stepped records one step of rank r (busy: real work, else a dummy step).
func (m *Metrics) stepped(r int, busy bool) {
	rm := &m.Ranks[r]
	rm.Steps++
	if !busy {
		rm.DummySteps++
	}
}

func (m *Metrics) clone() Metrics {
	c := *m
	c.Ranks = append([]RankMetrics(nil), m.Ranks...)
	return c
}

// copyInto copies m into dst, reusing dst.Ranks.
func (m *Metrics) copyInto(dst *Metrics) {
	ranks := append(dst.Ranks[:0], m.Ranks...)
	*dst = *m
	dst.Ranks = ranks
}

// remoteMetrics is a rank's executor metrics as last sent to process 0.
type remoteMetrics struct {
	m  executor.Metrics
	ok bool
}

// rankReport is one rank's executor metrics as they arrived at process 0.
type rankReport struct {
	rank int
	m    executor.Metrics
}

// board is what the loop publishes for readers on any goroutine: its
// metrics as of the last iteration and, on process 0 across processes, the
// executor metrics each rank elsewhere last sent.
type board struct {
	mu     sync.Mutex
	pub    Metrics
	remote []remoteMetrics // len: every rank, on process 0 across processes
}

// publish makes the loop's metrics (m) what Snapshot returns.
func (b *board) publish(m *Metrics) {
	b.mu.Lock()
	m.copyInto(&b.pub)
	b.mu.Unlock()
}

// report records rank metrics that arrived at process 0.
func (b *board) report(r rankReport) {
	b.mu.Lock()
	b.remote[r.rank] = remoteMetrics{m: r.m, ok: true}
	b.mu.Unlock()
}

func (d *Deployment) publish() {
	d.m.Queued = len(d.queue)
	d.board.publish(&d.m)
}

// Snapshot returns the metrics as of the last iteration.
func (d *Deployment) Snapshot() Metrics {
	d.board.mu.Lock()
	defer d.board.mu.Unlock()
	return d.board.pub.clone()
}

// RemoteSnapshot is, on process 0, the executor metrics rank last sent
// from its process (ok false before any arrived, for a rank of this
// process, or on other processes). Safe from any goroutine.
func (d *Deployment) RemoteSnapshot(rank int) (executor.Metrics, bool) {
	d.board.mu.Lock()
	defer d.board.mu.Unlock()
	if rank < 0 || rank >= len(d.board.remote) || !d.board.remote[rank].ok {
		return executor.Metrics{}, false
	}
	return d.board.remote[rank].m, true
}
