package adp

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/turnstile-llm/turnstile/executor"
)

// metricsEvery is how often a process sends process 0 its ranks' executor
// metrics while they step (and once more when they go idle): /metrics on
// process 0 is at most this stale for ranks elsewhere.
const metricsEvery = 100 * time.Millisecond

// crossing is the byte wire of a deployment across processes: on process 0
// the relays of requests served elsewhere and the control it broadcasts;
// on the others the forwards of the requests they serve and the outbox of
// records they send process 0. With one process only program releases
// pass through it. Loop-owned.
type crossing struct {
	procs int
	last  uint64

	// Process 0.
	relays   map[uint64]*relayed
	aborts   []uint64      // to broadcast this iteration
	releases []*releaseReq // to broadcast this iteration
	awaiting map[uint64]*releaseReq
	ticket   uint64

	// Other processes.
	forwards map[uint64]*forward
	outbox   wireBuf
	sentAt   time.Time

	counts []int
	inbox  []byte
	buf    wireBuf
	msg    bulletin
	size   []byte // 8 bytes, its own allocation: it is handed to C
}

// relayed is a request process 0 placed on another process.
type relayed struct {
	h       *Handle
	s       *executor.Stream
	rank    int
	aborted bool
}

// forward is a request this process serves for process 0.
type forward struct {
	s      pollStream
	cancel context.CancelFunc
}

// pollStream is what a forwarded stream must offer: a non-blocking
// receive, polled by the loop between iterations (*executor.Stream).
type pollStream interface {
	TryRecv() (executor.Delta, bool, error)
}

// programReleaser is a rank that can end programs (EngineRank).
type programReleaser interface {
	ReleaseProgram(id string) (bool, error)
}

// snapshotter is a rank whose executor metrics travel to process 0.
type snapshotter interface {
	Snapshot() executor.Metrics
}

func (x *crossing) init(procs int) {
	x.procs = procs
	x.relays = map[uint64]*relayed{}
	x.awaiting = map[uint64]*releaseReq{}
	x.forwards = map[uint64]*forward{}
	x.counts = make([]int, procs)
	x.size = make([]byte, 8)
}

// nextID numbers a submission (process 0).
func (x *crossing) nextID() uint64 {
	x.last++
	return x.last
}

// control is the aborts and releases process 0 broadcasts this iteration.
func (x *crossing) control() int { return len(x.aborts) + len(x.releases) }

// open is what this process still owes or awaits: forwarded requests not
// finished, release answers not in.
func (x *crossing) open() int { return len(x.forwards) + len(x.awaiting) }

// watchAborts queues the relays whose clients left for the broadcast
// (process 0).
func (x *crossing) watchAborts() {
	for id, r := range x.relays {
		if !r.aborted && r.h.ctx.Err() != nil {
			r.aborted = true
			x.aborts = append(x.aborts, id)
		}
	}
}

// relay makes the stream of h, placed on rank in another process.
func (x *crossing) relay(h *Handle, id uint64, rank int) Stream {
	s := executor.NewRelayStream(h.req.Params)
	x.relays[id] = &relayed{h: h, s: s, rank: rank}
	return s
}

// serve submits request id, placed on this process's rank r, and forwards
// its output to process 0; a refusal travels back instead.
func (x *crossing) serve(d *Deployment, r Rank, id uint64, q *executor.Request) {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := r.Submit(ctx, q)
	if err != nil {
		cancel()
		putRefused(&x.outbox, id, err)
		return
	}
	ps, ok := st.(pollStream)
	if !ok {
		cancel()
		putRefused(&x.outbox, id, fmt.Errorf("adp: the rank's %T stream cannot be forwarded (no TryRecv)", st))
		return
	}
	x.forwards[id] = &forward{s: ps, cancel: cancel}
}

// poll moves the output of forwarded requests, and the ranks' metrics when
// due, into the outbox (processes other than 0).
func (x *crossing) poll(d *Deployment) {
	if d.proc == 0 {
		return
	}
	x.pollMetrics(d)
	for id, f := range x.forwards {
		for {
			dl, ok, err := f.s.TryRecv()
			if errors.Is(err, io.EOF) {
				delete(x.forwards, id)
				f.cancel()
				break
			}
			if !ok {
				break
			}
			putDelta(&x.outbox, id, &dl)
			if dl.FinishReason != executor.FinishNone {
				delete(x.forwards, id)
				f.cancel()
				break
			}
		}
	}
}

// pollMetrics puts the ranks' executor metrics in the outbox when due:
// every metricsEvery while they have work, and once when they go idle.
func (x *crossing) pollMetrics(d *Deployment) {
	if !d.stepped {
		return
	}
	live := 0
	for i := range d.local {
		live += d.local[i].Live()
	}
	if live > 0 && time.Since(x.sentAt) < metricsEvery {
		return
	}
	for i, r := range d.ranks {
		sn, ok := r.(snapshotter)
		if !ok {
			continue
		}
		js, err := json.Marshal(sn.Snapshot())
		if err != nil {
			continue // plain data: cannot fail; the metrics are best effort
		}
		putMetrics(&x.outbox, d.first+i, js)
	}
	x.sentAt, d.stepped = time.Now(), false
}

// gatherOutput brings every process's outbox to process 0, when any has
// one (every process knows from the gathered words), and delivers it.
func (x *crossing) gatherOutput(d *Deployment) error {
	if x.procs == 1 {
		return nil
	}
	total := 0
	for q := range d.ps {
		x.counts[q] = d.ps[q].Out
		total += d.ps[q].Out
	}
	if total == 0 {
		return nil
	}
	if d.proc == 0 {
		x.inbox = resizeBytes(x.inbox, total)
	}
	d.enter("the output gather (a peer has not entered it)")
	if err := d.comm.GathervBytes(x.outbox, x.counts, x.inbox, 0); err != nil {
		return fmt.Errorf("adp: output gather: %w", err)
	}
	x.outbox = x.outbox[:0]
	if d.proc != 0 {
		return nil
	}
	off := 0
	for q, n := range x.counts {
		seg := x.inbox[off : off+n]
		off += n
		if err := decodeReplies(seg, func(r *reply) error { return x.deliver(d, q, r) }); err != nil {
			return fmt.Errorf("adp: output of process %d: %w", q, err)
		}
	}
	return nil
}

// deliver applies one record from process q (process 0).
func (x *crossing) deliver(d *Deployment, q int, r *reply) error {
	switch r.kind {
	case recDelta:
		rl, ok := x.relays[r.id]
		if !ok {
			return fmt.Errorf("adp: output for request %d, which process 0 did not place on process %d", r.id, q)
		}
		if err := rl.s.Relay(r.delta); err != nil {
			return fmt.Errorf("adp: request %d from rank %d: %w", r.id, rl.rank, err)
		}
		if r.delta.FinishReason != executor.FinishNone {
			delete(x.relays, r.id)
		}
	case recRefused:
		rl, ok := x.relays[r.id]
		if !ok {
			return fmt.Errorf("adp: refusal of request %d, which process 0 did not place on process %d", r.id, q)
		}
		delete(x.relays, r.id)
		if d.cfg.Logf != nil {
			d.cfg.Logf("rank %d refused request %d: %s", rl.rank, r.id, r.text)
		}
		_ = rl.s.Relay(executor.Delta{FinishReason: executor.FinishAbort})
	case recRelease:
		req, ok := x.awaiting[r.id]
		if !ok {
			return fmt.Errorf("adp: release answer %d from process %d matches no release", r.id, q)
		}
		req.found = req.found || r.found
		if r.text != "" && req.err == nil {
			req.err = fmt.Errorf("adp: process %d: %s", q, r.text)
		}
		if req.remaining--; req.remaining == 0 {
			delete(x.awaiting, r.id)
			close(req.done)
		}
	case recMetrics:
		var m executor.Metrics
		if err := json.Unmarshal(r.metrics, &m); err != nil {
			return fmt.Errorf("adp: metrics of rank %d: %w", r.rank, err)
		}
		if r.rank < len(d.ranks)*q || r.rank >= len(d.ranks)*(q+1) {
			return fmt.Errorf("adp: process %d sent metrics of rank %d, not one of its own", q, r.rank)
		}
		d.mu.Lock()
		d.remote[r.rank] = remoteMetrics{m: m, ok: true}
		d.mu.Unlock()
	}
	return nil
}

// broadcast sends process 0's bulletin (aborts, releases, the n requests to
// place) to every process and applies its control here.
func (x *crossing) broadcast(d *Deployment, n int) error {
	w := &x.msg
	if d.proc == 0 {
		w.reset()
		w.aborts = append(w.aborts, x.aborts...)
		for _, r := range x.releases {
			x.ticket++
			r.ticket = x.ticket
			w.releases = append(w.releases, release{ticket: r.ticket, id: r.id})
		}
		w.ids, w.reqs = append(w.ids, d.ids...), append(w.reqs, d.reqs...)
		x.buf = x.buf[:0]
		w.encode(&x.buf)
		binary.LittleEndian.PutUint64(x.size, uint64(len(x.buf)))
	}
	if d.procs == 1 {
		return x.applyControl(d)
	}
	if err := d.comm.BcastBytes(x.size, 0); err != nil {
		return fmt.Errorf("adp: bulletin broadcast: %w", err)
	}
	size := binary.LittleEndian.Uint64(x.size)
	if size > 1<<31-1 {
		return fmt.Errorf("adp: bulletin broadcast of %d bytes: more than one broadcast carries", size)
	}
	if d.proc != 0 {
		x.buf = resizeBytes(x.buf, int(size))
	}
	if err := d.comm.BcastBytes(x.buf, 0); err != nil {
		return fmt.Errorf("adp: bulletin broadcast: %w", err)
	}
	if d.proc == 0 {
		return x.applyControl(d)
	}
	if err := decodeBulletin(x.buf, w); err != nil {
		return fmt.Errorf("adp: bulletin from process 0: %w", err)
	}
	if len(w.reqs) != n {
		return fmt.Errorf("adp: bulletin from process 0 has %d requests, this process admits %d", len(w.reqs), n)
	}
	for _, id := range w.aborts {
		if f, ok := x.forwards[id]; ok {
			f.cancel() // the rank aborts it at its next step boundary
		}
	}
	for _, r := range w.releases {
		found, err := d.releaseLocal(r.id)
		putReleaseReply(&x.outbox, r.ticket, found, err)
	}
	d.reqs, d.ids = append(d.reqs[:0], w.reqs...), append(d.ids[:0], w.ids...)
	d.pending = d.pending[:0]
	for _, q := range d.reqs {
		d.pending = append(d.pending, Pending{Tokens: d.tokens(q), Program: q.ProgramID})
	}
	return nil
}

// applyControl is process 0's side of its broadcast: releases end on its
// own ranks and wait for the other processes' answers.
func (x *crossing) applyControl(d *Deployment) error {
	clear(x.msg.reqs)
	for _, r := range x.releases {
		found, err := d.releaseLocal(r.id)
		r.found, r.err, r.remaining = found, err, d.procs-1
		if r.remaining == 0 {
			close(r.done)
			continue
		}
		x.awaiting[r.ticket] = r
	}
	x.aborts, x.releases = x.aborts[:0], x.releases[:0]
	return nil
}

// releaseLocal ends program id on this process's ranks and reports
// whether any knew it.
func (d *Deployment) releaseLocal(id string) (bool, error) {
	found := false
	for _, r := range d.ranks {
		pr, ok := r.(programReleaser)
		if !ok {
			return false, executor.ErrNoPrograms
		}
		f, err := pr.ReleaseProgram(id)
		if err != nil {
			return false, err
		}
		found = found || f
	}
	return found, nil
}

// close ends every relay (abort: the deployment stopped), fails pending
// releases, and cancels forwarded requests.
func (x *crossing) close() {
	for id, r := range x.relays {
		_ = r.s.Relay(executor.Delta{FinishReason: executor.FinishAbort})
		delete(x.relays, id)
	}
	for id, r := range x.awaiting {
		r.err = ErrClosed
		close(r.done)
		delete(x.awaiting, id)
	}
	for _, r := range x.releases {
		r.err = ErrClosed
		close(r.done)
	}
	x.releases = x.releases[:0]
	for id, f := range x.forwards {
		f.cancel()
		delete(x.forwards, id)
	}
}

// check verifies the wire's bookkeeping: every relay and forward names a
// request that was numbered, and every awaited release still waits for a
// process.
func (x *crossing) check() error {
	for id := range x.relays {
		if id == 0 || id > x.last {
			return fmt.Errorf("adp: relay of request %d, but only %d were numbered", id, x.last)
		}
	}
	for t, r := range x.awaiting {
		if r.remaining <= 0 || r.remaining >= x.procs {
			return fmt.Errorf("adp: release %d awaits %d processes of %d", t, r.remaining, x.procs)
		}
	}
	return nil
}

func resizeBytes(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
