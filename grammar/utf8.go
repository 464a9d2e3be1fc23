package grammar

import "unicode/utf8"

// byteRange is an inclusive range of byte values.
type byteRange struct{ lo, hi byte }

// utf8Sequences calls emit with every sequence of byte ranges that together
// encode exactly the scalar values in [lo, hi] as UTF-8 (surrogates, which
// UTF-8 cannot encode, are left out). Each sequence is a list of 1..4 byte
// ranges whose cross product is a set of encodings; the sequences are
// disjoint. emit must not keep the slice.
func utf8Sequences(lo, hi rune, emit func([]byteRange)) {
	if lo < 0 {
		lo = 0
	}
	if hi > utf8.MaxRune {
		hi = utf8.MaxRune
	}
	if lo > hi {
		return
	}
	// Cut out the surrogates.
	if lo < 0xD800 && hi > 0xDFFF {
		utf8Sequences(lo, 0xD7FF, emit)
		utf8Sequences(0xE000, hi, emit)
		return
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		lo = 0xE000
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		hi = 0xD7FF
	}
	if lo > hi {
		return
	}
	// Split at the encoded-length boundaries.
	for _, max := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= max && hi > max {
			utf8Sequences(lo, max, emit)
			utf8Sequences(max+1, hi, emit)
			return
		}
	}
	if hi <= 0x7F {
		emit([]byteRange{{byte(lo), byte(hi)}})
		return
	}
	n := utf8.RuneLen(lo)
	// Split so that every continuation position below the first differing
	// one covers its full 0x80..0xBF range.
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Sequences(lo, lo|m, emit)
				utf8Sequences((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Sequences(lo, (hi&^m)-1, emit)
				utf8Sequences(hi&^m, hi, emit)
				return
			}
		}
	}
	var a, b [4]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([]byteRange, n)
	for i := 0; i < n; i++ {
		seq[i] = byteRange{a[i], b[i]}
	}
	emit(seq)
}
