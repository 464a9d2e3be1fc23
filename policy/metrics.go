package policy

import (
	"slices"
	"time"

	"github.com/turnstile-llm/turnstile/kvpool"
)

// counters are the Controller's cumulative event counts.
type counters struct {
	admitted, resumes, forced, pauses, expired, released, lost uint64
	waits                                                      uint64
	waitTotal, waitMax                                         time.Duration
	peakActive                                                 int // most programs ACTIVE at once
}

// Metrics is a snapshot of the Controller (cumulative counts since New).
type Metrics struct {
	Accounting Accounting
	// Programs by state; Reasoning + Acting = Active. Marked REASONING
	// programs pause when their turn ends.
	Waiting, Active, Paused, Reasoning, Acting, Marked int
	// PeakActive is the most programs ACTIVE at once since New, counted
	// exactly at every change rather than sampled.
	PeakActive int
	// Admitted counts new programs made ACTIVE; Resumes paused ones made
	// ACTIVE again; ForcedResumes those of both that waited ForcedResume.
	Admitted, Resumes, ForcedResumes, Pauses uint64
	// Expired counts programs ended by their lease, Released explicit ends.
	Expired, Released uint64
	// LostSequences counts live sequences the engine released without
	// Preempted or TurnEnded (a protocol error; Check reports it).
	LostSequences uint64
	// Capacity is the pool's tokens; Used the configured accounting's used
	// tokens; UsedTokens and UsedBlocks both accountings' (pausing uses
	// tokens'), maintained under every accounting.
	Capacity   int
	Used       float64
	UsedTokens float64
	UsedBlocks int
	// DistinctBlocks is the blocks accounting's count of distinct blocks of ACTIVE programs.
	DistinctBlocks int
	// AdmissionWaits counts turns that were queued or admitted (new programs
	// and pending turns of paused ones), with their total and longest wait.
	AdmissionWaits     uint64
	AdmissionWaitTotal time.Duration
	AdmissionWaitMax   time.Duration
}

// Metrics returns a snapshot. O(1).
func (c *Controller) Metrics() Metrics {
	return Metrics{
		Accounting:         c.cfg.Accounting,
		Waiting:            c.queues[classNew].n,
		Active:             c.nActive,
		PeakActive:         c.m.peakActive,
		Paused:             c.queues[classPending].n + c.queues[classActing].n,
		Reasoning:          len(c.reasoning),
		Acting:             len(c.acting),
		Marked:             c.nMarked,
		Admitted:           c.m.admitted,
		Resumes:            c.m.resumes,
		ForcedResumes:      c.m.forced,
		Pauses:             c.m.pauses,
		Expired:            c.m.expired,
		Released:           c.m.released,
		LostSequences:      c.m.lost,
		Capacity:           c.capacity,
		Used:               c.used(),
		UsedTokens:         c.UsedTokens(),
		UsedBlocks:         c.UsedBlocks(),
		DistinctBlocks:     c.distinct,
		AdmissionWaits:     c.m.waits,
		AdmissionWaitTotal: c.m.waitTotal,
		AdmissionWaitMax:   c.m.waitMax,
	}
}

// ProgramInfo is one program as the Controller sees it.
type ProgramInfo struct {
	State State
	// Status is REASONING for a turn admitted, in flight or pending (also
	// while WAITING or PAUSED), else ACTING.
	Status  Status
	Tokens  int
	Marked  bool
	Pinned  bool // holds a pin (ACTIVE ACTING)
	Running bool // a started turn's sequence is live
}

// Program reports program id, if known.
func (c *Controller) Program(id string) (ProgramInfo, bool) {
	p := c.progs[id]
	if p == nil {
		return ProgramInfo{}, false
	}
	st := p.status
	if p.state != StateActive {
		st = StatusActing
		if p.pending {
			st = StatusReasoning
		}
	}
	return ProgramInfo{State: p.state, Status: st, Tokens: p.tokens, Marked: p.marked,
		Pinned: p.handle != kvpool.InvalidSeq && !p.live, Running: p.live}, true
}

// Known reports whether the Controller knows program id (in any state). It
// is the one method safe from any goroutine, concurrently with the driver:
// the server's DELETE asks it without waiting for a step boundary. O(1).
func (c *Controller) Known(id string) bool {
	c.mu.Lock()
	_, ok := c.progs[id]
	c.mu.Unlock()
	return ok
}

// HasTurn reports whether program id has a turn registered: admitted, in
// flight, or pending admission (its Status is REASONING) — from the Admit
// that registers a turn until its TurnEnded or the program's end. A
// program runs one turn at a time, so an engine holds a program's other
// requests back while this is true. O(1); false for unknown programs.
func (c *Controller) HasTurn(id string) bool {
	p := c.progs[id]
	if p == nil {
		return false
	}
	if p.state == StateActive {
		return p.status == StatusReasoning
	}
	return p.pending
}

// IDs appends the ids of every program the Controller knows to dst, sorted.
// O(programs log programs); for shutdown and checks, not the step path.
func (c *Controller) IDs(dst []string) []string {
	n := len(dst)
	for id := range c.progs {
		dst = append(dst, id)
	}
	slices.Sort(dst[n:])
	return dst
}

// MostPinned is the program holding a pin (between turns, its KV kept)
// with the most tokens, the smallest id on ties; false when none holds a
// pin. O(programs), for an engine that must free blocks only pins hold.
func (c *Controller) MostPinned() (id string, ok bool) {
	most := -1
	for pid, p := range c.progs {
		if p.handle != kvpool.InvalidSeq && !p.live && (p.tokens > most || p.tokens == most && pid < id) {
			id, most = pid, p.tokens
		}
	}
	return id, most >= 0
}

// Pins appends to dst the kvpool handles of the pins the Controller holds
// (one per program between turns that keeps its KV), so an engine can prove
// that every referenced block has an owner. O(programs); for checks, not
// the step path.
func (c *Controller) Pins(dst []kvpool.SeqID) []kvpool.SeqID {
	for _, p := range c.progs {
		if p.handle != kvpool.InvalidSeq && !p.live {
			dst = append(dst, p.handle)
		}
	}
	return dst
}

// ByState counts programs by state, keyed "waiting", "active" and "paused"
// (the server's /metrics labels). On a merged snapshot (Merge) it counts
// every rank's programs.
func (m *Metrics) ByState() map[string]int {
	return map[string]int{"waiting": m.Waiting, "active": m.Active, "paused": m.Paused}
}

// Merge adds another Controller's snapshot into m (one per attention-DP
// rank): counts, capacities and used tokens add; the longest wait is the
// larger; Accounting is kept (every rank runs the same accounting).
func (m *Metrics) Merge(o *Metrics) {
	if m.Accounting == 0 {
		m.Accounting = o.Accounting
	}
	m.Waiting += o.Waiting
	m.Active += o.Active
	m.PeakActive += o.PeakActive // ranks' peaks need not coincide: an upper bound
	m.Paused += o.Paused
	m.Reasoning += o.Reasoning
	m.Acting += o.Acting
	m.Marked += o.Marked
	m.Admitted += o.Admitted
	m.Resumes += o.Resumes
	m.ForcedResumes += o.ForcedResumes
	m.Pauses += o.Pauses
	m.Expired += o.Expired
	m.Released += o.Released
	m.LostSequences += o.LostSequences
	m.Capacity += o.Capacity
	m.Used += o.Used
	m.UsedTokens += o.UsedTokens
	m.UsedBlocks += o.UsedBlocks
	m.DistinctBlocks += o.DistinctBlocks
	m.AdmissionWaits += o.AdmissionWaits
	m.AdmissionWaitTotal += o.AdmissionWaitTotal
	m.AdmissionWaitMax = max(m.AdmissionWaitMax, o.AdmissionWaitMax)
}
