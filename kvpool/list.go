package kvpool

// Intrusive circular doubly linked lists over block ids, using Pool.prev and
// Pool.next. Index n is the head sentinel of the free-uncached list, n+1 that
// of the free-cached LRU list (front = least recently freed = next evicted).

func (p *Pool) uncachedHead() int32 { return p.n }
func (p *Pool) cachedHead() int32   { return p.n + 1 }

func (p *Pool) listInit(h int32) { p.prev[h], p.next[h] = h, h }

// listPushBack links b before the sentinel h (at the list's back).
func (p *Pool) listPushBack(h, b int32) {
	last := p.prev[h]
	p.prev[b], p.next[b] = last, h
	p.next[last] = b
	p.prev[h] = b
}

// listRemove unlinks b from whatever list holds it, in O(1).
func (p *Pool) listRemove(b int32) {
	pr, nx := p.prev[b], p.next[b]
	p.next[pr] = nx
	p.prev[nx] = pr
	p.prev[b], p.next[b] = b, b
}
