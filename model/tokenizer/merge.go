package tokenizer

import "unicode/utf8"

// symbol is one piece of the text being merged: bytes [start, start+n) of
// the working string, linked to its neighbours; n == 0 once merged away.
type symbol struct {
	start, n   int
	prev, next int
}

// bigram is a candidate merge of symbols left and left's next. size
// detects stale entries: the merge is valid only while both symbols still
// have the lengths they had when it was queued.
type bigram struct {
	left, right int
	prio        float64
	size        int
}

// bigramQueue is a binary heap that pops the highest priority first, the
// leftmost on ties. Hand-written over the typed slice: container/heap would
// box every bigram in an interface (one allocation per push).
type bigramQueue []bigram

func (q bigramQueue) less(i, j int) bool {
	if q[i].prio != q[j].prio {
		return q[i].prio > q[j].prio
	}
	return q[i].left < q[j].left
}

func (q *bigramQueue) push(b bigram) {
	*q = append(*q, b)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *bigramQueue) pop() bigram {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, best := 2*i+1, 2*i+2, i
		if l < n && h.less(l, best) {
			best = l
		}
		if r < n && h.less(r, best) {
			best = r
		}
		if best == i {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	*q = h
	return top
}

// merger runs the shared merge loop over one string. prio reports whether
// two adjacent pieces may merge and how urgently; merged is their
// concatenation (a substring of text, so no allocation).
type merger struct {
	text string
	syms []symbol
	q    bigramQueue
	prio func(left, right, merged string) (float64, bool)
}

// run splits text into UTF-8 characters (an invalid byte is its own
// symbol), merges until no candidate is left and returns the final pieces.
func (m *merger) run() []string {
	m.syms = m.syms[:0]
	for i := 0; i < len(m.text); {
		_, n := utf8.DecodeRuneInString(m.text[i:])
		m.syms = append(m.syms, symbol{start: i, n: n, prev: len(m.syms) - 1, next: len(m.syms) + 1})
		i += n
	}
	if len(m.syms) > 0 {
		m.syms[len(m.syms)-1].next = -1
	}
	m.q = m.q[:0]
	for i := 1; i < len(m.syms); i++ {
		m.try(i-1, i)
	}
	for len(m.q) > 0 {
		b := m.q.pop()
		l, r := &m.syms[b.left], &m.syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // stale
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			m.syms[r.next].prev = b.left
		}
		if l.prev >= 0 {
			m.try(l.prev, b.left)
		}
		if l.next >= 0 {
			m.try(b.left, l.next)
		}
	}
	var out []string
	for i := 0; i >= 0 && len(m.syms) > 0; i = m.syms[i].next {
		s := m.syms[i]
		out = append(out, m.text[s.start:s.start+s.n])
	}
	return out
}

func (m *merger) try(left, right int) {
	l, r := m.syms[left], m.syms[right]
	p, ok := m.prio(m.text[l.start:l.start+l.n], m.text[r.start:r.start+r.n], m.text[l.start:r.start+r.n])
	if ok {
		m.q.push(bigram{left: left, right: right, prio: p, size: l.n + r.n})
	}
}

// encodeSPM merges text (spaces already ▁) by token score and appends the ids.
func (t *Tokenizer) encodeSPM(out []int32, text string) []int32 {
	m := merger{text: text, prio: func(_, _, merged string) (float64, bool) {
		id, ok := t.index[merged]
		if !ok {
			return 0, false
		}
		return float64(t.scores[id]), true
	}}
	for _, p := range m.run() {
		if id, ok := t.index[p]; ok {
			out = append(out, id)
			continue
		}
		// Byte fallback: one <0xXX> token per byte of the unknown piece.
		for i := 0; i < len(p); i++ {
			if id := t.byteTok[p[i]]; id >= 0 {
				out = append(out, id)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
		}
	}
	return out
}
