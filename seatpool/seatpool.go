package seatpool

import (
	"errors"
	"fmt"
	"math"
)

// MaxSeats is the largest pool New accepts: seat indices are int32, and no
// deployment comes near this many live sequences on one rank.
const MaxSeats = math.MaxInt32 / 2

// Sizing is the configuration live-sequence capacity is derived from.
type Sizing struct {
	MaxBatchSize     int  // sequences one step may schedule (> 0)
	Overlap          bool // overlap scheduler on
	DeferredTeardown bool // a finished request is torn down one iteration after its last token
}

// Headroom is the number of seats, beyond MaxBatchSize, that hold retiring
// sequences: one iteration of teardown (MaxBatchSize) when overlap is on and
// teardown is deferred, 0 otherwise. See the package doc for why.
func (s Sizing) Headroom() int {
	if s.Overlap && s.DeferredTeardown {
		return s.MaxBatchSize
	}
	return 0
}

// Seats returns the number of sequences that may be live at once under s:
// MaxBatchSize plus teardown headroom. It is the one definition every
// seat-indexed consumer must be sized from.
func Seats(s Sizing) (int, error) {
	if s.MaxBatchSize <= 0 {
		return 0, fmt.Errorf("seatpool: max batch size %d: must be > 0", s.MaxBatchSize)
	}
	if s.MaxBatchSize > MaxSeats/2 {
		return 0, fmt.Errorf("seatpool: max batch size %d: must be <= %d", s.MaxBatchSize, MaxSeats/2)
	}
	return s.MaxBatchSize + s.Headroom(), nil
}

// Seat is the row index a live sequence occupies in every seat-indexed
// structure; valid seats are in [0, Pool.Seats()).
type Seat int32

// State is the lifecycle state of one seat.
type State uint8

const (
	// Free seats may be acquired.
	Free State = iota
	// Live seats belong to admitted sequences that may still be scheduled.
	Live
	// Retiring seats belong to finished sequences awaiting teardown: never
	// scheduled again, still resident.
	Retiring
	// Invalid is what State reports for a seat outside the pool; no seat is
	// ever in it.
	Invalid
)

// String names the state as error messages use it.
func (s State) String() string {
	switch s {
	case Free:
		return "free"
	case Live:
		return "live"
	case Retiring:
		return "retiring"
	case Invalid:
		return "invalid"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// ErrNoSeat is returned by Acquire when every seat is live or retiring.
var ErrNoSeat = errors.New("seatpool: no free seat")

// Pool leases seats in [0, Seats()). Acquire and Release are O(1) and do not
// allocate: free seats are kept on a stack, and the most recently released
// seat is handed out first (its rows are likely still in cache).
type Pool struct {
	state []State // state[s] for every seat
	free  []Seat  // stack of free seats; free[:nfree] are valid
	nfree int
	live  int
	retir int
}

// New returns a pool of seats seats, all free. Seats are first handed out in
// ascending order (0, 1, 2, ...).
func New(seats int) (*Pool, error) {
	if seats <= 0 || seats > MaxSeats {
		return nil, fmt.Errorf("seatpool: %d seats: must be in 1..%d", seats, MaxSeats)
	}
	p := &Pool{
		state: make([]State, seats),
		free:  make([]Seat, seats),
		nfree: seats,
	}
	// The stack pops from the top, so push in descending order.
	for i := range p.free {
		p.free[i] = Seat(seats - 1 - i)
	}
	return p, nil
}

// Seats returns the pool's size: the number of seats, whatever their state.
func (p *Pool) Seats() int { return len(p.state) }

// Live returns the number of live seats: what admission charges.
func (p *Pool) Live() int { return p.live }

// Retiring returns the number of retiring seats. Live() + Retiring() is the
// number of resident sequences, which liveness decisions use.
func (p *Pool) Retiring() int { return p.retir }

// Free returns the number of free seats.
func (p *Pool) Free() int { return p.nfree }

// State returns seat s's state, or Invalid if s is outside the pool.
func (p *Pool) State(s Seat) State {
	if s < 0 || int(s) >= len(p.state) {
		return Invalid
	}
	return p.state[s]
}

// Acquire takes a free seat and makes it live. It returns ErrNoSeat (wrapped,
// with the pool's counts) when none is free.
func (p *Pool) Acquire() (Seat, error) {
	if p.nfree == 0 {
		return -1, p.noSeat()
	}
	p.nfree--
	s := p.free[p.nfree]
	p.state[s] = Live
	p.live++
	return s, nil
}

// noSeat is kept out of Acquire so that the fast path stays small enough to
// inline.
func (p *Pool) noSeat() error {
	return fmt.Errorf("%w: %d seats, %d live, %d retiring", ErrNoSeat, len(p.state), p.live, p.retir)
}

// Retire moves a live seat to retiring: its sequence has produced its last
// token and will be torn down next iteration.
func (p *Pool) Retire(s Seat) error {
	if err := p.expect(s, "retire", Live); err != nil {
		return err
	}
	p.state[s] = Retiring
	p.live--
	p.retir++
	return nil
}

// Release frees a live seat (abort) or a retiring one (teardown).
func (p *Pool) Release(s Seat) error {
	if err := p.expect(s, "release", Live, Retiring); err != nil {
		return err
	}
	if p.state[s] == Live {
		p.live--
	} else {
		p.retir--
	}
	p.state[s] = Free
	p.free[p.nfree] = s
	p.nfree++
	return nil
}

// expect returns an error naming s, its state and op unless s is in the pool
// and in one of want.
func (p *Pool) expect(s Seat, op string, want ...State) error {
	if s < 0 || int(s) >= len(p.state) {
		return fmt.Errorf("seatpool: %s seat %d: outside the pool of %d seats", op, s, len(p.state))
	}
	for _, w := range want {
		if p.state[s] == w {
			return nil
		}
	}
	return fmt.Errorf("seatpool: %s seat %d: seat is %s", op, s, p.state[s])
}

// Check verifies every invariant: each seat in exactly one known state, the
// counts equal to the states, and the free stack holding exactly the free
// seats, each once.
func (p *Pool) Check() error {
	n := len(p.state)
	if len(p.free) != n {
		return fmt.Errorf("seatpool: free stack capacity %d, want %d seats", len(p.free), n)
	}
	if p.nfree < 0 || p.nfree > n {
		return fmt.Errorf("seatpool: free count %d outside 0..%d", p.nfree, n)
	}
	var free, live, retir int
	for i, st := range p.state {
		switch st {
		case Free:
			free++
		case Live:
			live++
		case Retiring:
			retir++
		default:
			return fmt.Errorf("seatpool: seat %d in unknown state %s", i, st)
		}
	}
	if free != p.nfree || live != p.live || retir != p.retir {
		return fmt.Errorf("seatpool: counts free/live/retiring %d/%d/%d, states say %d/%d/%d",
			p.nfree, p.live, p.retir, free, live, retir)
	}
	seen := make([]bool, n)
	for i, s := range p.free[:p.nfree] {
		if s < 0 || int(s) >= n {
			return fmt.Errorf("seatpool: free stack entry %d is seat %d, outside the pool of %d seats", i, s, n)
		}
		if seen[s] {
			return fmt.Errorf("seatpool: seat %d on the free stack twice", s)
		}
		seen[s] = true
		if p.state[s] != Free {
			return fmt.Errorf("seatpool: seat %d on the free stack is %s", s, p.state[s])
		}
	}
	return nil
}

// Consumer is one seat-indexed structure and how many sequences (rows) it can
// hold, e.g. {"sampler state", 32}.
type Consumer struct {
	Owner string // what the structure is, as error messages name it
	Holds int    // sequences it can hold; seat indices it accepts are [0, Holds)
}

// Validate checks every consumer against the pool in both directions and
// returns all mismatches joined (errors.Join), each naming both numbers and
// both owners. A consumer smaller than the pool would be handed a seat index
// it cannot hold (a crash mid-run); one larger than the pool means work is
// admitted that has no seat (lost throughput). A consumer with no owner name
// or a non-positive size is also an error.
func (p *Pool) Validate(consumers ...Consumer) error {
	var errs []error
	n := len(p.state)
	for i, c := range consumers {
		switch {
		case c.Owner == "":
			errs = append(errs, fmt.Errorf("seatpool: consumer %d (holds %d) has no owner name", i, c.Holds))
		case c.Holds <= 0:
			errs = append(errs, fmt.Errorf("seatpool: %s holds %d sequences: must be > 0", c.Owner, c.Holds))
		case n > c.Holds:
			errs = append(errs, fmt.Errorf("seat pool has %d seats but %s holds %d: %s would index past it",
				n, c.Owner, c.Holds, seatRange(c.Holds, n-1)))
		case n < c.Holds:
			errs = append(errs, fmt.Errorf("seat pool has %d seats but %s holds %d: %s would have no seat",
				n, c.Owner, c.Holds, plural(c.Holds-n, "admitted sequence")))
		}
	}
	return errors.Join(errs...)
}

// seatRange names seats lo..hi for a message.
func seatRange(lo, hi int) string {
	if lo == hi {
		return fmt.Sprintf("seat %d", lo)
	}
	return fmt.Sprintf("seats %d..%d", lo, hi)
}

// plural returns "n thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
