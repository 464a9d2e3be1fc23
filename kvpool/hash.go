package kvpool

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// Hash is a block's prefix hash: SHA-256 truncated to 128 bits.
type Hash [16]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// rootDomain separates root hashes from block hashes and from other uses of
// SHA-256; bump the version if the hash layout ever changes.
const rootDomain = "turnstile/kvpool/root/v1"

// rootHash is the parent of a chain's first block: SHA-256 over the domain and
// the length-prefixed model and salt, so no two distinct Keys share a root.
func rootHash(k Keys) Hash {
	buf := make([]byte, 0, len(rootDomain)+len(k.Model)+len(k.Salt)+2*binary.MaxVarintLen64)
	buf = append(buf, rootDomain...)
	buf = binary.AppendUvarint(buf, uint64(len(k.Model)))
	buf = append(buf, k.Model...)
	buf = binary.AppendUvarint(buf, uint64(len(k.Salt)))
	buf = append(buf, k.Salt...)
	sum := sha256.Sum256(buf)
	var h Hash
	copy(h[:], sum[:])
	return h
}

// blockHash is H(parent, tokens): SHA-256 over the 16-byte parent and the
// tokens as little-endian uint32, truncated to 128 bits. len(tokens) is the
// pool's block size, so every input of one pool has the same length.
func (p *Pool) blockHash(parent Hash, tokens []int32) Hash {
	return hashBlock(&p.hbuf, parent, tokens)
}

// hashBlock computes H(parent, tokens) in buf; len(tokens) <= 256.
func hashBlock(hbuf *[16 + 4*256]byte, parent Hash, tokens []int32) Hash {
	buf := hbuf[:16+4*len(tokens)]
	copy(buf, parent[:])
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[16+4*i:], uint32(t))
	}
	sum := sha256.Sum256(buf)
	var h Hash
	copy(h[:], sum[:16])
	return h
}

// ChainHashes appends to dst the hash of every full block of tokens under
// keys, exactly as a pool of that block size publishes them (and reports them
// in KV events), so a KV-aware router can match events against a request
// without a pool. A trailing partial block has no hash.
func ChainHashes(keys Keys, blockSize int, tokens []int32, dst []Hash) ([]Hash, error) {
	if blockSize < 1 || blockSize > 256 || blockSize&(blockSize-1) != 0 {
		return dst, fmt.Errorf("kvpool: block size %d is not a power of two in 1..256", blockSize)
	}
	var buf [16 + 4*256]byte
	parent := rootHash(keys)
	for len(tokens) >= blockSize {
		parent = hashBlock(&buf, parent, tokens[:blockSize])
		dst = append(dst, parent)
		tokens = tokens[blockSize:]
	}
	return dst, nil
}

// keyEntry is one interned Keys with its root hash. refs counts live
// sequences with these keys plus published blocks made under them; at zero
// the entry is dropped, so per-tenant salts do not accumulate.
type keyEntry struct {
	keys Keys
	root Hash
	refs int32
}

// keyRef interns k (computing its root once) and takes one reference.
func (p *Pool) keyRef(k Keys) int32 {
	if i, ok := p.keyIdx[k]; ok {
		p.keyTab[i].refs++
		return i
	}
	var i int32
	if n := len(p.freeKeys); n > 0 {
		i = p.freeKeys[n-1]
		p.freeKeys = p.freeKeys[:n-1]
	} else {
		i = int32(len(p.keyTab))
		p.keyTab = append(p.keyTab, keyEntry{})
	}
	p.keyTab[i] = keyEntry{keys: k, root: rootHash(k), refs: 1}
	p.keyIdx[k] = i
	return i
}

// keyUnref drops one reference to entry i, freeing it at zero.
func (p *Pool) keyUnref(i int32) {
	e := &p.keyTab[i]
	e.refs--
	if e.refs == 0 {
		delete(p.keyIdx, e.keys)
		*e = keyEntry{}
		p.freeKeys = append(p.freeKeys, i)
	}
}

// chain walks the cached full blocks matching tokens' prefix under key k,
// leaving the last token uncomputed, and calls take for each hit. It returns
// the number of hit blocks and the chain hash after the last hit.
func (p *Pool) chain(k int32, tokens []int32, take bool, s *seq) (int, Hash) {
	parent := p.keyTab[k].root
	if len(tokens) == 0 || p.index == nil {
		return 0, parent
	}
	maxBlocks := (len(tokens) - 1) >> p.shift
	hit := 0
	for ; hit < maxBlocks; hit++ {
		h := p.blockHash(parent, tokens[hit<<p.shift:(hit+1)<<p.shift])
		b, ok := p.index[h]
		if !ok {
			break
		}
		parent = h
		if take {
			p.addRef(b)
			s.blocks = append(s.blocks, b)
		}
	}
	return hit, parent
}
