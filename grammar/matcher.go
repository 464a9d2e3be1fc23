package grammar

import (
	"errors"
	"fmt"
	"math/bits"
)

// Matcher follows one generation through a grammar: it accepts tokens one
// at a time, fills the mask of the tokens allowed next, rolls back
// accepted tokens, and says when the grammar is complete (then the stop
// tokens are allowed). A Matcher is not safe for concurrent use; many
// matchers may share one Grammar and one Vocab.
type Matcher struct {
	g    *Grammar
	v    *Vocab
	cur  []*frame   // the parses alive now
	hist [][]*frame // the parses before each accepted token
	done bool       // a stop token was accepted
	// frames are interned so that equal stacks are one pointer.
	frames map[frameKey]*frame
	run    runner
	seen   map[*frame]bool
	tmp    []uint64
	next   []*frame
}

// frame is one level of a parse's stack: a grammar state, and the frame
// to return to when its rule ends (nil for the outermost rule).
type frame struct {
	state  int32
	parent *frame
}

type frameKey struct {
	state  int32
	parent *frame
}

// maxSteps bounds the work of one Accept or one suffix check, against
// grammars so ambiguous that the parses multiply.
const maxSteps = 1 << 20

// ErrRejected is returned (wrapped) by Accept for a token the grammar does
// not allow here.
var ErrRejected = errors.New("token not allowed by the grammar")

// NewMatcher starts a matcher at the beginning of g's language over v.
func NewMatcher(g *Grammar, v *Vocab) *Matcher {
	m := &Matcher{g: g, v: v, frames: map[frameKey]*frame{}, seen: map[*frame]bool{}}
	m.run.g = g
	m.Reset()
	return m
}

// Reset returns the matcher to the start of the language.
func (m *Matcher) Reset() {
	clear(m.frames)
	m.cur = []*frame{m.intern(m.g.ruleStart[m.g.top], nil)}
	m.hist = m.hist[:0]
	m.done = false
}

func (m *Matcher) intern(state int32, parent *frame) *frame {
	k := frameKey{state, parent}
	if f := m.frames[k]; f != nil {
		return f
	}
	f := &frame{state, parent}
	m.frames[k] = f
	return f
}

// Accepted is the number of tokens accepted since the start.
func (m *Matcher) Accepted() int { return len(m.hist) }

// Done reports whether a stop token has been accepted.
func (m *Matcher) Done() bool { return m.done }

// Complete reports whether the text so far is a whole sentence of the
// language, so a stop token may come next.
func (m *Matcher) Complete() bool {
	if m.done {
		return false
	}
	for _, f := range m.cur {
		if m.g.canEnd(f) {
			return true
		}
	}
	return false
}

// canEnd: every frame from f down accepts, so the parse can return all
// the way out without reading more.
func (g *Grammar) canEnd(f *frame) bool {
	for ; f != nil; f = f.parent {
		if !g.states[f.state].accept {
			return false
		}
	}
	return true
}

// Accept advances by token id, or returns an error wrapping ErrRejected
// and leaves the matcher as it was.
func (m *Matcher) Accept(id int32) error {
	if id < 0 || int(id) >= m.v.Size() {
		return fmt.Errorf("token %d is outside the vocabulary [0, %d): %w", id, m.v.Size(), ErrRejected)
	}
	if m.done {
		return fmt.Errorf("token %d after the stop token: %w", id, ErrRejected)
	}
	if m.v.special[id] {
		if m.v.IsStop(id) && m.Complete() {
			m.hist = append(m.hist, m.cur)
			m.done = true
			return nil
		}
		return fmt.Errorf("token %d is a control token: %w", id, ErrRejected)
	}
	next, err := m.advance(m.cur, m.v.pieces[id])
	if err != nil {
		return fmt.Errorf("token %d (%q): %w", id, m.v.pieces[id], err)
	}
	if len(next) == 0 {
		return fmt.Errorf("token %d (%q): %w", id, m.v.pieces[id], ErrRejected)
	}
	m.hist = append(m.hist, m.cur)
	m.cur = next
	return nil
}

// AcceptBytes advances by raw bytes (text that is not a whole token, such
// as a forced continuation); it cannot be rolled back by less than all of
// it.
func (m *Matcher) AcceptBytes(b []byte) error {
	if m.done {
		return fmt.Errorf("bytes after the stop token: %w", ErrRejected)
	}
	next, err := m.advance(m.cur, b)
	if err != nil {
		return err
	}
	if len(next) == 0 {
		return fmt.Errorf("bytes %q: %w", b, ErrRejected)
	}
	m.hist = append(m.hist, m.cur)
	m.cur = next
	return nil
}

// Rollback undoes the last k accepted tokens.
func (m *Matcher) Rollback(k int) error {
	if k < 0 || k > len(m.hist) {
		return fmt.Errorf("grammar: cannot roll back %d tokens, %d accepted", k, len(m.hist))
	}
	if k == 0 {
		return nil
	}
	m.cur = m.hist[len(m.hist)-k]
	m.hist = m.hist[:len(m.hist)-k]
	m.done = false
	return nil
}

// advance returns the parses after reading b from each of cur.
func (m *Matcher) advance(cur []*frame, b []byte) ([]*frame, error) {
	var out []*frame
	m.run.steps = 0
	m.run.emit = func(local []int32, base *frame) bool {
		f := base
		for _, s := range local {
			f = m.intern(s, f)
		}
		for _, o := range out {
			if o == f {
				return false
			}
		}
		out = append(out, f)
		return len(out) > m.g.limits.Configs // too many: stop, refused below
	}
	for _, f := range cur {
		if err := m.run.from(f, b); err != nil {
			return nil, err
		}
		if len(out) > m.g.limits.Configs {
			return nil, fmt.Errorf("more than %d parses of the grammar at once (too ambiguous): %w", m.g.limits.Configs, errTooLarge)
		}
	}
	return out, nil
}

// accepts reports whether b can be read from f.
func (m *Matcher) accepts(f *frame, b []byte) bool {
	m.run.steps = 0
	m.run.emit = func([]int32, *frame) bool { return true }
	ok, err := m.run.fromBool(f, b)
	return ok && err == nil
}

// FillMask sets in mask (MaskWords words) the tokens allowed next: text
// tokens the grammar accepts here, and the stop tokens when it is
// complete. After a stop token nothing is allowed.
func (m *Matcher) FillMask(mask []uint64) error {
	if len(mask) != m.v.MaskWords() {
		return fmt.Errorf("grammar: mask has %d words, the vocabulary needs %d", len(mask), m.v.MaskWords())
	}
	clear(mask)
	if m.done {
		return nil
	}
	clear(m.seen)
	complete, first := false, true
	for _, f := range m.cur {
		if err := m.addMask(mask, f, &complete, &first); err != nil {
			clear(mask)
			return err
		}
	}
	if complete {
		for _, s := range m.v.stops {
			mask[s>>6] |= 1 << (s & 63)
		}
	}
	return nil
}

func (m *Matcher) addMask(mask []uint64, f *frame, complete, first *bool) error {
	for ; f != nil; f = f.parent {
		if m.seen[f] {
			return nil
		}
		m.seen[f] = true
		g := m.g
		g.mu.Lock()
		t, err := g.table(g.cache(m.v), f.state)
		g.mu.Unlock()
		if err != nil {
			return err
		}
		m.applyTable(mask, t, first)
		if f.parent != nil {
			for i := range t.groups {
				gr := &t.groups[i]
				if allSet(mask, gr.toks) {
					continue
				}
				if m.accepts(f.parent, gr.suffix) {
					for _, id := range gr.toks {
						mask[id>>6] |= 1 << (id & 63)
					}
				}
			}
		}
		if !t.exit0 {
			return nil
		}
		if f.parent == nil {
			*complete = true
			return nil
		}
		// The rule can end here: whatever its caller reads next is allowed.
	}
	return nil
}

func (m *Matcher) applyTable(mask []uint64, t *tokTable, first *bool) {
	switch t.mode {
	case listAccept:
		for _, id := range t.list {
			mask[id>>6] |= 1 << (id & 63)
		}
	case bitsAccept:
		for i, w := range t.bits {
			mask[i] |= w
		}
	case listReject:
		if *first {
			copy(mask, m.v.text)
			for _, id := range t.list {
				mask[id>>6] &^= 1 << (id & 63)
			}
		} else {
			if m.tmp == nil {
				m.tmp = make([]uint64, len(mask))
			}
			copy(m.tmp, m.v.text)
			for _, id := range t.list {
				m.tmp[id>>6] &^= 1 << (id & 63)
			}
			for i, w := range m.tmp {
				mask[i] |= w
			}
		}
	}
	setIDs(mask, t.long.acc)
	*first = false
}

func allSet(mask []uint64, ids []int32) bool {
	for _, id := range ids {
		if mask[id>>6]&(1<<(id&63)) == 0 {
			return false
		}
	}
	return true
}

// CountMask returns how many tokens a mask allows.
func CountMask(mask []uint64) int {
	n := 0
	for _, w := range mask {
		n += bits.OnesCount64(w)
	}
	return n
}

// runner explores the ways a byte string can be read from a parse: it
// reads with the top frame, calls rules (pushing, or replacing a frame
// whose continuation is final), and returns to callers, backtracking over
// the choices. emit receives each parse that read the whole string (the
// local frames above base); returning true stops the search.
type runner struct {
	g     *Grammar
	stack []int32
	emit  func(local []int32, base *frame) bool
	steps int
	err   error
}

var errTooAmbiguous = fmt.Errorf("more than %d steps to read one token (the grammar is too ambiguous): %w", maxSteps, errTooLarge)

func (r *runner) from(f *frame, b []byte) error {
	_, err := r.fromBool(f, b)
	return err
}

func (r *runner) fromBool(f *frame, b []byte) (bool, error) {
	if len(r.stack) == 0 {
		r.stack = make([]int32, 64)
	}
	r.err = nil
	r.stack[0] = f.state
	ok := r.walk(1, f.parent, b)
	return ok, r.err
}

func (r *runner) walk(n int, base *frame, s []byte) bool {
	if r.steps++; r.steps > maxSteps {
		r.err = errTooAmbiguous
		return true
	}
	if len(s) == 0 {
		return r.emit(r.stack[:n], base)
	}
	top := r.stack[n-1]
	st := &r.g.states[top]
	if to := st.next(s[0]); to >= 0 {
		r.stack[n-1] = to
		stop := r.walk(n, base, s[1:])
		r.stack[n-1] = top
		if stop {
			return true
		}
	}
	for _, c := range st.calls {
		var stop bool
		if r.g.states[c.ret].final {
			r.stack[n-1] = c.start
			stop = r.walk(n, base, s)
		} else {
			if n+1 > len(r.stack) {
				r.stack = append(r.stack, make([]int32, len(r.stack))...)
			}
			r.stack[n-1] = c.ret
			r.stack[n] = c.start
			stop = r.walk(n+1, base, s)
		}
		r.stack[n-1] = top
		if stop {
			return true
		}
	}
	if st.accept {
		if n > 1 {
			stop := r.walk(n-1, base, s)
			r.stack[n-1] = top
			if stop {
				return true
			}
		} else if base != nil {
			r.stack[0] = base.state
			stop := r.walk(1, base.parent, s)
			r.stack[0] = top
			if stop {
				return true
			}
		}
	}
	return false
}

// Forced returns the bytes the grammar forces next, at most max: while
// the text is not complete and exactly one byte can follow, that byte is
// forced (a JSON object's required key, say). An engine may append them
// without sampling; they cross token boundaries, so it tokenizes them.
func (m *Matcher) Forced(max int) []byte {
	if m.done {
		return nil
	}
	var out []byte
	cur := m.cur
	for len(out) < max {
		var first byteSet
		for _, f := range cur {
			if m.g.canEnd(f) {
				return out
			}
			first = first.union(m.g.firstBytes(f))
		}
		b, ok := first.only()
		if !ok {
			return out
		}
		next, err := m.advance(cur, []byte{b})
		if err != nil || len(next) == 0 {
			return out
		}
		out = append(out, b)
		cur = next
	}
	return out
}

// firstBytes is the set of bytes that can be read next from f: the top
// frame's, its callees' (recursively) and, where it can return, its
// caller's.
func (g *Grammar) firstBytes(f *frame) byteSet {
	var out byteSet
	for ; f != nil; f = f.parent {
		out = out.union(g.stateFirst(f.state, 0))
		if !g.states[f.state].accept {
			break
		}
	}
	return out
}

// stateFirst: bytes readable from state q without returning; callees
// read at least one byte, and left recursion is refused, so the descent
// ends.
func (g *Grammar) stateFirst(q int32, depth int) byteSet {
	s := &g.states[q]
	var out byteSet
	for _, t := range s.trans {
		out = out.union(rangeSet(t.lo, t.hi))
	}
	if depth < len(g.ruleStart) {
		for _, c := range s.calls {
			out = out.union(g.stateFirst(c.start, depth+1))
		}
	}
	return out
}
