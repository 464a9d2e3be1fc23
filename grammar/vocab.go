package grammar

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"slices"
)

// Vocab is a model's vocabulary as matchers see it: each token's bytes, the
// tokens that are never text (control tokens: a grammar never allows them)
// and the stop tokens, allowed exactly when the grammar is complete. The
// text tokens are laid out as a byte trie in preorder, walked once per
// grammar position to build its token table; tables of small positions
// (inside a JSON string, say) are cached here and shared by every grammar.
// A Vocab is safe for concurrent use; build it once per model.
type Vocab struct {
	pieces  [][]byte
	special []bool
	stops   []int32
	// The text tokens as two tries: short holds those of at most
	// shortBytes bytes (nearly all), whose tables positions share when
	// they read alike for shortBytes bytes; long holds the rest, walked
	// for each position. dupTok chains the tokens with the same bytes as
	// another.
	short, long trie
	dupTok      []int32
	text        []uint64 // bitmask of the text tokens
	// shared holds token tables of small positions, reused by every
	// grammar over this vocabulary.
	shared sharedTables
	// seeds hash what positions read, to find the ones that read alike.
	seeds [2]maphash.Seed
}

// shortBytes is the length past which a token is long: positions that
// read alike for this many bytes share their tables of short tokens (a
// string with maxLength 255 has one table for most of its length).
const shortBytes = 24

// trie is a byte trie of tokens in preorder, one array so a walk streams
// through memory.
type trie struct {
	nodes    []trieNode
	maxDepth int
}

// trieNode is one node of the vocabulary trie: it reads b at depth depth
// (1 for the root's children); its subtree is [its index, end); tok is
// the first token whose bytes end there (-1 if none), and dup says more
// tokens end there (chained by Vocab.dupTok).
type trieNode struct {
	end   int32
	tok   int32
	depth uint16
	b     byte
	dup   bool
}

// MaxTokenBytes bounds a token's length (no real vocabulary comes near it).
const MaxTokenBytes = 1 << 12

// NewVocab builds a vocabulary. pieces[i] is token i's bytes; special[i]
// marks tokens that are never text (a token with no bytes is treated as
// special too); stops lists the tokens that end generation.
func NewVocab(pieces [][]byte, special []bool, stops []int32) (*Vocab, error) {
	n := len(pieces)
	if n == 0 {
		return nil, fmt.Errorf("grammar: the vocabulary is empty")
	}
	if len(special) != n {
		return nil, fmt.Errorf("grammar: %d special flags for %d tokens", len(special), n)
	}
	for _, s := range stops {
		if s < 0 || int(s) >= n {
			return nil, fmt.Errorf("grammar: stop token %d is outside the vocabulary [0, %d)", s, n)
		}
	}
	v := &Vocab{
		pieces:  pieces,
		special: make([]bool, n),
		stops:   slices.Clone(stops),
		dupTok:  make([]int32, n),
		text:    make([]uint64, (n+63)/64),
		seeds:   [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
	}
	var ids []int32
	for i, p := range pieces {
		v.dupTok[i] = -1
		if len(p) > MaxTokenBytes {
			return nil, fmt.Errorf("grammar: token %d has %d bytes, more than %d", i, len(p), MaxTokenBytes)
		}
		v.special[i] = special[i] || len(p) == 0
		if !v.special[i] {
			ids = append(ids, int32(i))
			v.text[i>>6] |= 1 << (i & 63)
		}
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return bytes.Compare(pieces[a], pieces[b]) })
	var short, long []int32
	for _, id := range ids {
		if len(pieces[id]) <= shortBytes {
			short = append(short, id)
		} else {
			long = append(long, id)
		}
	}
	v.short = v.buildTrie(short)
	v.long = v.buildTrie(long)
	return v, nil
}

// buildTrie lays out tokens ids, sorted by their bytes, as a trie,
// chaining tokens with the same bytes through v.dupTok.
func (v *Vocab) buildTrie(ids []int32) trie {
	var tr trie
	var prev []byte
	var open []int32 // node index per depth-1 on the current path
	for k, id := range ids {
		p := v.pieces[id]
		if k > 0 && bytes.Equal(p, prev) {
			// Same bytes as the previous token: chain it.
			node := &tr.nodes[open[len(p)-1]]
			node.dup = true
			last := node.tok
			for v.dupTok[last] >= 0 {
				last = v.dupTok[last]
			}
			v.dupTok[last] = id
			continue
		}
		lcp := 0
		for lcp < len(p) && lcp < len(prev) && p[lcp] == prev[lcp] {
			lcp++
		}
		// Close the nodes below the common prefix.
		for len(open) > lcp {
			tr.nodes[open[len(open)-1]].end = int32(len(tr.nodes))
			open = open[:len(open)-1]
		}
		for d := lcp; d < len(p); d++ {
			open = append(open, int32(len(tr.nodes)))
			tr.nodes = append(tr.nodes, trieNode{tok: -1, depth: uint16(d + 1), b: p[d]})
		}
		tr.nodes[open[len(p)-1]].tok = id
		tr.maxDepth = max(tr.maxDepth, len(p))
		prev = p
	}
	for _, i := range open {
		tr.nodes[i].end = int32(len(tr.nodes))
	}
	return tr
}

// Size is the number of tokens; a mask has (Size+63)/64 words.
func (v *Vocab) Size() int { return len(v.pieces) }

// MaskWords is the length of a mask in 64-bit words.
func (v *Vocab) MaskWords() int { return (len(v.pieces) + 63) / 64 }

// Piece returns token id's bytes (shared: do not modify).
func (v *Vocab) Piece(id int32) []byte { return v.pieces[id] }

// Stops returns the stop tokens.
func (v *Vocab) Stops() []int32 { return v.stops }

// IsStop reports whether id ends generation.
func (v *Vocab) IsStop(id int32) bool { return slices.Contains(v.stops, id) }
