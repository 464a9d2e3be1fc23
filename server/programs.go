package server

import (
	"fmt"
	"sync"
)

// maxProgramID bounds a program id's length, bytes.
const maxProgramID = 256

// programs is HTTP-only state: the program ids of HTTP requests with their
// requests in flight at the server, for /metrics' active/idle view when the
// engine has no program policy of its own. It is not program state, which
// the engine's policy owns (policy.Controller): with a policy, /metrics
// exports the engine's ProgramStates and DELETE /v1/programs/{id} answers
// from the engine's ReleaseProgram, never from this table. A program is
// "active" while it has requests in flight and "idle" between them, until
// released. The table is bounded: when full, idle programs are forgotten
// first, and ids beyond the bound are served but not tracked.
type programs struct {
	mu    sync.Mutex
	max   int
	table map[string]int // id → requests in flight
}

func newPrograms(max int) *programs {
	return &programs{max: max, table: make(map[string]int)}
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

// begin records a request of program id starting.
func (p *programs) begin(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.table[id]; !ok && len(p.table) >= p.max {
		for k, n := range p.table {
			if n == 0 {
				delete(p.table, k)
				break
			}
		}
		if len(p.table) >= p.max {
			return
		}
	}
	p.table[id]++
}

// end records a request of program id ending; release also forgets id.
func (p *programs) end(id string, release bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.table[id]
	if !ok {
		return
	}
	if n > 0 {
		n--
	}
	if release && n == 0 {
		delete(p.table, id)
		return
	}
	p.table[id] = n
}

// release forgets id once it is idle; it reports whether id was known.
func (p *programs) release(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.table[id]
	if ok && n == 0 {
		delete(p.table, id)
	}
	return ok
}

// states counts programs per state.
func (p *programs) states() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := map[string]int{"active": 0, "idle": 0}
	for _, n := range p.table {
		if n > 0 {
			s["active"]++
		} else {
			s["idle"]++
		}
	}
	return s
}
