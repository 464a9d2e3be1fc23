package guided

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/grammar"
)

// Kind is what a Spec's source is.
type Kind uint8

// The constraint kinds, as the OpenAI API and vLLM's extensions name them.
const (
	JSONSchema Kind = iota + 1 // response_format json_schema, guided_json
	JSONObject                 // response_format json_object: any JSON object
	Regex                      // guided_regex: the whole output matches
	Choice                     // guided_choice: the output is one of Choices
	GBNF                       // guided_grammar: llama.cpp's GBNF
	// StructuralTag is free text and tagged JSON values (tool calls):
	// structured_outputs.structural_tag, in grammar.ParseStructuralTag's
	// JSON form.
	StructuralTag
)

func (k Kind) String() string {
	switch k {
	case JSONSchema:
		return "json_schema"
	case JSONObject:
		return "json_object"
	case Regex:
		return "regex"
	case Choice:
		return "choice"
	case GBNF:
		return "grammar"
	case StructuralTag:
		return "structural_tag"
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Spec is one request's constraint.
type Spec struct {
	Kind Kind
	// Source is the schema (JSON), the regular expression, the grammar or
	// the structural tag (JSON, grammar.ParseStructuralTag's form).
	Source  string
	Choices []string
	// Whitespace is the JSON kinds' policy between tokens (a structural
	// tag's: inside its JSON values).
	Whitespace grammar.Whitespace
}

// key identifies a Spec's compiled grammar.
func (s Spec) key() [32]byte {
	h := sha256.New()
	var b [8]byte
	h.Write([]byte{byte(s.Kind), byte(s.Whitespace)})
	binary.LittleEndian.PutUint64(b[:], uint64(len(s.Source)))
	h.Write(b[:])
	h.Write([]byte(s.Source))
	for _, c := range s.Choices {
		binary.LittleEndian.PutUint64(b[:], uint64(len(c)))
		h.Write(b[:])
		h.Write([]byte(c))
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// Compile builds s's grammar (no caching).
func Compile(s Spec, lim grammar.Limits) (*grammar.Grammar, error) {
	switch s.Kind {
	case JSONSchema:
		return grammar.CompileJSONSchema([]byte(s.Source), grammar.JSONOptions{Whitespace: s.Whitespace, Limits: lim})
	case JSONObject:
		return grammar.CompileJSONSchema([]byte(`{"type":"object"}`), grammar.JSONOptions{Whitespace: s.Whitespace, Limits: lim})
	case Regex:
		return grammar.CompileRegex(s.Source, lim)
	case Choice:
		return grammar.CompileChoices(s.Choices, lim)
	case GBNF:
		return grammar.CompileGBNF(s.Source, lim)
	case StructuralTag:
		t, err := grammar.ParseStructuralTag([]byte(s.Source))
		if err != nil {
			return nil, err
		}
		return grammar.CompileStructuralTag(t, grammar.JSONOptions{Whitespace: s.Whitespace, Limits: lim})
	}
	return nil, fmt.Errorf("guided: unknown constraint kind %d", s.Kind)
}

// CacheConfig bounds a Cache.
type CacheConfig struct {
	// Entries and Bytes bound the grammars kept (Grammar.Bytes, which
	// grows as tables are built); the least recently used go first.
	Entries int
	Bytes   int
	// Compilers bounds the compilations running at once.
	Compilers int
	// Limits bound each compilation.
	Limits grammar.Limits
}

// DefaultCacheConfig keeps up to 256 grammars and 512 MiB, compiling two
// at a time with grammar.DefaultLimits.
var DefaultCacheConfig = CacheConfig{Entries: 256, Bytes: 512 << 20, Compilers: 2, Limits: grammar.DefaultLimits}

// Cache holds compiled grammars by Spec, shared by every request with the
// same constraint; concurrent requests for one Spec compile it once.
// Compile errors are cached too (a bad schema sent again fails at once).
// Safe for concurrent use.
type Cache struct {
	cfg   CacheConfig
	sem   chan struct{}
	mu    sync.Mutex
	index map[[32]byte]*list.Element
	lru   list.List
	st    CacheStats
}

type cacheEntry struct {
	key   [32]byte
	ready chan struct{}
	g     *grammar.Grammar
	err   error
}

// CacheStats are a Cache's counters since creation.
type CacheStats struct {
	Hits, Misses, Failures, Evictions int64
	// CompileTime is the total time spent compiling; Entries and Bytes
	// what is held now.
	CompileTime time.Duration
	Entries     int
	Bytes       int
}

// NewCache makes a cache.
func NewCache(cfg CacheConfig) (*Cache, error) {
	if cfg.Entries <= 0 || cfg.Bytes <= 0 || cfg.Compilers <= 0 {
		return nil, fmt.Errorf("guided: cache bounds must be positive (entries %d, bytes %d, compilers %d)", cfg.Entries, cfg.Bytes, cfg.Compilers)
	}
	return &Cache{cfg: cfg, sem: make(chan struct{}, cfg.Compilers), index: map[[32]byte]*list.Element{}}, nil
}

// Get returns s's grammar, compiling it (waiting for a compiler slot, or
// for a concurrent compilation of the same Spec) unless cached. ctx bounds
// the wait, not a compilation already running (its result is cached for
// the next request).
func (c *Cache) Get(ctx context.Context, s Spec) (*grammar.Grammar, error) {
	k := s.key()
	c.mu.Lock()
	if el, ok := c.index[k]; ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.st.Hits++
		c.mu.Unlock()
		select {
		case <-e.ready:
			return e.g, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.st.Misses++
	e := &cacheEntry{key: k, ready: make(chan struct{})}
	c.index[k] = c.lru.PushFront(e)
	c.mu.Unlock()

	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		c.forget(e)
		e.err = ctx.Err()
		close(e.ready)
		return nil, ctx.Err()
	}
	t0 := time.Now()
	g, err := Compile(s, c.cfg.Limits)
	took := time.Since(t0)
	<-c.sem
	e.g, e.err = g, err
	close(e.ready)
	c.mu.Lock()
	c.st.CompileTime += took
	if err != nil {
		c.st.Failures++
	}
	c.evict()
	c.mu.Unlock()
	return g, err
}

func (c *Cache) forget(e *cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[e.key]; ok && el.Value.(*cacheEntry) == e {
		c.lru.Remove(el)
		delete(c.index, e.key)
	}
}

// evict drops the least recently used finished entries past the bounds
// (callers hold mu).
func (c *Cache) evict() {
	total := 0
	for el := c.lru.Front(); el != nil; el = el.Next() {
		total += entryBytes(el.Value.(*cacheEntry))
	}
	for el := c.lru.Back(); el != nil && (c.lru.Len() > c.cfg.Entries || total > c.cfg.Bytes); {
		prev := el.Prev()
		e := el.Value.(*cacheEntry)
		select {
		case <-e.ready:
			total -= entryBytes(e)
			c.lru.Remove(el)
			delete(c.index, e.key)
			c.st.Evictions++
		default: // still compiling: keep it
		}
		el = prev
	}
	c.st.Entries, c.st.Bytes = c.lru.Len(), total
}

func entryBytes(e *cacheEntry) int {
	select {
	case <-e.ready:
	default:
		return 0
	}
	if e.g == nil {
		return 64
	}
	return e.g.Bytes() + 64
}

// Stats returns the counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

// ErrNoVocab is returned when a constrained request reaches an engine
// without a grammar vocabulary.
var ErrNoVocab = errors.New("guided: the engine has no grammar vocabulary (structured output unavailable)")
