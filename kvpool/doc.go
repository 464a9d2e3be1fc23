// Package kvpool is the paged KV block pool: it hands out fixed-size blocks
// of KV cache by id, counts references to them, and keeps full blocks
// findable by a hash of their token prefix so later requests can reuse them.
//
// The pool is the one source of truth about which blocks exist and which
// are shared. It tracks identity and references only. The KV bytes live in the
// backend (CPU or GPU memory), indexed by BlockID; the pool never touches
// them, and never asks a runner to copy one: a block is shared only while
// full, and a sequence's partial last block is always its own.
//
// # Blocks and their states
//
// A pool has NumBlocks blocks of BlockSize tokens each (a power of two in
// 1..256, default 16) with ids 0..N-1. Every block is in exactly one state:
//
//   - referenced: refcount > 0; never evicted. The refcount equals the number
//     of sequence handles (SeqID) whose block table holds the block.
//   - free cached: refcount 0 with a published hash; still found by prefix
//     lookup, kept in an intrusive LRU list (int32 links over block ids) and
//     evicted least-recently-freed first.
//   - free uncached: refcount 0, no hash; always allocated before any cached
//     block is evicted.
//
// With Config.NullBlock, block 0 is reserved: it is in none of these states,
// is never allocated, and runners may point padding slots at it.
// NumBlocks then reports the allocatable count, N-1.
//
// When a sequence is released its blocks are freed tail first, so within one
// released sequence the tail blocks are evicted before its prefix blocks
// (a later request is far more likely to share the prefix).
//
// # Prefix hashing, the threat, and the choice of hash
//
// Only full blocks are hashed. A block's hash is
//
//	H(parent hash, the block's token ids)
//
// where the parent of the first block is a root hash of the sequence's Keys
// (model/adapter id and cache salt, length-prefixed). So two sequences share a
// block only when they have the same model, the same salt and the same tokens
// in every position up to and including that block; tenants with different
// salts never share a block.
//
// Threat: a hash collision would serve one request another request's KV.
// Prompts are attacker-chosen, so a tenant able to engineer a collision could
// read (through the model's output) or poison another tenant's context. H must
// make engineered collisions infeasible. H is SHA-256 truncated to 128 bits
// (birthday bound 2^64 work). We measured the alternatives on this machine
// (SHA-NI): SHA-256 over the 80 bytes of one 16-token block costs ~145 ns,
// an AES CBC-MAC with a per-process random key through crypto/aes ~325 ns,
// hash/maphash ~17 ns but it is not a cryptographic PRF. A keyed hash would
// also have to keep its key secret while block hashes leave the process in KV
// events (for a KV-aware router); SHA-256 has no key to leak, so hashes can be
// shared across processes and ranks. The cost is that prefix lookup is bound by
// hashing: about 145 ns per 16-token block.
//
// A prompt's block hashes are computed once per request, in a Chain
// (built on the submitter's goroutine, inside kvpool so they cannot be
// forged), and reused for every lookup while the request waits
// (Pool.PeekChain, Pool.MatchChain).
//
// # Publishing and duplicates
//
// A block is hashed and published the moment Append fills it; the caller
// appends a token only in the step whose forward pass writes its KV, so a
// later lookup never reads KV that no step will write. If an identical block
// (same hash) is already published, the new block is not published: it stays
// private to its sequence (unhashed) and returns to the free-uncached state
// when released, while the sequence's hash chain continues from the shared
// hash, so its later blocks are still published and findable. The pool does
// not swap the sequence over to the published block, because the sequence's
// own block already holds (or is about to hold) its KV.
//
// # Reserved slots
//
// A caller that launches a step before it knows a token's value (overlap:
// the token is sampled by the step in flight) Reserves its slot: the block
// it needs is allocated at once, so the step can write the token's KV into
// the sequence's own block, and Fill supplies the value when it is known.
// A block holding a reserved slot is private and unhashed, like a partial
// block; it is hashed and published only when Fill makes all its tokens
// known, so no lookup ever finds a block by values the pool has not seen.
// Check counts reserved slots exactly (blocks = ceil((tokens+reserved)/bs)).
// While slots are reserved, Append and the Match methods refuse the
// sequence (values must arrive in order); Pin takes its full known blocks.
//
// # Handles
//
// A SeqID is a handle to one sequence's ordered block table, owned by the
// pool. It carries an entry index and an 11-bit generation, so a released
// handle is refused (ErrInvalidSeq) even after its entry is reused, unless
// the entry was reused a multiple of 2048 times. Methods that return an error report an
// invalid handle as ErrInvalidSeq; Release of an invalid or already released
// handle is a no-op (Valid tells them apart); read methods (Blocks, Tokens,
// BlocksNeeded, SumBlocks, DistinctBlocks) treat it as an empty sequence.
//
// # Concurrency
//
// A Pool is not safe for concurrent use: it belongs to one goroutine (the
// executor's step loop). OnEvent is called synchronously from that goroutine.
package kvpool
