package policy

// Intrusive containers over *program, so moving a program between them
// allocates nothing and costs O(1) (the heap O(log n)).

// link is a program's membership in one plist.
type link struct {
	prev, next *program
	list       *plist // nil when in no list of this kind
}

// plist is a FIFO of programs through one of their links (kind indexes
// program.links). Programs are appended as their time key is set, and the
// clock never goes back, so every plist is ordered by that key.
type plist struct {
	head, tail *program
	n          int
	kind       int
}

func (l *plist) push(p *program) {
	k := &p.links[l.kind]
	k.list, k.prev, k.next = l, l.tail, nil
	if l.tail != nil {
		l.tail.links[l.kind].next = p
	} else {
		l.head = p
	}
	l.tail = p
	l.n++
}

func (l *plist) remove(p *program) {
	k := &p.links[l.kind]
	if k.prev != nil {
		k.prev.links[l.kind].next = k.next
	} else {
		l.head = k.next
	}
	if k.next != nil {
		k.next.links[l.kind].prev = k.prev
	} else {
		l.tail = k.prev
	}
	*k = link{}
	l.n--
}

// Link kinds.
const (
	linkQueue = iota // resume queue of the program's class
	linkLease        // lease list (ACTING, no pending turn), by lastActive
	numLinks
)

// actingHeap is a min-heap of ACTIVE ACTING programs by (tokens, ord): the
// pause victims. An ACTING program's tokens do not change.
type actingHeap []*program

func less(a, b *program) bool {
	if a.tokens != b.tokens {
		return a.tokens < b.tokens
	}
	return a.ord < b.ord
}

func (h *actingHeap) push(p *program) {
	p.hIdx = len(*h)
	*h = append(*h, p)
	h.up(p.hIdx)
}

func (h *actingHeap) remove(p *program) {
	s := *h
	i, last := p.hIdx, len(s)-1
	if i != last {
		s[i] = s[last]
		s[i].hIdx = i
	}
	s[last] = nil
	*h = s[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
	p.hIdx = -1
}

func (h actingHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !less(h[i], h[parent]) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h actingHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && less(h[r], h[l]) {
			m = r
		}
		if !less(h[m], h[i]) {
			return
		}
		h.swap(i, m)
		i = m
	}
}

func (h actingHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hIdx = i
	h[j].hIdx = j
}
