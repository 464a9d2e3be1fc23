package executor

import (
	"bytes"
	"unicode/utf8"
)

// textMatcher turns a request's token pieces into output text: it holds back
// the tail that could still become a stop string or that is an incomplete
// UTF-8 character, and finds stop strings across token boundaries.
//
// Why holding back is enough: every emitted byte lies before the longest
// suffix that is a proper prefix of some stop string, so any occurrence of a
// stop string starts inside pending; searching pending alone finds it.
type textMatcher struct {
	stops   [][]byte
	pending []byte // decoded, not yet emitted
	// matched is the stop string add found ("" until one is found).
	matched string
}

func (m *textMatcher) reset(stops []string) {
	m.pending = m.pending[:0]
	m.stops = m.stops[:0]
	m.matched = ""
	for _, s := range stops {
		m.stops = append(m.stops, []byte(s))
	}
}

// add appends piece. It returns the bytes that may be emitted now (valid
// until the next call) and whether a stop string was found; after a stop the
// emitted bytes end where the stop string begins and the rest is dropped.
func (m *textMatcher) add(piece []byte) (emit []byte, stopped bool) {
	m.pending = append(m.pending, piece...)
	if cut, k := m.firstStop(); cut >= 0 {
		m.matched = string(m.stops[k])
		emit = m.pending[:cut]
		m.pending = m.pending[:0]
		return emit, true
	}
	hold := m.holdBack()
	n := len(m.pending) - hold
	if n == 0 {
		return nil, false
	}
	// Emit the head; keep the held tail at the front of pending. The
	// emitted bytes are copied out by the caller before the next add.
	emit = m.pending[:n]
	return emit, false
}

// commit drops what add returned for emission; called after the caller
// copied it.
func (m *textMatcher) commit(emitted int) {
	if emitted == 0 {
		return
	}
	rest := copy(m.pending, m.pending[emitted:])
	m.pending = m.pending[:rest]
}

// flush returns everything held back (the request ended without a stop).
func (m *textMatcher) flush() []byte {
	out := m.pending
	m.pending = m.pending[:0]
	return out
}

// firstStop is the earliest index in pending where any stop string starts,
// or -1, and which stop string starts there (the first listed of those
// that do).
func (m *textMatcher) firstStop() (at, which int) {
	best, which := -1, -1
	for k, s := range m.stops {
		if i := bytes.Index(m.pending, s); i >= 0 && (best < 0 || i < best) {
			best, which = i, k
		}
	}
	return best, which
}

// holdBack is how many trailing bytes of pending must wait: the longest
// suffix that is a proper prefix of a stop string, or an incomplete UTF-8
// character, whichever is longer.
func (m *textMatcher) holdBack() int {
	p := m.pending
	hold := 0
	for _, s := range m.stops {
		k := min(len(s)-1, len(p))
		for ; k > hold; k-- {
			if bytes.Equal(p[len(p)-k:], s[:k]) {
				hold = k
				break
			}
		}
	}
	// Incomplete trailing character: find the start of the last rune.
	for back := 1; back <= utf8.UTFMax && back <= len(p); back++ {
		c := p[len(p)-back]
		if c < 0x80 {
			break // ASCII: complete
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(p[len(p)-back:]) && back > hold {
				hold = back
			}
			break
		}
	}
	return hold
}
