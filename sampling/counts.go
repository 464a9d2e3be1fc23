package sampling

import "fmt"

// tokenCounts is a sparse map token → (output count, seen in prompt), kept
// as a dense list of entries (what the penalties iterate) plus an
// open-addressing index over it. It grows by doubling and never shrinks, so
// a seat reused for similar sequences allocates nothing in steady state.
type tokenCounts struct {
	ents []countEntry
	// index holds entry position + 1 (0 = empty), linear probing;
	// len(index) is 0 or a power of two at least twice len(ents).
	index []int32
}

type countEntry struct {
	tok    int32
	out    uint32 // occurrences among generated tokens
	prompt bool   // seen in the prompt
}

func (t *tokenCounts) reset() {
	t.ents = t.ents[:0]
	clear(t.index)
}

func (t *tokenCounts) bucket(tok int32) uint32 {
	// Fibonacci hashing: token ids are dense small integers.
	return uint32(tok) * 0x9e3779b1
}

// add records one occurrence of tok, as output (out) or in the prompt.
func (t *tokenCounts) add(tok int32, out bool) {
	if 2*(len(t.ents)+1) > len(t.index) {
		t.grow()
	}
	mask := uint32(len(t.index) - 1)
	for i := t.bucket(tok) & mask; ; i = (i + 1) & mask {
		pos := t.index[i]
		if pos == 0 {
			t.ents = append(t.ents, countEntry{tok: tok})
			pos = int32(len(t.ents))
			t.index[i] = pos
		}
		e := &t.ents[pos-1]
		if e.tok != tok {
			continue
		}
		if out {
			e.out++
		} else {
			e.prompt = true
		}
		return
	}
}

func (t *tokenCounts) grow() {
	n := max(16, 2*len(t.index))
	t.index = make([]int32, n)
	mask := uint32(n - 1)
	for p, e := range t.ents {
		i := t.bucket(e.tok) & mask
		for t.index[i] != 0 {
			i = (i + 1) & mask
		}
		t.index[i] = int32(p + 1)
	}
}

// find returns the entry position of tok, or -1.
func (t *tokenCounts) find(tok int32) int {
	if len(t.index) == 0 {
		return -1
	}
	mask := uint32(len(t.index) - 1)
	for i := t.bucket(tok) & mask; ; i = (i + 1) & mask {
		pos := t.index[i]
		if pos == 0 {
			return -1
		}
		if t.ents[pos-1].tok == tok {
			return int(pos - 1)
		}
	}
}

// check verifies the index against the entries and returns the sum of the
// output counts.
func (t *tokenCounts) check(vocab int) (uint64, error) {
	n := len(t.index)
	if n != 0 && (n&(n-1) != 0 || n < 2*len(t.ents)) {
		return 0, fmt.Errorf("count index size %d for %d entries", n, len(t.ents))
	}
	if n == 0 && len(t.ents) != 0 {
		return 0, fmt.Errorf("%d count entries without an index", len(t.ents))
	}
	used := 0
	for _, pos := range t.index {
		if pos != 0 {
			used++
			if int(pos) > len(t.ents) {
				return 0, fmt.Errorf("count index points at entry %d of %d", pos-1, len(t.ents))
			}
		}
	}
	if used != len(t.ents) {
		return 0, fmt.Errorf("count index holds %d buckets for %d entries", used, len(t.ents))
	}
	var sum uint64
	for p, e := range t.ents {
		if e.tok < 0 || int(e.tok) >= vocab {
			return 0, fmt.Errorf("counted token %d outside vocab [0, %d)", e.tok, vocab)
		}
		if got := t.find(e.tok); got != p {
			return 0, fmt.Errorf("token %d at entry %d but index finds %d", e.tok, p, got)
		}
		if e.out == 0 && !e.prompt {
			return 0, fmt.Errorf("token %d tracked with no occurrence", e.tok)
		}
		sum += uint64(e.out)
	}
	return sum, nil
}
