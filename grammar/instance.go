package grammar

import (
	"slices"
	"unsafe"
)

// maxOrderSteps bounds the search for a member order.
const maxOrderSteps = 200_000

// CompactInstance writes a JSON document compactly (numbers as written,
// strings with only the escapes JSON requires), with object members in an
// order g accepts, searched with a matcher over the document's bytes. JSON
// Schema gives member order no meaning, so reordering never changes
// whether a document is valid. Unless the outcome is OrderFound, the
// members keep the document's order.
func CompactInstance(g *Grammar, v *Vocab, doc []byte) (text []byte, outcome OrderOutcome, err error) {
	val, err := decodeOrdered(doc)
	if err != nil {
		return nil, OrderNone, err
	}
	// First commit to the first order that fits each value (cheap); if
	// that fails, commit likewise but search a value's orders under its
	// continuation where its first one dies later; last, search every
	// order. Each pass has its own budget: the later passes find orders
	// the earlier miss, and can spend their budget deep in a document
	// where an earlier pass would have backed out and tried the next
	// order above.
	for _, mode := range []orderMode{commitFirst, commitThenSearch, searchAll} {
		w := &orderer{m: NewMatcher(g, v), mode: mode}
		if w.value(val, func() bool { return w.m.Complete() }) {
			return w.buf, OrderFound, nil
		}
		if mode == searchAll && w.steps <= maxOrderSteps {
			// The complete search ran to its end: no order is accepted.
			return appendJSON(nil, val), OrderNone, nil
		}
	}
	return appendJSON(nil, val), OrderUnknown, nil
}

// OrderOutcome is what CompactInstance's member-order search found.
type OrderOutcome int

const (
	// OrderFound: the text is in an order the grammar accepts.
	OrderFound OrderOutcome = iota
	// OrderNone: the grammar accepts the document in no member order.
	OrderNone
	// OrderUnknown: the search's budget ran out first.
	OrderUnknown
)

// orderMode is how an orderer chooses among a value's member orders.
type orderMode int

const (
	// commitFirst keeps each value's first order that fits it, whatever
	// follows.
	commitFirst orderMode = iota
	// commitThenSearch keeps the first order too, but when what follows
	// dies, searches the value's orders under it.
	commitThenSearch
	// searchAll searches every order of every value under its
	// continuation.
	searchAll
)

// orderer searches member orders depth first. Each write takes a
// continuation, the rest of the document: an order that the grammar
// accepts only through a parse that dies later is undone and the next one
// tried (an object under anyOf may fit a permissive alternative in any
// order, and the strict one in one order only).
type orderer struct {
	m     *Matcher
	buf   []byte
	steps int
	// mode other than searchAll commits to each value's first accepted
	// order and remembers it by the parses it was written from: the same
	// value from the same parses is written the same way again (ranking
	// the members of an object writes their values once more).
	mode orderMode
	memo map[memoKey][]byte
}

type memoKey struct {
	val   any
	state string
}

// stateKey names the matcher's parses (frames are interned, so equal
// parse sets have equal pointers).
func (w *orderer) stateKey() string {
	b := make([]byte, 0, 8*len(w.m.cur))
	for _, f := range w.m.cur {
		p := uintptr(unsafe.Pointer(f))
		for i := 0; i < 8; i++ {
			b = append(b, byte(p>>(8*i)))
		}
	}
	return string(b)
}

// emit appends b if the matcher accepts it.
func (w *orderer) emit(b []byte) bool {
	w.steps++
	if w.steps > maxOrderSteps || w.m.AcceptBytes(b) != nil {
		return false
	}
	w.buf = append(w.buf, b...)
	return true
}

// mark and undo roll the matcher and the buffer back.
func (w *orderer) mark() (int, int) { return w.m.Accepted(), len(w.buf) }
func (w *orderer) undo(k, n int) {
	_ = w.m.Rollback(w.m.Accepted() - k)
	w.buf = w.buf[:n]
}

// value writes v and then the rest (k); on failure everything is undone.
func (w *orderer) value(v any, k func() bool) bool {
	if w.mode != searchAll {
		mk, mn := w.mark()
		key := memoKey{compositeKey(v), ""}
		if key.val != nil {
			key.state = w.stateKey()
			if text, ok := w.memo[key]; ok {
				if text == nil {
					return false
				}
				if w.emit(text) && k() {
					return true
				}
				w.undo(mk, mn)
				if w.mode == commitFirst {
					return false
				}
				return w.write(v, k)
			}
		}
		ok := w.write(v, func() bool { return true })
		if key.val != nil && w.steps <= maxOrderSteps {
			if w.memo == nil {
				w.memo = map[memoKey][]byte{}
			}
			if ok {
				w.memo[key] = append([]byte(nil), w.buf[mn:]...)
			} else {
				w.memo[key] = nil
			}
		}
		if !ok {
			return false
		}
		if k() {
			return true
		}
		// The first order fits v but not what follows: search v's orders
		// under the continuation.
		w.undo(mk, mn)
		if w.mode == commitFirst || w.steps > maxOrderSteps {
			return false
		}
		return w.write(v, k)
	}
	return w.write(v, k)
}

func (w *orderer) write(v any, k func() bool) bool {
	mk, mn := w.mark()
	switch x := v.(type) {
	case *object:
		if w.emit([]byte("{")) && w.members(x.members, true, k) {
			return true
		}
	case []any:
		if w.emit([]byte("[")) && w.elems(x, 0, k) {
			return true
		}
	default:
		if w.emit(appendJSON(nil, v)) && k() {
			return true
		}
	}
	w.undo(mk, mn)
	return false
}

func (w *orderer) elems(x []any, i int, k func() bool) bool {
	mk, mn := w.mark()
	if i == len(x) {
		if w.emit([]byte("]")) && k() {
			return true
		}
		w.undo(mk, mn)
		return false
	}
	if i > 0 && !w.emit([]byte(",")) {
		return false
	}
	if w.value(x[i], func() bool { return w.elems(x, i+1, k) }) {
		return true
	}
	w.undo(mk, mn)
	return false
}

// members writes the remaining members in some accepted order, then "}",
// then the rest. It tries first the members that can come next and, once
// written, leave every other such member still able to come next (the
// grammar lists properties in an order; a member written too early shuts
// out the ones before it), then any order, within the step budget.
func (w *orderer) members(rest []member, first bool, k func() bool) bool {
	if len(rest) == 0 {
		mk, mn := w.mark()
		if w.emit([]byte("}")) && k() {
			return true
		}
		w.undo(mk, mn)
		return false
	}
	var cands []int
	for i, mb := range rest {
		if w.probe(mb.key, first) {
			cands = append(cands, i)
		}
	}
	// Rank the candidates by how many parses stay alive once the member is
	// written (an object under anyOf may fit a permissive alternative in
	// any order and the intended one in one order only: the order that
	// keeps both is the better guess), then by the document's order.
	if len(cands) > 1 {
		score := make(map[int]int, len(cands))
		for _, i := range cands {
			mk, mn := w.mark()
			if w.emit(keyPrefix(rest[i].key, first)) && w.value(rest[i].val, func() bool { return true }) {
				score[i] = len(w.m.cur)
			}
			w.undo(mk, mn)
		}
		slices.SortStableFunc(cands, func(a, b int) int { return score[b] - score[a] })
	}
	for pass := 0; pass < 2; pass++ {
		for _, i := range cands {
			mb := rest[i]
			others := make([]member, 0, len(rest)-1)
			others = append(others, rest[:i]...)
			others = append(others, rest[i+1:]...)
			mk, mn := w.mark()
			if w.emit(keyPrefix(mb.key, first)) && w.value(mb.val, func() bool {
				if pass == 0 {
					for _, j := range cands {
						if j != i && !w.probe(rest[j].key, false) {
							return false
						}
					}
				}
				return w.members(others, false, k)
			}) {
				return true
			}
			w.undo(mk, mn)
			if w.steps > maxOrderSteps {
				return false
			}
		}
	}
	return false
}

// compositeKey identifies an object or a non-empty array of the decoded
// document (nil for anything else).
func compositeKey(v any) any {
	switch x := v.(type) {
	case *object:
		return x
	case []any:
		if len(x) > 0 {
			return &x[0]
		}
	}
	return nil
}

// probe reports whether the member named key can come next, leaving the
// matcher as it was.
func (w *orderer) probe(key string, first bool) bool {
	k, n := w.mark()
	ok := w.emit(keyPrefix(key, first))
	w.undo(k, n)
	return ok
}

func keyPrefix(key string, first bool) []byte {
	var b []byte
	if !first {
		b = append(b, ',')
	}
	b = appendString(b, key)
	return append(b, ':')
}
