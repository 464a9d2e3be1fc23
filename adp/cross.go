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
// process 0 is at most this stale for ranks elsewhere. Besides, a process
// sends them at every gather that carries a request's final output, ahead
// of it, and process 0 publishes them before it delivers that output: once
// a client has a response, /metrics counts its request where it ran.
const metricsEvery = 100 * time.Millisecond

// crossing is the byte wire of a deployment across processes: on process 0
// the relays of requests served elsewhere and the control it broadcasts;
// on the others the forwards of the requests they serve and the outbox of
// records they send process 0. With one process only program releases
// pass through it. Its methods take what they need of the deployment as
// arguments and return what the deployment keeps; they write only the
// crossing. Loop-owned.
type crossing struct {
	proc, procs int
	perProc     int // ranks per process
	logf        func(format string, args ...any)
	last        uint64

	// Process 0.
	relays   map[uint64]*relayed
	aborts   []uint64      // to broadcast this iteration
	releases []*releaseReq // to broadcast this iteration
	awaiting map[uint64]*releaseReq
	ticket   uint64

	// Other processes.
	forwards map[uint64]*forward
	outbox   wireBuf
	deltas   wireBuf       // this poll's output, which follows the metrics in the outbox
	every    time.Duration // metricsEvery; tests lengthen it
	sentAt   time.Time
	unsent   bool // the ranks stepped since their metrics were last sent

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

// init readies x for process proc of procs, each running perProc ranks;
// logf (Config.Logf, may be nil) receives the refusals of other processes.
func (x *crossing) init(proc, procs, perProc int, logf func(format string, args ...any)) {
	x.proc, x.procs, x.perProc, x.logf = proc, procs, perProc, logf
	x.relays = map[uint64]*relayed{}
	x.awaiting = map[uint64]*releaseReq{}
	x.forwards = map[uint64]*forward{}
	x.counts = make([]int, procs)
	x.size = make([]byte, 8)
	x.every = metricsEvery
}

// nextID numbers a submission (process 0).
func (x *crossing) nextID() uint64 {
	x.last++
	return x.last
}

// addReleases queues program releases for the next broadcast (process 0).
func (x *crossing) addReleases(rs []*releaseReq) { x.releases = append(x.releases, rs...) }

// control is the aborts and releases process 0 broadcasts this iteration.
func (x *crossing) control() int { return len(x.aborts) + len(x.releases) }

// out is the bytes of records this process sends process 0 at the next
// gather.
func (x *crossing) out() int { return len(x.outbox) }

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
func (x *crossing) serve(r Rank, id uint64, q *executor.Request) {
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

// stepped records that this process's ranks stepped (their metrics are
// due at the next poll).
func (x *crossing) stepped() { x.unsent = true }

// poll moves the output of forwarded requests, and the metrics of ranks
// (this process's, the first of which is rank first, with local their
// states at this gather) when due, into the outbox (processes other than
// 0). The metrics go ahead of the output, and are due whenever a request's
// final output goes out: process 0 publishes them before it delivers that
// output, so a client that has its whole response reads /metrics that
// count its request (submitted and finished) on the rank that served it.
func (x *crossing) poll(ranks []Rank, first int, local []RankState) {
	if x.proc == 0 {
		return
	}
	x.deltas = x.deltas[:0]
	ended := false
	for id, f := range x.forwards {
		for {
			dl, ok, err := f.s.TryRecv()
			if errors.Is(err, io.EOF) {
				delete(x.forwards, id)
				f.cancel()
				ended = true
				break
			}
			if !ok {
				break
			}
			putDelta(&x.deltas, id, &dl)
			if dl.FinishReason != executor.FinishNone {
				delete(x.forwards, id)
				f.cancel()
				ended = true
				break
			}
		}
	}
	x.pollMetrics(ranks, first, local, ended)
	x.outbox = append(x.outbox, x.deltas...)
}

// pollMetrics puts the ranks' executor metrics in the outbox when due:
// at once when a request's final output goes out with them (ended), else
// every x.every while the ranks have work and once when they go idle. The
// ranks do not step during the gather, so what they send counts every
// request whose output this poll read to its end.
func (x *crossing) pollMetrics(ranks []Rank, first int, local []RankState, ended bool) {
	if !x.unsent && !ended {
		return
	}
	live := 0
	for i := range local {
		live += local[i].Live()
	}
	if !ended && live > 0 && time.Since(x.sentAt) < x.every {
		return
	}
	for i, r := range ranks {
		sn, ok := r.(snapshotter)
		if !ok {
			continue
		}
		js, err := json.Marshal(sn.Snapshot())
		if err != nil {
			continue // plain data: cannot fail; the metrics are best effort
		}
		putMetrics(&x.outbox, first+i, js)
	}
	x.sentAt, x.unsent = time.Now(), false
}

// gatherOutput brings every process's outbox to process 0 (ps: every
// process's words at this gather, whose Out sizes each outbox) and
// delivers it there, record by record in each process's order: rank
// metrics to report (the deployment publishes them), output to the
// relays, refusals, release answers. Each process puts its ranks' metrics
// ahead of its output (poll), so they are published before any output
// they count reaches a client.
func (x *crossing) gatherOutput(c Comm, ps []ProcState, report func(rankReport)) error {
	total := 0
	for q := range ps {
		x.counts[q] = ps[q].Out
		total += ps[q].Out
	}
	if x.proc == 0 {
		x.inbox = resizeBytes(x.inbox, total)
	}
	if err := c.GathervBytes(x.outbox, x.counts, x.inbox, 0); err != nil {
		return fmt.Errorf("adp: output gather: %w", err)
	}
	x.outbox = x.outbox[:0]
	if x.proc != 0 {
		return nil
	}
	off := 0
	for q, n := range x.counts {
		seg := x.inbox[off : off+n]
		off += n
		if err := decodeReplies(seg, func(r *reply) error { return x.deliver(q, r, report) }); err != nil {
			return fmt.Errorf("adp: output of process %d: %w", q, err)
		}
	}
	return nil
}

// deliver applies one record from process q (process 0); rank metrics go
// to report at once, before the records behind them.
func (x *crossing) deliver(q int, r *reply, report func(rankReport)) error {
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
		if x.logf != nil {
			x.logf("rank %d refused request %d: %s", rl.rank, r.id, r.text)
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
		if r.rank < x.perProc*q || r.rank >= x.perProc*(q+1) {
			return fmt.Errorf("adp: process %d sent metrics of rank %d, not one of its own", q, r.rank)
		}
		report(rankReport{rank: r.rank, m: m})
	}
	return nil
}

// broadcast sends process 0's bulletin to every process and returns it
// (process 0's own there): the aborts and program releases process 0
// holds, and the pending requests reqs under their wire ids (process 0's;
// ignored elsewhere). With one process nothing travels.
func (x *crossing) broadcast(c Comm, ids []uint64, reqs []*executor.Request) (*bulletin, error) {
	w := &x.msg
	if x.proc == 0 {
		w.reset()
		w.aborts = append(w.aborts, x.aborts...)
		for _, r := range x.releases {
			x.ticket++
			r.ticket = x.ticket
			w.releases = append(w.releases, release{ticket: r.ticket, id: r.id})
		}
		w.ids, w.reqs = append(w.ids, ids...), append(w.reqs, reqs...)
		x.buf = x.buf[:0]
		w.encode(&x.buf)
		binary.LittleEndian.PutUint64(x.size, uint64(len(x.buf)))
	}
	if x.procs == 1 {
		return w, nil
	}
	if err := c.BcastBytes(x.size, 0); err != nil {
		return nil, fmt.Errorf("adp: bulletin broadcast: %w", err)
	}
	size := binary.LittleEndian.Uint64(x.size)
	if size > 1<<31-1 {
		return nil, fmt.Errorf("adp: bulletin broadcast of %d bytes: more than one broadcast carries", size)
	}
	if x.proc != 0 {
		x.buf = resizeBytes(x.buf, int(size))
	}
	if err := c.BcastBytes(x.buf, 0); err != nil {
		return nil, fmt.Errorf("adp: bulletin broadcast: %w", err)
	}
	if x.proc != 0 {
		if err := decodeBulletin(x.buf, w); err != nil {
			return nil, fmt.Errorf("adp: bulletin from process 0: %w", err)
		}
	}
	return w, nil
}

// apply applies the control of bulletin b (broadcast's) on this process,
// whose ranks are ranks: released programs end on them (process 0 then
// awaits the other processes' answers, which the others put in their
// outbox), and elsewhere the aborted requests it serves are cancelled.
// It drops b's references to the requests.
func (x *crossing) apply(b *bulletin, ranks []Rank) {
	if x.proc == 0 {
		for _, r := range x.releases {
			found, err := releaseOn(ranks, r.id)
			r.found, r.err, r.remaining = found, err, x.procs-1
			if r.remaining == 0 {
				close(r.done)
				continue
			}
			x.awaiting[r.ticket] = r
		}
		x.aborts, x.releases = x.aborts[:0], x.releases[:0]
	} else {
		for _, id := range b.aborts {
			if f, ok := x.forwards[id]; ok {
				f.cancel() // the rank aborts it at its next step boundary
			}
		}
		for _, r := range b.releases {
			found, err := releaseOn(ranks, r.id)
			putReleaseReply(&x.outbox, r.ticket, found, err)
		}
	}
	clear(b.reqs)
}

// releaseOn ends program id on ranks and reports whether any knew it.
func releaseOn(ranks []Rank, id string) (bool, error) {
	found := false
	for _, r := range ranks {
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
