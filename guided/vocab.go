package guided

import (
	"errors"
	"fmt"

	"github.com/turnstile-llm/turnstile/grammar"
)

// Tokens is what a tokenizer tells the grammar engine about its
// vocabulary (model/tokenizer.Tokenizer has it).
type Tokens interface {
	VocabSize() int
	// Piece is token id's bytes as it adds them to text.
	Piece(id int32) []byte
	// IsControl says id is a control token, which no text spells.
	IsControl(id int32) bool
}

// VocabOf is tok's vocabulary as the grammar engine sees it, width
// tokens wide: a runner's logits (step.Capacity.Vocab) may outnumber the
// tokenizer's tokens (a padded embedding), and the ids past them, which no
// text spells, get no bytes (grammar.NewVocab makes them special, never
// allowed). stops end generation; negative ones (a tokenizer without EOS)
// are skipped.
func VocabOf(tok Tokens, stops []int32, width int) (*grammar.Vocab, error) {
	n := tok.VocabSize()
	if n > width {
		return nil, fmt.Errorf("the tokenizer has %d tokens, more than the %d logits the grammar vocabulary spans", n, width)
	}
	pieces := make([][]byte, width)
	special := make([]bool, width)
	for i := range n {
		pieces[i] = tok.Piece(int32(i))
		special[i] = tok.IsControl(int32(i))
	}
	var valid []int32
	for _, s := range stops {
		if s >= 0 {
			valid = append(valid, s)
		}
	}
	if len(valid) == 0 {
		return nil, errors.New("the tokenizer has no end-of-sequence token, so a grammar can never end")
	}
	return grammar.NewVocab(pieces, special, valid)
}
