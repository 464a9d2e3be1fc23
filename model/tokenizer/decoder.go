package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Decoder turns a stream of token ids into text without ever splitting a
// UTF-8 character: bytes of an incomplete character are held until the
// token that completes them arrives. Not safe for concurrent use.
type Decoder struct {
	t       *Tokenizer
	pending []byte
	// strip is set while the next text-bearing token should lose one
	// leading space (SPM with add_space_prefix, at the start of a sequence).
	strip bool
	out   strings.Builder
}

// NewDecoder decodes a sequence from its start: with a space-prefix
// vocabulary, the first text-bearing token loses one leading space (as
// llama.cpp does), so "▁Once" after BOS yields "Once".
func (t *Tokenizer) NewDecoder() *Decoder {
	return &Decoder{t: t, strip: t.kind == SPM && t.addSpacePrefix}
}

// NewContinuation decodes tokens that continue earlier text (e.g. the
// completion after a prompt): no space is stripped.
func (t *Tokenizer) NewContinuation() *Decoder { return &Decoder{t: t} }

// Add appends id and returns the text it completes: valid UTF-8, possibly
// empty. Bytes that can never become valid UTF-8 come out as U+FFFD.
func (d *Decoder) Add(id int32) string {
	p := d.t.Piece(id)
	if len(p) == 0 {
		return ""
	}
	if d.strip {
		d.strip = false
		if p[0] == ' ' {
			p = p[1:]
		}
	}
	d.pending = append(d.pending, p...)
	d.out.Reset()
	i := 0
	for i < len(d.pending) {
		r, n := utf8.DecodeRune(d.pending[i:])
		if r == utf8.RuneError && n <= 1 {
			if !utf8.FullRune(d.pending[i:]) {
				break // an incomplete character: wait for more bytes
			}
			d.out.WriteRune(utf8.RuneError)
			i++
			continue
		}
		d.out.Write(d.pending[i : i+n])
		i += n
	}
	d.pending = append(d.pending[:0], d.pending[i:]...)
	return d.out.String()
}

// Flush returns what is held back (an incomplete character becomes one
// U+FFFD) and resets the held bytes.
func (d *Decoder) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	d.pending = d.pending[:0]
	return string(utf8.RuneError)
}
