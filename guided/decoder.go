package guided

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-llm/turnstile/grammar"
)

// Decoder holds one matcher slot and one mask row per seat. It is owned by
// the engine's loop (not safe for concurrent use); Fill of different seats
// may run on several goroutines at once (each touches its own slot and row
// only; the grammars' shared tables are guarded inside grammar).
type Decoder struct {
	vocab *grammar.Vocab
	slots []*grammar.Matcher // nil: the seat is unconstrained
	rows  [][]uint64         // the seat's last mask, MaskWords words
	live  int
	// Stats since creation, for metrics.
	masks    int64
	maskTime time.Duration
}

// New makes a decoder for seats seats over vocab.
func New(seats int, vocab *grammar.Vocab) (*Decoder, error) {
	if seats <= 0 {
		return nil, fmt.Errorf("guided: %d seats: must be positive", seats)
	}
	if vocab == nil {
		return nil, errors.New("guided: no vocabulary")
	}
	d := &Decoder{vocab: vocab, slots: make([]*grammar.Matcher, seats), rows: make([][]uint64, seats)}
	w := vocab.MaskWords()
	backing := make([]uint64, seats*w)
	for i := range d.rows {
		d.rows[i] = backing[i*w : (i+1)*w : (i+1)*w]
	}
	return d, nil
}

// Seats is the number of matcher slots (the seat consumer's size).
func (d *Decoder) Seats() int { return len(d.slots) }

// Vocab is the vocabulary masks are over.
func (d *Decoder) Vocab() *grammar.Vocab { return d.vocab }

// Live is the number of seats holding a matcher.
func (d *Decoder) Live() int { return d.live }

func (d *Decoder) slot(seat int32) error {
	if seat < 0 || int(seat) >= len(d.slots) {
		return fmt.Errorf("guided: seat %d outside [0, %d)", seat, len(d.slots))
	}
	return nil
}

// Start gives seat a fresh matcher for g. The seat must be free.
func (d *Decoder) Start(seat int32, g *grammar.Grammar) error {
	if err := d.slot(seat); err != nil {
		return err
	}
	if d.slots[seat] != nil {
		return fmt.Errorf("guided: start seat %d: it still holds a matcher", seat)
	}
	d.slots[seat] = grammar.NewMatcher(g, d.vocab)
	d.live++
	return nil
}

// Active reports whether seat holds a matcher.
func (d *Decoder) Active(seat int32) bool {
	return seat >= 0 && int(seat) < len(d.slots) && d.slots[seat] != nil
}

// Accept advances seat's matcher by a sampled token. A token the grammar
// does not allow is an error: masks make it impossible, so it means the
// token did not come from this seat's mask.
func (d *Decoder) Accept(seat int32, tok int32) error {
	if err := d.slot(seat); err != nil {
		return err
	}
	m := d.slots[seat]
	if m == nil {
		return fmt.Errorf("guided: accept on seat %d, which holds no matcher", seat)
	}
	if err := m.Accept(tok); err != nil {
		return fmt.Errorf("guided: seat %d: %w", seat, err)
	}
	return nil
}

// Fill computes seat's mask for its next token into the seat's row and
// returns it (valid until the next Fill of the seat).
func (d *Decoder) Fill(seat int32) ([]uint64, error) {
	if err := d.slot(seat); err != nil {
		return nil, err
	}
	m := d.slots[seat]
	if m == nil {
		return nil, fmt.Errorf("guided: fill seat %d, which holds no matcher", seat)
	}
	if err := m.FillMask(d.rows[seat]); err != nil {
		return nil, fmt.Errorf("guided: seat %d: %w", seat, err)
	}
	return d.rows[seat], nil
}

// Note records the time of a batch of Fills (for metrics).
func (d *Decoder) Note(masks int, took time.Duration) {
	d.masks += int64(masks)
	d.maskTime += took
}

// Stats returns the masks computed and the time spent computing them.
func (d *Decoder) Stats() (masks int64, took time.Duration) { return d.masks, d.maskTime }

// Matcher returns seat's matcher (nil when unconstrained), for the
// engine's finish checks.
func (d *Decoder) Matcher(seat int32) *grammar.Matcher {
	if d.slot(seat) != nil {
		return nil
	}
	return d.slots[seat]
}

// End frees seat's slot (a no-op for an unconstrained seat).
func (d *Decoder) End(seat int32) error {
	if err := d.slot(seat); err != nil {
		return err
	}
	if d.slots[seat] != nil {
		d.slots[seat] = nil
		d.live--
	}
	return nil
}

// Check audits the slots: the live count matches the slots held, and
// every row has the vocabulary's width.
func (d *Decoder) Check() error {
	n := 0
	for _, m := range d.slots {
		if m != nil {
			n++
		}
	}
	if n != d.live {
		return fmt.Errorf("guided: %d slots hold a matcher, live count says %d", n, d.live)
	}
	for i, r := range d.rows {
		if len(r) != d.vocab.MaskWords() {
			return fmt.Errorf("guided: seat %d's mask row has %d words, want %d", i, len(r), d.vocab.MaskWords())
		}
	}
	return nil
}
