package server

import (
	"container/list"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnstile-llm/turnstile/internal/clock"
)

// Defaults of the Responses store's bounds (Config.ResponsesMax,
// ResponsesMaxBytes, ResponsesTTL).
const (
	DefaultResponsesMax      = 4096
	DefaultResponsesMaxBytes = 64 << 20
	DefaultResponsesTTL      = time.Hour
)

// storedResponse is one stored Responses answer: what GET returns and what
// a later turn naming it as previous_response_id continues.
type storedResponse struct {
	id string
	// chain is the program id of the response's chain: every response
	// continuing it (previous_response_id) runs as a turn of that program.
	chain string
	// msgs is the conversation to date: the messages that produced the
	// response (this turn's instructions excepted) and its output as an
	// assistant message. Never modified once stored (later turns copy it).
	msgs []message
	// body is the response object's JSON, as answered.
	body    []byte
	created time.Time
	last    time.Time // last stored or read
	size    int64     // what the byte bound charges
	elem    *list.Element
}

// respStore keeps stored responses, bounded in count and bytes (the least
// recently used go first) and in time (a response unused for ttl expires;
// expired ones are dropped at every store operation). A response's size is
// its JSON plus its whole conversation's text: the text of a chain's
// earlier turns is shared in memory, so the byte bound is an upper bound on
// what the store holds. When a chain's last stored response goes (deleted,
// evicted or expired) and none of its turns is in flight, release is
// called with the chain's program id, outside the store's lock. Safe for
// concurrent use.
type respStore struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	ttl      time.Duration
	clk      clock.Clock
	release  func(chain string)

	byID  map[string]*storedResponse
	lru   *list.List // of *storedResponse, most recently used first
	bytes int64
	// chains counts, per chain, its stored responses and its turns in
	// flight; a chain with neither is forgotten (and released).
	chains map[string]*chainRefs
}

type chainRefs struct{ stored, inFlight int }

func newRespStore(max int, maxBytes int64, ttl time.Duration, clk clock.Clock, release func(string)) *respStore {
	return &respStore{max: max, maxBytes: maxBytes, ttl: ttl, clk: clk, release: release,
		byID: make(map[string]*storedResponse), lru: list.New(), chains: make(map[string]*chainRefs)}
}

// messageBytes is what a conversation's messages charge the byte bound:
// their text plus a fixed overhead per message and per call.
func messageBytes(msgs []message) int64 {
	var n int64
	for _, m := range msgs {
		n += 64 + int64(len(m.Role)+len(m.Content)+len(m.Name)+len(m.Reasoning)+len(m.ToolCallID))
		for _, c := range m.ToolCalls {
			n += 32 + int64(len(c.ID)+len(c.Name)+len(c.Arguments))
		}
	}
	return n
}

// releaseAll releases the chains whose references ended; it is called
// after unlocking, with what the locked part returned.
func (st *respStore) releaseAll(chains []string) {
	if st.release == nil {
		return
	}
	for _, c := range chains {
		st.release(c)
	}
}

// dropLocked removes r and returns its chain when that chain has nothing
// left.
func (st *respStore) dropLocked(r *storedResponse, released []string) []string {
	st.lru.Remove(r.elem)
	delete(st.byID, r.id)
	st.bytes -= r.size
	return st.unrefLocked(r.chain, func(c *chainRefs) { c.stored-- }, released)
}

func (st *respStore) unrefLocked(chain string, dec func(*chainRefs), released []string) []string {
	c := st.chains[chain]
	if c == nil {
		return released
	}
	dec(c)
	if c.stored <= 0 && c.inFlight <= 0 {
		delete(st.chains, chain)
		released = append(released, chain)
	}
	return released
}

// expireLocked drops the responses unused for ttl (the least recently
// used are at the back).
func (st *respStore) expireLocked(now time.Time, released []string) []string {
	for e := st.lru.Back(); e != nil; e = st.lru.Back() {
		r := e.Value.(*storedResponse)
		if now.Sub(r.last) < st.ttl {
			break
		}
		released = st.dropLocked(r, released)
	}
	return released
}

// put stores r (replacing a response of the same id) and evicts the least
// recently used responses beyond the bounds. A response larger than the
// byte bound alone is not stored; put reports whether r was.
func (st *respStore) put(r *storedResponse) bool {
	r.size = int64(len(r.body)) + int64(len(r.id)+len(r.chain)) + messageBytes(r.msgs)
	st.mu.Lock()
	now := st.clk.Now()
	released := st.expireLocked(now, nil)
	if old, ok := st.byID[r.id]; ok {
		released = st.dropLocked(old, released)
	}
	stored := r.size <= st.maxBytes && st.max > 0
	if stored {
		r.created, r.last = now, now
		// The chain is referenced before anything is evicted, so evicting
		// its other responses does not release it.
		c := st.chains[r.chain]
		if c == nil {
			c = &chainRefs{}
			st.chains[r.chain] = c
		}
		c.stored++
		for st.lru.Len() > 0 && (st.lru.Len() >= st.max || st.bytes+r.size > st.maxBytes) {
			released = st.dropLocked(st.lru.Back().Value.(*storedResponse), released)
		}
		r.elem = st.lru.PushFront(r)
		st.byID[r.id] = r
		st.bytes += r.size
	}
	st.mu.Unlock()
	st.releaseAll(released)
	return stored
}

// get returns the response id, refreshing its last use; nil when unknown
// or expired. The result is shared: its fields must not be modified.
func (st *respStore) get(id string) *storedResponse {
	st.mu.Lock()
	now := st.clk.Now()
	released := st.expireLocked(now, nil)
	r, ok := st.byID[id]
	if ok {
		r.last = now
		st.lru.MoveToFront(r.elem)
	}
	st.mu.Unlock()
	st.releaseAll(released)
	if !ok {
		return nil
	}
	return r
}

// remove deletes response id; it reports whether it was stored.
func (st *respStore) remove(id string) bool {
	st.mu.Lock()
	released := st.expireLocked(st.clk.Now(), nil)
	r, ok := st.byID[id]
	if ok {
		released = st.dropLocked(r, released)
	}
	st.mu.Unlock()
	st.releaseAll(released)
	return ok
}

// begin records a turn of chain starting: the chain is not released while
// it runs, whatever happens to its stored responses.
func (st *respStore) begin(chain string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	c := st.chains[chain]
	if c == nil {
		c = &chainRefs{}
		st.chains[chain] = c
	}
	c.inFlight++
}

// end records a turn of chain ending (after its response was stored, if
// it is): a chain left with no stored response is released.
func (st *respStore) end(chain string) {
	st.mu.Lock()
	released := st.unrefLocked(chain, func(c *chainRefs) { c.inFlight-- }, nil)
	st.mu.Unlock()
	st.releaseAll(released)
}

// stats is the store's count and bytes.
func (st *respStore) stats() (count int, bytes int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.byID), st.bytes
}

// check audits the store: the map, the LRU list, the byte sum and the
// chains' counts agree, and the bounds hold.
func (st *respStore) check() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lru.Len() != len(st.byID) {
		return fmt.Errorf("respstore: %d responses listed, %d mapped", st.lru.Len(), len(st.byID))
	}
	var bytes int64
	stored := map[string]int{}
	var prev time.Time
	for e := st.lru.Front(); e != nil; e = e.Next() {
		r := e.Value.(*storedResponse)
		if st.byID[r.id] != r || r.elem != e {
			return fmt.Errorf("respstore: response %q: list and map disagree", r.id)
		}
		if !prev.IsZero() && r.last.After(prev) {
			return fmt.Errorf("respstore: response %q: used at %v, after a more recently listed one (%v)", r.id, r.last, prev)
		}
		prev = r.last
		bytes += r.size
		stored[r.chain]++
	}
	if bytes != st.bytes {
		return fmt.Errorf("respstore: %d bytes counted, %d summed", st.bytes, bytes)
	}
	if len(st.byID) > st.max || st.bytes > st.maxBytes {
		return fmt.Errorf("respstore: %d responses, %d bytes: over the bounds %d, %d", len(st.byID), st.bytes, st.max, st.maxBytes)
	}
	for chain, c := range st.chains {
		if c.stored != stored[chain] || c.inFlight < 0 || (c.stored == 0 && c.inFlight == 0) {
			return fmt.Errorf("respstore: chain %q: %d stored, %d in flight recorded; %d stored", chain, c.stored, c.inFlight, stored[chain])
		}
	}
	for chain := range stored {
		if st.chains[chain] == nil {
			return fmt.Errorf("respstore: chain %q has stored responses but no record", chain)
		}
	}
	return nil
}

// respStoreCollector exports the store's count and bytes.
type respStoreCollector struct {
	st            *respStore
	count, nbytes *prometheus.Desc
}

func newRespStoreCollector(st *respStore) *respStoreCollector {
	return &respStoreCollector{st: st,
		count:  prometheus.NewDesc("turnstile_responses_stored", "Responses kept by the /v1/responses store.", nil, nil),
		nbytes: prometheus.NewDesc("turnstile_responses_stored_bytes", "Bytes the /v1/responses store charges its responses.", nil, nil)}
}

func (c *respStoreCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.count; ch <- c.nbytes }

func (c *respStoreCollector) Collect(ch chan<- prometheus.Metric) {
	n, b := c.st.stats()
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.nbytes, prometheus.GaugeValue, float64(b))
}
