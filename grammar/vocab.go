package grammar

import (
	"bytes"
	"fmt"
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
	// The trie: node i reads nodeByte[i] at depth nodeDepth[i] (1 for the
	// root's children); its subtree is [i, nodeEnd[i]); nodeTok[i] is the
	// first token whose bytes end there (-1 if none), and dupTok chains
	// the other tokens with the same bytes.
	nodeByte  []byte
	nodeDepth []uint16
	nodeEnd   []int32
	nodeTok   []int32
	dupTok    []int32
	maxDepth  int
	text      []uint64 // bitmask of the text tokens
	// shared holds token tables of small positions, reused by every
	// grammar over this vocabulary.
	shared sharedTables
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
	var prev []byte
	var open []int32 // node index per depth-1 on the current path
	for k, id := range ids {
		p := pieces[id]
		if k > 0 && bytes.Equal(p, prev) {
			// Same bytes as the previous token: chain it.
			last := v.nodeTok[open[len(p)-1]]
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
			v.nodeEnd[open[len(open)-1]] = int32(len(v.nodeByte))
			open = open[:len(open)-1]
		}
		for d := lcp; d < len(p); d++ {
			open = append(open, int32(len(v.nodeByte)))
			v.nodeByte = append(v.nodeByte, p[d])
			v.nodeDepth = append(v.nodeDepth, uint16(d+1))
			v.nodeEnd = append(v.nodeEnd, 0)
			v.nodeTok = append(v.nodeTok, -1)
		}
		v.nodeTok[open[len(p)-1]] = id
		v.maxDepth = max(v.maxDepth, len(p))
		prev = p
	}
	for _, i := range open {
		v.nodeEnd[i] = int32(len(v.nodeByte))
	}
	return v, nil
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
