package kvpool

import (
	"errors"
	"fmt"
	"math/bits"
)

// BlockID names one KV block; ids run 0..NumBlocks-1 (0 is the null block
// when Config.NullBlock is set).
type BlockID = int32

// SeqID is a handle to one sequence's ordered block table. The pool owns the
// table; entries are reused after Release (see the package doc on handles).
type SeqID int32

// InvalidSeq is the handle NewSeq returns when all 2^20 sequence entries are in
// use; every method refuses it.
const InvalidSeq SeqID = -1

// Keys are hashed into the root of every chain. Sequences share blocks only
// when their Keys are equal.
type Keys struct {
	// Model names the model/adapter whose KV the blocks hold.
	Model string
	// Salt is an optional cache salt: different salts never share a block.
	Salt string
}

// Config describes a pool.
type Config struct {
	// NumBlocks is the total number of blocks, ids 0..NumBlocks-1; > 0
	// (> 1 with NullBlock).
	NumBlocks int
	// BlockSize is tokens per block: a power of two in 1..256; 0 means 16.
	BlockSize int
	// NullBlock reserves block 0: never allocated (runners may point padding at it).
	NullBlock bool
	// OnEvent, if set, is called synchronously when a block is stored
	// (published under its hash) or removed (its hash evicted), from inside
	// the pool method that caused it; it must not call back into the pool.
	OnEvent func(Event)
}

// EventKind says what happened to a block's hash.
type EventKind uint8

const (
	// EventStored: the block became full and was published under Hash.
	EventStored EventKind = iota + 1
	// EventRemoved: the cached block was evicted; Hash is no longer findable.
	EventRemoved
)

func (k EventKind) String() string {
	switch k {
	case EventStored:
		return "stored"
	case EventRemoved:
		return "removed"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is a KV event for a KV-aware router.
type Event struct {
	Kind  EventKind
	Block BlockID
	Hash  Hash
}

// ErrOutOfBlocks is returned (wrapped, with the numbers) when an allocation
// cannot be satisfied now; the caller preempts or waits. Nothing changed.
var ErrOutOfBlocks = errors.New("kvpool: out of blocks")

// ErrInvalidSeq is returned (wrapped, naming the handle) for a SeqID that is
// out of range or already released.
var ErrInvalidSeq = errors.New("kvpool: invalid sequence handle")

// TooLargeError refuses a request that would not fit even in an empty pool:
// waiting cannot help.
type TooLargeError struct {
	Tokens     int // tokens the request needs
	PoolTokens int // tokens the whole pool holds (allocatable blocks × block size)
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("kvpool: request of %d tokens exceeds the whole pool of %d tokens", e.Tokens, e.PoolTokens)
}

// Sequence handles: low seqEntryBits bits are the entry (the sequence's
// index in Pool.seqs), the next seqGenBits bits the entry's generation
// (bumped on every Release).
const (
	seqEntryBits  = 20
	seqGenBits    = 11
	seqEntryMask  = 1<<seqEntryBits - 1
	seqGenMask    = 1<<seqGenBits - 1
	maxSeqEntries = 1 << seqEntryBits
)

// seq is one sequence's state. Slices are kept across reuse of the entry so a
// steady state allocates nothing.
type seq struct {
	blocks  []BlockID // block table, len = ceil((tokens+reserved)/bs)
	partial []int32   // token ids of the last, partial block; len = tokens % bs
	parent  Hash      // chain hash after the last full block (the root when none)
	tokens  int       // tokens with known values
	// reserved counts slots after the known tokens whose blocks are
	// allocated but whose values are not known yet (Reserve); Fill turns
	// them into tokens, in order.
	reserved int
	key      int32 // index into Pool.keyTab
	gen      uint16
	live     bool
}

// Pool is the paged KV block pool. Per-block state lives in parallel slices
// indexed by BlockID (36 bytes per block); see the package doc.
type Pool struct {
	bs         int
	shift      uint  // log2(bs)
	n          int32 // total blocks including the null block
	first      int32 // first allocatable block: 1 with NullBlock, else 0
	poolTokens int
	onEvent    func(Event)

	ref   []uint32 // refcount per block
	prev  []int32  // intrusive list links; len n+2: sentinels at n (uncached) and n+1 (cached)
	next  []int32
	hash  []Hash  // published hash; valid when keyOf >= 0
	keyOf []int32 // key entry the published hash was made under; -1: not published
	mark  []uint32
	epoch uint32 // DistinctBlocks stamp for mark

	referenced, cachedFree, freeUncached int

	index map[Hash]BlockID // published hashes; sized lazily

	seqs     []seq
	freeSeqs []int32 // stack of free entries

	keyIdx   map[Keys]int32
	keyTab   []keyEntry
	freeKeys []int32

	hbuf [16 + 4*256]byte // block hash input scratch
}

// New validates cfg and builds a pool with every block free and uncached.
func New(cfg Config) (*Pool, error) {
	bs := cfg.BlockSize
	if bs == 0 {
		bs = 16
	}
	if bs < 1 || bs > 256 || bs&(bs-1) != 0 {
		return nil, fmt.Errorf("kvpool: block size %d is not a power of two in 1..256", cfg.BlockSize)
	}
	minBlocks := 1
	if cfg.NullBlock {
		minBlocks = 2
	}
	if cfg.NumBlocks < minBlocks {
		return nil, fmt.Errorf("kvpool: NumBlocks %d is below the minimum %d (NullBlock %v)", cfg.NumBlocks, minBlocks, cfg.NullBlock)
	}
	// Two list sentinels follow the blocks in int32 index space.
	if cfg.NumBlocks > 1<<31-3 {
		return nil, fmt.Errorf("kvpool: NumBlocks %d exceeds the int32 id space (%d)", cfg.NumBlocks, 1<<31-3)
	}
	n := int32(cfg.NumBlocks)
	p := &Pool{
		bs:      bs,
		shift:   uint(bits.TrailingZeros(uint(bs))),
		n:       n,
		onEvent: cfg.OnEvent,
		ref:     make([]uint32, n),
		prev:    make([]int32, n+2),
		next:    make([]int32, n+2),
		hash:    make([]Hash, n),
		keyOf:   make([]int32, n),
		mark:    make([]uint32, n),
		keyIdx:  make(map[Keys]int32),
	}
	if cfg.NullBlock {
		p.first = 1
	}
	p.poolTokens = int(n-p.first) * bs
	for i := range p.keyOf {
		p.keyOf[i] = -1
	}
	p.listInit(p.uncachedHead())
	p.listInit(p.cachedHead())
	for b := p.first; b < n; b++ {
		p.listPushBack(p.uncachedHead(), b)
	}
	if cfg.NullBlock {
		// Self-linked: in no list.
		p.prev[0], p.next[0] = 0, 0
	}
	p.freeUncached = int(n - p.first)
	return p, nil
}

// BlockSize is tokens per block.
func (p *Pool) BlockSize() int { return p.bs }

// NumBlocks is the number of allocatable blocks (excludes the null block).
func (p *Pool) NumBlocks() int { return int(p.n - p.first) }

// Fits returns a *TooLargeError if tokens exceed the whole pool's tokens
// (NumBlocks × BlockSize), and an error for a negative count.
func (p *Pool) Fits(tokens int) error {
	if tokens < 0 {
		return fmt.Errorf("kvpool: negative token count %d", tokens)
	}
	if tokens > p.poolTokens {
		return &TooLargeError{Tokens: tokens, PoolTokens: p.poolTokens}
	}
	return nil
}

// Referenced is the number of blocks with refcount > 0. O(1).
func (p *Pool) Referenced() int { return p.referenced }

// CachedFree is the number of blocks with refcount 0 and a published hash
// (findable, evictable). O(1).
func (p *Pool) CachedFree() int { return p.cachedFree }

// FreeUncached is the number of blocks with refcount 0 and no hash. O(1).
func (p *Pool) FreeUncached() int { return p.freeUncached }

// Available is the number of blocks an allocation may take now:
// FreeUncached + CachedFree. O(1).
func (p *Pool) Available() int { return p.freeUncached + p.cachedFree }

// allocate takes a free block, uncached first, else evicting the least
// recently freed cached block, and gives it refcount 1. The caller has
// checked Available() > 0.
func (p *Pool) allocate() BlockID {
	var b BlockID
	if h := p.uncachedHead(); p.next[h] != h {
		b = p.next[h]
		p.listRemove(b)
		p.freeUncached--
	} else {
		h = p.cachedHead()
		b = p.next[h]
		p.listRemove(b)
		p.cachedFree--
		p.unpublish(b)
	}
	p.ref[b] = 1
	p.referenced++
	return b
}

// unref drops one reference; at zero the block becomes free: cached (at the
// MRU end of the LRU) if published, else uncached.
func (p *Pool) unref(b BlockID) {
	p.ref[b]--
	if p.ref[b] != 0 {
		return
	}
	p.referenced--
	if p.keyOf[b] >= 0 {
		p.listPushBack(p.cachedHead(), b)
		p.cachedFree++
	} else {
		p.listPushBack(p.uncachedHead(), b)
		p.freeUncached++
	}
}

// addRef takes one more reference; a cache hit on a free block leaves the LRU
// in O(1).
func (p *Pool) addRef(b BlockID) {
	if p.ref[b] == 0 {
		p.listRemove(b)
		p.cachedFree--
		p.referenced++
	}
	p.ref[b]++
}

// publish makes full block b findable under h for key k, unless h is
// already published (then b stays private; see the package doc).
func (p *Pool) publish(b BlockID, h Hash, k int32) {
	if p.index == nil {
		p.index = make(map[Hash]BlockID)
	}
	if _, dup := p.index[h]; dup {
		return
	}
	p.index[h] = b
	p.hash[b] = h
	p.keyOf[b] = k
	p.keyTab[k].refs++
	if p.onEvent != nil {
		p.onEvent(Event{Kind: EventStored, Block: b, Hash: h})
	}
}

// unpublish removes b's hash (eviction).
func (p *Pool) unpublish(b BlockID) {
	h := p.hash[b]
	delete(p.index, h)
	k := p.keyOf[b]
	p.keyOf[b] = -1
	p.hash[b] = Hash{}
	p.keyUnref(k)
	if p.onEvent != nil {
		p.onEvent(Event{Kind: EventRemoved, Block: b, Hash: h})
	}
}
