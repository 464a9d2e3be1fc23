package server

import (
	"fmt"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/internal/clock"
)

// maxProgramID bounds a program id's length, bytes.
const maxProgramID = 256

// programs is HTTP-only state: the program ids of HTTP requests, for
// /metrics' active/idle view when the engine has no program policy of its
// own, and all there is of a program then (DELETE /v1/programs/{id} ends
// it here). It is not program state, which the engine's policy owns
// (policy.Controller): with a policy, /metrics exports the engine's
// ProgramStates and DELETE answers from the engine's ReleaseProgram. A
// program is "active" while it has requests in flight and "idle" between
// them, until released. The table is bounded in time and in count: an id
// idle for ttl is forgotten; when full, idle ids are forgotten first, and
// ids beyond the bound are served but not tracked.
type programs struct {
	mu    sync.Mutex
	max   int
	ttl   time.Duration
	clk   clock.Clock
	table map[string]*programEntry
	swept time.Time // the last sweep for expired ids
}

type programEntry struct {
	inFlight int       // requests in flight
	last     time.Time // the last request's start or end
	released bool      // forget the id when its last request ends
}

func newPrograms(max int, ttl time.Duration, clk clock.Clock) *programs {
	return &programs{max: max, ttl: ttl, clk: clk, table: make(map[string]*programEntry), swept: clk.Now()}
}

// validProgramID checks an id from a header, body or path.
func validProgramID(id string) error {
	if id == "" || len(id) > maxProgramID {
		return fmt.Errorf("program id of %d bytes: must be 1 to %d bytes", len(id), maxProgramID)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("program id %q: byte %d (0x%02x) is not printable ASCII", id, i, c)
		}
	}
	return nil
}

// sweepLocked forgets ids idle for ttl. It scans the table at most once
// per ttl/8, so an id outlives its ttl by at most an eighth of it.
func (p *programs) sweepLocked(now time.Time) {
	if now.Sub(p.swept) < p.ttl/8 {
		return
	}
	p.swept = now
	for id, e := range p.table {
		if e.inFlight == 0 && now.Sub(e.last) >= p.ttl {
			delete(p.table, id)
		}
	}
}

// begin records a request of program id starting.
func (p *programs) begin(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clk.Now()
	p.sweepLocked(now)
	e, ok := p.table[id]
	if !ok {
		if len(p.table) >= p.max {
			for k, old := range p.table {
				if old.inFlight == 0 {
					delete(p.table, k)
					break
				}
			}
			if len(p.table) >= p.max {
				return
			}
		}
		e = &programEntry{}
		p.table[id] = e
	}
	e.inFlight++
	e.last, e.released = now, false
}

// end records a request of program id ending; release also forgets id.
func (p *programs) end(id string, release bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.table[id]
	if !ok {
		return
	}
	if e.inFlight > 0 {
		e.inFlight--
	}
	e.last = p.clk.Now()
	if (release || e.released) && e.inFlight == 0 {
		delete(p.table, id)
	}
}

// release forgets id, at once when it is idle, else when its last request
// ends; it reports whether id was known.
func (p *programs) release(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.table[id]
	switch {
	case !ok:
	case e.inFlight == 0:
		delete(p.table, id)
	default:
		e.released = true
	}
	return ok
}

// states counts programs per state.
func (p *programs) states() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepLocked(p.clk.Now())
	s := map[string]int{"active": 0, "idle": 0}
	for _, e := range p.table {
		if e.inFlight > 0 {
			s["active"]++
		} else {
			s["idle"]++
		}
	}
	return s
}

// size is the number of ids tracked.
func (p *programs) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepLocked(p.clk.Now())
	return len(p.table)
}
