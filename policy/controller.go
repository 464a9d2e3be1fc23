package policy

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/kvpool"
)

// ErrUnknownProgram is returned (wrapped, naming the id) for a lifecycle call
// on a program the Controller does not know (never admitted, or ended).
var ErrUnknownProgram = errors.New("policy: unknown program")

// State is a program's lifecycle state. TERMINATED programs are forgotten.
type State uint8

const (
	// StateWaiting: a new program whose first turn waits for admission.
	StateWaiting State = iota + 1
	// StateActive: admitted; charged; its KV is pinned between turns.
	StateActive
	// StatePaused: uncharged, nothing pinned; its next turn waits for resume.
	StatePaused
)

// String names the state.
func (s State) String() string {
	switch s {
	case StateWaiting:
		return "WAITING"
	case StateActive:
		return "ACTIVE"
	case StatePaused:
		return "PAUSED"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Status says whether a program has a turn admitted, in flight or pending
// (REASONING) or is between turns (ACTING).
type Status uint8

const (
	StatusReasoning Status = iota + 1
	StatusActing
)

// String names the status.
func (s Status) String() string {
	switch s {
	case StatusReasoning:
		return "REASONING"
	case StatusActing:
		return "ACTING"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Resume classes, in resume order.
const (
	classPending = iota // PAUSED with a pending turn
	classNew            // WAITING
	classActing         // PAUSED, between turns
	numClasses
)

// program is the Controller's record of one program.
type program struct {
	id      string
	ord     uint64 // creation order: the tie-break
	state   State
	status  Status // meaningful while ACTIVE
	pending bool   // a turn waits for admission (WAITING, or PAUSED in classPending)
	marked  bool   // REASONING, to be paused when its turn ends
	tokens  int    // context on the latest turn
	cached  int    // the pending turn's prefix-cache hit (tokens)
	est     int    // blocks: tokens charged for an admitted turn not yet started
	// handle is the turn's live sequence (live, owned by the engine) or the
	// Controller's pin (ACTIVE ACTING); kvpool.InvalidSeq when neither.
	handle kvpool.SeqID
	live   bool
	// blocks is the copy of Blocks(handle) counted in refs (ACTIVE only),
	// kept so a release by the engine cannot desynchronize the counts.
	blocks     []kvpool.BlockID
	waitStart  time.Time // when it entered its resume class
	lastActive time.Time // when its last turn ended (lease)
	links      [numLinks]link
	hIdx       int // index in Controller.acting, -1 when not there
	rIdx       int // index in Controller.reasoning, -1 when not there
}

// Decisions is what one Tick did. Its slices are owned by the Controller and
// valid until the next Tick.
type Decisions struct {
	Paused  []string // ACTING programs paused now; their pins are released
	Marked  []string // REASONING programs that pause when their turn ends
	Resumed []string // programs made ACTIVE (resumed or newly admitted)
	Forced  int      // how many of Resumed were forced (waited ForcedResume)
	Expired []string // programs ended by their lease
}

func (d *Decisions) reset() {
	d.Paused, d.Marked, d.Resumed, d.Expired = d.Paused[:0], d.Marked[:0], d.Resumed[:0], d.Expired[:0]
	d.Forced = 0
}

// Controller is the program-level admission state machine and the one owner
// of program state: which programs exist, their states, and whether a
// program has a turn registered (HasTurn). The engine drives it with
// lifecycle calls (Admit, Started, Grew, Preempted, TurnEnded, Release) and
// calls Tick at every step boundary; other packages ask it (through the
// engine) rather than keep their own copies. Not safe for concurrent use,
// except Known, which any goroutine may call.
type Controller struct {
	cfg      Config
	pool     *kvpool.Pool
	clock    Clock
	bs       int
	capacity int // tokens: pool.NumBlocks() × pool.BlockSize()

	// progs is written only by the driving goroutine, under mu, so Known
	// may read it from any goroutine; the driver reads it without mu.
	mu      sync.Mutex
	progs   map[string]*program
	nextOrd uint64

	// The tokens accounting's terms over ACTIVE programs.
	nActive      int
	sumReasoning int // Σ tokens, ACTIVE REASONING
	sumActing    int // Σ tokens, ACTIVE ACTING
	// The blocks accounting's terms: refs[b] = ACTIVE programs whose counted blocks hold b.
	refs     []int32
	refsSum  int // Σ refs
	distinct int
	sumEst   int // Σ est over ACTIVE REASONING programs without a live sequence

	acting    actingHeap // ACTIVE ACTING: pause victims
	reasoning []*program // ACTIVE REASONING
	nMarked   int
	queues    [numClasses]plist
	lease     plist
	// blocked is the queue head that did not fit: it stays the head until
	// resumed, unless a higher class has candidates, so nothing that ages
	// behind it overtakes it (the aging bound).
	blocked *program

	m   counters
	dec Decisions
	chk struct { // Check's scratch
		refs    []int32
		handles []kvpool.SeqID
		counted []*program
	}
}

// New validates cfg and builds a Controller over pool, whose tokens
// (NumBlocks × BlockSize) are the capacity. The pool must outlive it and be
// driven by the same goroutine.
func New(cfg Config, pool *kvpool.Pool) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("policy: nil kvpool")
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	c := &Controller{
		cfg:      cfg,
		pool:     pool,
		clock:    cfg.Clock,
		bs:       pool.BlockSize(),
		capacity: pool.NumBlocks() * pool.BlockSize(),
		progs:    make(map[string]*program),
		// Ids run 0..N-1, or 1..N with a null block.
		refs: make([]int32, pool.NumBlocks()+1),
	}
	for i := range c.queues {
		c.queues[i].kind = linkQueue
	}
	c.lease.kind = linkLease
	return c, nil
}

// Capacity is the pool's tokens, the denominator of every threshold.
func (c *Controller) Capacity() int { return c.capacity }

// Admit asks whether a turn of program id, with a context of tokens of which
// cached hit the prefix cache (kvpool.Pool.PeekPrefix), may run now. True: the
// program is ACTIVE and REASONING and the engine starts the turn (then calls
// Started, or Preempted when it cannot). False: the turn waits (a new
// program, or a paused one) and the engine asks again at a later step;
// Tick decides when. Asking again refreshes tokens and cached.
func (c *Controller) Admit(id string, tokens, cached int) (bool, error) {
	if tokens < 0 || cached < 0 || cached > tokens {
		return false, fmt.Errorf("policy: turn of program %q with %d tokens, %d cached: want 0 ≤ cached ≤ tokens",
			id, tokens, cached)
	}
	now := c.clock.Now()
	p := c.progs[id]
	if p == nil {
		p = &program{id: id, ord: c.nextOrd, state: StateWaiting, pending: true, tokens: tokens, cached: cached,
			handle: kvpool.InvalidSeq, waitStart: now, hIdx: -1, rIdx: -1}
		c.nextOrd++
		c.mu.Lock()
		c.progs[id] = p
		c.mu.Unlock()
		c.queues[classNew].push(p)
		// Nobody queued ahead of it: decide now rather than a step later.
		if c.queues[classPending].n == 0 && c.queues[classNew].n == 1 && c.fits(p) {
			c.resume(p, now, false)
			return true, nil
		}
		return false, nil
	}
	switch p.state {
	case StateActive:
		if p.status == StatusActing {
			// The next turn of an ACTIVE program always runs; any overflow
			// is the pause machinery's at the next Tick.
			c.lease.remove(p)
			c.acting.remove(p)
			c.sumActing -= p.tokens
			p.status = StatusReasoning
			p.tokens = 0
			c.addReasoning(p)
		} else if p.live {
			return false, fmt.Errorf("policy: program %q already has a turn in flight (sequence %d)", id, p.handle)
		}
		c.setTokens(p, tokens)
		p.cached = cached
		c.setEst(p)
		return true, nil
	case StatePaused:
		if !p.pending {
			c.lease.remove(p)
			c.dequeue(p)
			p.pending = true
			p.waitStart = now
			c.queues[classPending].push(p)
		}
	}
	p.tokens, p.cached = tokens, cached
	return false, nil
}

// Runnable reports whether a turn of known program id would be admitted by
// Admit now (the program is ACTIVE), so an engine can skip the prefix lookup
// for turns that wait. Unknown programs report false.
func (c *Controller) Runnable(id string) bool {
	p := c.progs[id]
	return p != nil && p.state == StateActive
}

// Started tells that the admitted turn of id runs on the engine's sequence
// seq (after its prefix lookup). The program's pin, if any, is released:
// seq now holds those blocks.
func (c *Controller) Started(id string, seq kvpool.SeqID) error {
	p, err := c.reasoningProgram(id, "start a turn")
	if err != nil {
		return err
	}
	if p.live {
		return fmt.Errorf("policy: program %q started sequence %d while sequence %d is live", id, seq, p.handle)
	}
	if !c.pool.Valid(seq) {
		return fmt.Errorf("policy: program %q started on sequence %d: %w", id, seq, kvpool.ErrInvalidSeq)
	}
	// seq usually starts with the pinned blocks (its prefix hit): only the
	// difference is recounted.
	c.rebase(p, c.pool.Blocks(seq))
	if p.handle != kvpool.InvalidSeq {
		c.pool.Release(p.handle)
	}
	p.handle, p.live = seq, true
	c.sumEst -= p.est
	p.est = 0
	c.setTokens(p, max(p.tokens, c.pool.Tokens(seq)))
	return nil
}

// Grew tells that the running turn of id appended to its sequence. Tick
// observes growth of every running turn too; Grew makes it exact at once.
func (c *Controller) Grew(id string) error {
	p, err := c.reasoningProgram(id, "grow")
	if err != nil {
		return err
	}
	if !p.live {
		return fmt.Errorf("policy: program %q grew without a started sequence", id)
	}
	c.sync(p)
	return nil
}

// Preempted tells that the engine dropped the turn of id (recompute
// preemption, or a start that failed) before Started or after it; the
// engine releases the sequence itself. The program stays ACTIVE and
// REASONING and its turn is admitted again by Admit.
func (c *Controller) Preempted(id string) error {
	p, err := c.reasoningProgram(id, "preempt")
	if err != nil {
		return err
	}
	if p.live {
		c.uncount(p)
		p.handle, p.live = kvpool.InvalidSeq, false
		p.cached = 0 // unknown until Admit asks again
		c.setEst(p)
	}
	return nil
}

// TurnEnded tells that the current turn of id is over: finished or aborted,
// or withdrawn while it waited. Call it before the engine releases the
// turn's sequence: the program's full blocks are pinned from it and the
// program becomes ACTING, or PAUSED when it was marked. A withdrawn first
// turn forgets the program.
func (c *Controller) TurnEnded(id string) error {
	p := c.progs[id]
	if p == nil {
		return fmt.Errorf("%w %q: ending a turn", ErrUnknownProgram, id)
	}
	now := c.clock.Now()
	switch p.state {
	case StateWaiting:
		c.dequeue(p)
		c.forget(id)
		return nil
	case StatePaused:
		if !p.pending {
			return fmt.Errorf("policy: program %q ended a turn while PAUSED between turns", id)
		}
		c.dequeue(p)
		p.pending = false
		c.toPausedActing(p, now)
		return nil
	}
	if p.status != StatusReasoning {
		return fmt.Errorf("policy: program %q ended a turn while ACTING", id)
	}
	if p.live {
		c.sync(p)
	}
	if p.marked {
		c.deactivate(p)
		c.m.pauses++
		c.toPausedActing(p, now)
		return nil
	}
	var err error
	if p.live {
		seq := p.handle
		p.handle, p.live = kvpool.InvalidSeq, false
		pin, perr := c.pool.Pin(seq)
		if perr != nil {
			c.uncount(p)
			err = fmt.Errorf("policy: pinning program %q's sequence %d: %w", id, seq, perr)
		} else {
			p.handle = pin
			c.rebase(p, c.pool.Blocks(pin)) // the pin is seq's full blocks
		}
	}
	c.removeReasoning(p)
	c.sumReasoning -= p.tokens
	c.sumEst -= p.est
	p.est = 0
	p.status = StatusActing
	c.sumActing += p.tokens
	c.acting.push(p)
	p.lastActive = now
	c.lease.push(p)
	return err
}

// Release ends program id (an explicit release, or its cancellation): its
// charge and pin are dropped; a live sequence stays the engine's. It
// reports whether id was known.
func (c *Controller) Release(id string) bool {
	p := c.progs[id]
	if p == nil {
		return false
	}
	c.terminate(p)
	c.m.released++
	return true
}

// Tick runs the decisions of one step boundary, in this order: observe the
// growth of running turns, end expired leases, pause while over the
// threshold, force-resume pending turns that waited ForcedResume, and
// resume (admit) in queue order while the head fits. Its cost is O(running
// turns + expired + paused victims + queued), never O(all programs).
func (c *Controller) Tick() Decisions {
	now := c.clock.Now()
	d := &c.dec
	d.reset()
	for _, p := range c.reasoning {
		if p.live {
			c.sync(p)
		}
	}
	for p := c.lease.head; p != nil && now.Sub(p.lastActive) >= c.cfg.Lease; p = c.lease.head {
		d.Expired = append(d.Expired, p.id)
		c.terminate(p)
		c.m.expired++
	}

	capF := float64(c.capacity)
	paused := false
	if used := c.used(); used > c.cfg.PauseThreshold*capF {
		projected := used - c.markedRelief()
		// A lone program is never paused: it would be resumed at once.
		for projected > c.cfg.PauseTarget*capF && c.nActive-c.nMarked > 1 {
			if len(c.acting) > 0 {
				v := c.acting[0]
				before := c.used()
				c.pause(v, now)
				d.Paused = append(d.Paused, v.id)
				paused = true
				projected -= before - c.used()
				continue
			}
			r := c.smallestUnmarked()
			if r == nil {
				break
			}
			r.marked = true
			c.nMarked++
			d.Marked = append(d.Marked, r.id)
			projected -= c.relief(r)
		}
	} else if c.nMarked > 0 {
		for _, r := range c.reasoning {
			r.marked = false
		}
		c.nMarked = 0
	}

forced:
	for _, cls := range [...]int{classPending, classNew} {
		q := &c.queues[cls]
		for p := q.head; p != nil && now.Sub(p.waitStart) >= c.cfg.ForcedResume; p = q.head {
			if c.nActive >= c.cfg.MaxActive {
				if len(c.acting) == 0 {
					break forced
				}
				v := c.acting[0]
				c.pause(v, now)
				d.Paused = append(d.Paused, v.id)
				paused = true
			}
			c.resume(p, now, true)
			d.Resumed = append(d.Resumed, p.id)
			d.Forced++
		}
	}

	if !paused {
		for c.nActive < c.cfg.MaxActive {
			p := c.best(now)
			if p == nil {
				break
			}
			if !c.fits(p) {
				c.blocked = p
				break
			}
			c.resume(p, now, false)
			d.Resumed = append(d.Resumed, p.id)
		}
	}
	return *d
}

// fits reports whether p may be resumed (admitted) now without forcing.
func (c *Controller) fits(p *program) bool {
	if c.nActive >= c.cfg.MaxActive {
		return false
	}
	if c.nActive == 0 {
		return true // alone it runs whatever its size: nothing waits forever
	}
	return c.used()+c.estimate(p) <= c.resumeLimit()
}

func (c *Controller) resumeLimit() float64 {
	return (c.cfg.PauseThreshold - c.cfg.ResumeHysteresis) * float64(c.capacity)
}

// best is the queued program to resume next: the blocked head while no
// higher class has candidates, else from the first non-empty class the
// smallest effective size, oldest on ties.
func (c *Controller) best(now time.Time) *program {
	for cls := range c.queues {
		if b := c.blocked; b != nil && c.class(b) == cls {
			return b
		}
		var best *program
		var bestEff float64
		for p := c.queues[cls].head; p != nil; p = p.links[linkQueue].next {
			eff := float64(p.tokens)
			if c.cfg.AgingTau > 0 {
				eff /= 1 + float64(now.Sub(p.waitStart))/float64(c.cfg.AgingTau)
			}
			if best == nil || eff < bestEff || (eff == bestEff && p.ord < best.ord) {
				best, bestEff = p, eff
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// resume makes queued p ACTIVE: REASONING when it has a pending turn (the
// engine's next Admit runs it), else ACTING.
func (c *Controller) resume(p *program, now time.Time, forced bool) {
	c.dequeue(p)
	if p.state == StateWaiting {
		c.m.admitted++
	} else {
		c.m.resumes++
	}
	if forced {
		c.m.forced++
	}
	p.state = StateActive
	c.nActive++
	c.m.peakActive = max(c.m.peakActive, c.nActive)
	if p.pending {
		wait := now.Sub(p.waitStart)
		c.m.waits++
		c.m.waitTotal += wait
		c.m.waitMax = max(c.m.waitMax, wait)
		p.pending = false
		p.status = StatusReasoning
		tokens := p.tokens
		p.tokens = 0
		c.addReasoning(p)
		c.setTokens(p, tokens)
		c.setEst(p)
		return
	}
	p.status = StatusActing
	c.sumActing += p.tokens
	c.acting.push(p)
}

// pause makes ACTIVE ACTING p PAUSED: uncharged, its pin released.
func (c *Controller) pause(p *program, now time.Time) {
	c.deactivate(p)
	c.m.pauses++
	c.toPausedActing(p, now)
}

// toPausedActing queues inactive p as PAUSED between turns.
func (c *Controller) toPausedActing(p *program, now time.Time) {
	p.state = StatePaused
	p.waitStart = now
	c.queues[classActing].push(p)
	if p.links[linkLease].list == nil {
		p.lastActive = now
		c.lease.push(p)
	}
}

// deactivate drops ACTIVE p's charge, counted blocks and pin (a live
// sequence stays the engine's).
func (c *Controller) deactivate(p *program) {
	if p.status == StatusReasoning {
		c.sumReasoning -= p.tokens
		c.sumEst -= p.est
		p.est = 0
		if p.marked {
			p.marked = false
			c.nMarked--
		}
		c.removeReasoning(p)
	} else {
		c.sumActing -= p.tokens
		c.acting.remove(p)
	}
	c.uncount(p)
	if p.handle != kvpool.InvalidSeq && !p.live {
		c.pool.Release(p.handle)
	}
	p.handle, p.live = kvpool.InvalidSeq, false
	c.nActive--
}

// terminate forgets p, whatever its state.
func (c *Controller) terminate(p *program) {
	switch p.state {
	case StateActive:
		c.deactivate(p)
	default:
		c.dequeue(p)
	}
	if p.links[linkLease].list != nil {
		c.lease.remove(p)
	}
	c.forget(p.id)
}

// forget deletes id's record (under mu: Known reads it concurrently).
func (c *Controller) forget(id string) {
	c.mu.Lock()
	delete(c.progs, id)
	c.mu.Unlock()
}

// dequeue takes queued p out of its resume class (before its state or
// pending flag changes).
func (c *Controller) dequeue(p *program) {
	c.queues[c.class(p)].remove(p)
	if c.blocked == p {
		c.blocked = nil
	}
}

func (c *Controller) class(p *program) int {
	switch {
	case p.state == StateWaiting:
		return classNew
	case p.pending:
		return classPending
	}
	return classActing
}

// reasoningProgram returns id's program, which must be ACTIVE and REASONING.
func (c *Controller) reasoningProgram(id, what string) (*program, error) {
	p := c.progs[id]
	if p == nil {
		return nil, fmt.Errorf("%w %q: cannot %s", ErrUnknownProgram, id, what)
	}
	if p.state != StateActive || p.status != StatusReasoning {
		return nil, fmt.Errorf("policy: program %q cannot %s: it is %v/%v, not an admitted turn",
			id, what, p.state, p.status)
	}
	return p, nil
}

func (c *Controller) addReasoning(p *program) {
	p.rIdx = len(c.reasoning)
	c.reasoning = append(c.reasoning, p)
}

func (c *Controller) removeReasoning(p *program) {
	last := len(c.reasoning) - 1
	if p.rIdx != last {
		c.reasoning[p.rIdx] = c.reasoning[last]
		c.reasoning[p.rIdx].rIdx = p.rIdx
	}
	c.reasoning[last] = nil
	c.reasoning = c.reasoning[:last]
	p.rIdx = -1
}

// setTokens sets ACTIVE REASONING p's tokens, keeping the token sums.
func (c *Controller) setTokens(p *program, tokens int) {
	c.sumReasoning += tokens - p.tokens
	p.tokens = tokens
}

// setEst recharges ACTIVE REASONING p's unstarted turn under blocks.
func (c *Controller) setEst(p *program) {
	est := 0
	if !p.live {
		est = c.estBlocks(p) * c.bs
	}
	c.sumEst += est - p.est
	p.est = est
}

// estBlocks is the new blocks p's pending turn needs: its tokens in blocks
// minus its whole cached blocks (assumed charged already).
func (c *Controller) estBlocks(p *program) int {
	return max(0, (p.tokens+c.bs-1)/c.bs-p.cached/c.bs)
}

// count adds blocks to p's counted set (refs); uncount drops them all.
func (c *Controller) count(p *program, blocks []kvpool.BlockID) {
	for _, b := range blocks {
		c.refs[b]++
		if c.refs[b] == 1 {
			c.distinct++
		}
	}
	p.blocks = append(p.blocks, blocks...)
	c.refsSum += len(blocks)
}

// rebase makes p's counted set blocks, recounting only past their common
// prefix.
func (c *Controller) rebase(p *program, blocks []kvpool.BlockID) {
	i, n := 0, min(len(blocks), len(p.blocks))
	for i < n && blocks[i] == p.blocks[i] {
		i++
	}
	for _, b := range p.blocks[i:] {
		c.refs[b]--
		if c.refs[b] == 0 {
			c.distinct--
		}
	}
	c.refsSum -= len(p.blocks) - i
	p.blocks = p.blocks[:i]
	c.count(p, blocks[i:])
}

func (c *Controller) uncount(p *program) {
	for _, b := range p.blocks {
		c.refs[b]--
		if c.refs[b] == 0 {
			c.distinct--
		}
	}
	c.refsSum -= len(p.blocks)
	p.blocks = p.blocks[:0]
}

// sync observes the growth of p's live sequence: block tables only grow at
// their tail. A sequence the engine released without telling is dropped
// as if preempted and counted (Check reports it).
func (c *Controller) sync(p *program) {
	t := c.pool.Tokens(p.handle) // 0 for a released handle
	if t == 0 && !c.pool.Valid(p.handle) {
		c.m.lost++
		c.uncount(p)
		p.handle, p.live = kvpool.InvalidSeq, false
		p.cached = 0
		c.setEst(p)
		return
	}
	if t > p.tokens {
		c.setTokens(p, t)
	}
	// A table holds ⌈(tokens + reserved slots) / BlockSize⌉ blocks: read it
	// only when it grew. Reserved slots (a future token's KV, kvpool.Pool.Reserve)
	// already occupy a block before their values are known.
	if n := t + c.pool.Reserved(p.handle); (n+c.bs-1)/c.bs != len(p.blocks) {
		if bl := c.pool.Blocks(p.handle); len(bl) > len(p.blocks) {
			c.count(p, bl[len(p.blocks):])
		}
	}
}

// UsedTokens is the tokens (and pausing) accounting's used tokens: Σ ACTIVE
// tokens × weight + Buffer.
func (c *Controller) UsedTokens() float64 {
	return float64(c.sumReasoning) + c.cfg.ActingTokenWeight*float64(c.sumActing) +
		float64(c.cfg.Buffer)*float64(c.nActive)
}

// UsedBlocks is the blocks accounting's used tokens: distinct ACTIVE blocks ×
// BlockSize + estimates of unstarted turns + Reserve × |ACTIVE|.
func (c *Controller) UsedBlocks() int {
	return c.distinct*c.bs + c.sumEst + c.cfg.Reserve*c.nActive
}

// used is the configured accounting's used tokens.
func (c *Controller) used() float64 {
	if c.cfg.Accounting == BlockAccounting {
		return float64(c.UsedBlocks())
	}
	return c.UsedTokens()
}

// estimate is what resuming queued p would add to used.
func (c *Controller) estimate(p *program) float64 {
	if c.cfg.Accounting == BlockAccounting {
		if p.pending {
			return float64(c.estBlocks(p)*c.bs + c.cfg.Reserve)
		}
		return float64(c.cfg.Reserve) // it holds no blocks until its next turn
	}
	w := 1.0
	if !p.pending {
		w = c.cfg.ActingTokenWeight
	}
	return float64(p.tokens)*w + float64(c.cfg.Buffer)
}

// relief is what pausing REASONING r at its turn's end will take off used.
func (c *Controller) relief(r *program) float64 {
	if c.cfg.Accounting != BlockAccounting {
		return float64(r.tokens + c.cfg.Buffer)
	}
	own := 0
	for _, b := range r.blocks {
		if c.refs[b] == 1 {
			own++
		}
	}
	return float64(own*c.bs + r.est + c.cfg.Reserve)
}

func (c *Controller) markedRelief() float64 {
	if c.nMarked == 0 {
		return 0
	}
	sum := 0.0
	for _, r := range c.reasoning {
		if r.marked {
			sum += c.relief(r)
		}
	}
	return sum
}

// smallestUnmarked is the REASONING program to mark next: fewest tokens,
// oldest on ties. O(REASONING), only while over the threshold.
func (c *Controller) smallestUnmarked() *program {
	var best *program
	for _, r := range c.reasoning {
		if !r.marked && (best == nil || less(r, best)) {
			best = r
		}
	}
	return best
}
