package sim

import "fmt"

// Tokenizer is the simulated device's tokenizer: token ids with no text.
// Workloads are generated as token ids (bench/workload), so a simulated
// run never encodes text; every piece is empty. It satisfies the
// executor's Tokenizer interface.
type Tokenizer struct {
	vocab    int
	bos, eos int32
}

// NewTokenizer returns a tokenizer over ids [0, vocab) with the given BOS
// and EOS ids (inside the vocabulary).
func NewTokenizer(vocab int, bos, eos int32) (Tokenizer, error) {
	if vocab < 1 || bos < 0 || eos < 0 || int(bos) >= vocab || int(eos) >= vocab {
		return Tokenizer{}, fmt.Errorf("sim: tokenizer vocab %d with BOS %d and EOS %d: ids must lie in [0, vocab)", vocab, bos, eos)
	}
	return Tokenizer{vocab: vocab, bos: bos, eos: eos}, nil
}

// Encode has no text to encode: it returns just the BOS when addBOS.
func (t Tokenizer) Encode(_ string, addBOS bool) []int32 {
	if addBOS {
		return []int32{t.bos}
	}
	return nil
}

// Piece is empty for every id.
func (Tokenizer) Piece(int32) []byte { return nil }

// BOS is the beginning-of-sequence id.
func (t Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence id.
func (t Tokenizer) EOS() int32 { return t.eos }

// VocabSize is the number of ids.
func (t Tokenizer) VocabSize() int { return t.vocab }
