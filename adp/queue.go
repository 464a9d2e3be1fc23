package adp

import (
	"context"
	"errors"
	"sync"

	"github.com/turnstile-llm/turnstile/executor"
)

// ErrNotFrontEnd is returned by Submit on a process other than 0: only
// process 0 takes requests.
var ErrNotFrontEnd = errors.New("adp: only process 0 of a deployment takes requests")

// Handle is a request queued in the deployment; Wait returns its stream once
// it is routed.
type Handle struct {
	id     uint64 // wire id (process 0 numbers submissions)
	ctx    context.Context
	req    *executor.Request
	tokens int
	done   chan struct{}
	stream Stream
	rank   int
	err    error
}

// Wait blocks until the request is routed (or refused, cancelled, or the
// deployment closed) or ctx ends.
func (h *Handle) Wait(ctx context.Context) (Stream, error) {
	select {
	case <-h.done:
		return h.stream, h.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Rank is the rank the request was routed to; valid once Wait returned
// without error.
func (h *Handle) Rank() int {
	select {
	case <-h.done:
		return h.rank
	default:
		return -1
	}
}

func (h *Handle) finish(s Stream, rank int, err error) {
	h.stream, h.rank, h.err = s, rank, err
	close(h.done)
}

// releaseReq is a program release waiting for the loop (process 0).
type releaseReq struct {
	id        string
	ticket    uint64
	remaining int // processes still to answer
	found     bool
	err       error
	done      chan struct{}
}

// inbox is where Submit and ReleaseProgram leave work for the loop, from
// any goroutine; the loop takes it at the start of each iteration.
type inbox struct {
	mu       sync.Mutex
	handles  []*Handle
	releases []*releaseReq
	closed   bool
	wake     chan struct{} // 1-buffered: a blocked loop looks for work again
}

// put queues h; false once the deployment closed.
func (b *inbox) put(h *Handle) bool {
	b.mu.Lock()
	ok := !b.closed
	if ok {
		b.handles = append(b.handles, h)
	}
	b.mu.Unlock()
	return ok
}

// putRelease queues r; false once the deployment closed.
func (b *inbox) putRelease(r *releaseReq) bool {
	b.mu.Lock()
	ok := !b.closed
	if ok {
		b.releases = append(b.releases, r)
	}
	b.mu.Unlock()
	return ok
}

// take empties the inbox, returning what was in it.
func (b *inbox) take() ([]*Handle, []*releaseReq) {
	b.mu.Lock()
	in, rel := b.handles, b.releases
	b.handles, b.releases = nil, nil
	b.mu.Unlock()
	return in, rel
}

// close refuses everything put from now on.
func (b *inbox) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// Submit queues r; the handle yields its stream once a step routes it.
// Cancelling ctx drops it from the queue (or, once routed, aborts it on its
// rank, across processes too).
func (d *Deployment) Submit(ctx context.Context, r *executor.Request) (*Handle, error) {
	if r == nil {
		return nil, errors.New("adp: nil request")
	}
	if d.proc != 0 {
		return nil, ErrNotFrontEnd
	}
	if ctx == nil {
		ctx = context.Background()
	}
	h := &Handle{ctx: ctx, req: r, done: make(chan struct{}), rank: -1, tokens: promptTokens(d.cfg.Tokens, r)}
	if !d.in.put(h) {
		return nil, ErrClosed
	}
	d.Wake()
	return h, nil
}

// promptTokens measures r for placement with measure (Config.Tokens);
// every process measures alike.
func promptTokens(measure func(*executor.Request) int, r *executor.Request) int {
	switch {
	case measure != nil:
		return measure(r)
	case len(r.PromptTokens) > 0:
		return len(r.PromptTokens)
	default:
		return len(r.Prompt)
	}
}

// SubmitStream is Submit, then Wait with ctx: it returns once a step has
// routed the request (for callers that want a stream, like a server).
func (d *Deployment) SubmitStream(ctx context.Context, r *executor.Request) (Stream, error) {
	h, err := d.Submit(ctx, r)
	if err != nil {
		return nil, err
	}
	return h.Wait(ctx)
}

// Wake makes a blocked Run loop look for work again.
func (d *Deployment) Wake() {
	select {
	case d.in.wake <- struct{}{}:
	default:
	}
}

// ReleaseProgram ends program id on every rank of every process and
// reports whether any knew it; on process 0, across processes. It waits
// for the loop (the next iteration), or ctx.
func (d *Deployment) ReleaseProgram(ctx context.Context, id string) (bool, error) {
	if d.proc != 0 {
		return false, ErrNotFrontEnd
	}
	req := &releaseReq{id: id, done: make(chan struct{})}
	if !d.in.putRelease(req) {
		return false, ErrClosed
	}
	d.Wake()
	select {
	case <-req.done:
		return req.found, req.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// drain moves submissions into the queue, numbering them, hands program
// releases and the aborts of clients that left to the byte wire, and drops
// cancelled requests (process 0).
func (d *Deployment) drain() {
	in, rel := d.in.take()
	d.x.addReleases(rel)
	for _, h := range in {
		d.m.Submitted++
		h.id = d.x.nextID()
		d.queue = append(d.queue, h)
	}
	kept := 0
	for _, h := range d.queue {
		if err := h.ctx.Err(); err != nil {
			d.m.Cancelled++
			h.finish(nil, -1, err)
			continue
		}
		d.queue[kept] = h
		kept++
	}
	clear(d.queue[kept:])
	d.queue = d.queue[:kept]
	d.x.watchAborts()
}

// dequeue keeps queued, in order, the requests not placed: the pending
// requests with no rank (placements[j] < 0) and those past them
// (process 0).
func (d *Deployment) dequeue(placements []int) {
	kept := 0
	for j, h := range d.queue {
		if j < len(placements) && placements[j] >= 0 {
			continue
		}
		d.queue[kept] = h
		kept++
	}
	clear(d.queue[kept:])
	d.queue = d.queue[:kept]
}

// pendingReqs is one iteration's pending requests, in process 0's queue
// order: process 0 takes them from its queue, the other processes from its
// bulletin. Loop-owned; reused across iterations.
type pendingReqs struct {
	reqs []*executor.Request
	ids  []uint64  // wire ids
	view []Pending // what the router sees of each
}

// take makes the pending requests queued (process 0).
func (p *pendingReqs) take(queued []*Handle) {
	p.reset()
	for _, h := range queued {
		p.reqs, p.ids = append(p.reqs, h.req), append(p.ids, h.id)
		p.view = append(p.view, Pending{Tokens: h.tokens, Program: h.req.ProgramID})
	}
}

// fromBulletin makes the pending requests those of process 0's bulletin b,
// measured with measure (Config.Tokens).
func (p *pendingReqs) fromBulletin(b *bulletin, measure func(*executor.Request) int) {
	p.reqs, p.ids = append(p.reqs[:0], b.reqs...), append(p.ids[:0], b.ids...)
	p.view = p.view[:0]
	for _, q := range p.reqs {
		p.view = append(p.view, Pending{Tokens: promptTokens(measure, q), Program: q.ProgramID})
	}
}

// reset empties the pending requests.
func (p *pendingReqs) reset() {
	p.reqs, p.ids, p.view = p.reqs[:0], p.ids[:0], p.view[:0]
}
