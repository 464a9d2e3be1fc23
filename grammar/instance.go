package grammar

// maxOrderSteps bounds the search for a member order.
const maxOrderSteps = 200_000

// CompactInstance writes a JSON document compactly (numbers as written,
// strings with only the escapes JSON requires), with object members in an
// order g accepts, searched with a matcher over the document's bytes. JSON
// Schema gives member order no meaning, so reordering never changes
// whether a document is valid. found is false when no order was accepted
// (then the members keep the document's order).
func CompactInstance(g *Grammar, v *Vocab, doc []byte) (text []byte, found bool, err error) {
	val, err := decodeOrdered(doc)
	if err != nil {
		return nil, false, err
	}
	w := &orderer{m: NewMatcher(g, v), done: map[any][]byte{}}
	if w.value(val) && w.m.Complete() {
		return w.buf, true, nil
	}
	return appendJSON(nil, val), false, nil
}

type orderer struct {
	m     *Matcher
	buf   []byte
	steps int
	// done keeps the text a composite value was written as the first time
	// it fitted, so trying its member in another position replays it in
	// one step instead of searching its members again.
	done map[any][]byte
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

// undo rolls back to a mark taken before emitting.
func (w *orderer) mark() (int, int) { return w.m.Accepted(), len(w.buf) }
func (w *orderer) undo(k, n int) {
	_ = w.m.Rollback(w.m.Accepted() - k)
	w.buf = w.buf[:n]
}

// value writes v; on failure the matcher and buffer are as before.
func (w *orderer) value(v any) bool {
	k, n := w.mark()
	key := compositeKey(v)
	if text, ok := w.done[key]; ok && key != nil {
		if w.emit(text) {
			return true
		}
	}
	var ok bool
	switch x := v.(type) {
	case *object:
		ok = w.emit([]byte("{")) && w.members(x.members, true)
	case []any:
		ok = w.emit([]byte("["))
		for i, e := range x {
			if !ok {
				break
			}
			if i > 0 {
				ok = w.emit([]byte(","))
			}
			ok = ok && w.value(e)
		}
		ok = ok && w.emit([]byte("]"))
	default:
		ok = w.emit(appendJSON(nil, v))
	}
	if !ok {
		w.undo(k, n)
	} else if key != nil {
		w.done[key] = append([]byte(nil), w.buf[n:]...)
	}
	return ok
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

// members writes the remaining members in some accepted order, then "}".
// It tries first the members that can come next and, once written, leave
// every other such member still able to come next (the grammar lists
// properties in an order; a member written too early shuts out the ones
// before it), then any order, within the step budget.
func (w *orderer) members(rest []member, first bool) bool {
	if len(rest) == 0 {
		return w.emit([]byte("}"))
	}
	var cands []int
	for i, mb := range rest {
		if w.probe(mb.key, first) {
			cands = append(cands, i)
		}
	}
	for pass := 0; pass < 2; pass++ {
		for _, i := range cands {
			mb := rest[i]
			k, n := w.mark()
			if w.emit(keyPrefix(mb.key, first)) && w.value(mb.val) {
				ok := true
				if pass == 0 {
					for _, j := range cands {
						if j != i && !w.probe(rest[j].key, false) {
							ok = false
							break
						}
					}
				}
				if ok {
					others := make([]member, 0, len(rest)-1)
					others = append(others, rest[:i]...)
					others = append(others, rest[i+1:]...)
					if w.members(others, false) {
						return true
					}
				}
			}
			w.undo(k, n)
			if w.steps > maxOrderSteps {
				return false
			}
		}
	}
	return false
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
