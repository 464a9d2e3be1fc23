package cuda

// lru is a map of at most max entries that drops the least recently used
// when full, handing it to drop (which releases what the value holds). A
// get or put makes an entry the most recent. Not safe for concurrent use:
// its owner (a Gemm) lives on the device thread.
type lru[K comparable, V any] struct {
	max     int
	drop    func(K, V)
	entries map[K]*lruEntry[V]
	clock   uint64 // uses so far: an entry's last use orders eviction
}

type lruEntry[V any] struct {
	v    V
	used uint64
}

func newLRU[K comparable, V any](max int, drop func(K, V)) *lru[K, V] {
	return &lru[K, V]{max: max, drop: drop, entries: make(map[K]*lruEntry[V])}
}

func (l *lru[K, V]) get(k K) (V, bool) {
	e, ok := l.entries[k]
	if !ok {
		var zero V
		return zero, false
	}
	l.clock++
	e.used = l.clock
	return e.v, true
}

// put adds k (not present), first dropping the least recently used entry
// when the map is full. Eviction scans the entries: it happens once per new
// shape past max, never on the steady state's hits.
func (l *lru[K, V]) put(k K, v V) {
	if len(l.entries) >= l.max {
		var oldK K
		var old *lruEntry[V]
		for key, e := range l.entries {
			if old == nil || e.used < old.used {
				oldK, old = key, e
			}
		}
		delete(l.entries, oldK)
		l.drop(oldK, old.v)
	}
	l.clock++
	l.entries[k] = &lruEntry[V]{v: v, used: l.clock}
}

func (l *lru[K, V]) len() int { return len(l.entries) }

// clear drops every entry.
func (l *lru[K, V]) clear() {
	for k, e := range l.entries {
		l.drop(k, e.v)
	}
	clear(l.entries)
}
