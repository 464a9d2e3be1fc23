package grammar

import (
	"fmt"
	"math/bits"
	"strings"
)

// byteSet is a set of byte values, one bit each.
type byteSet [4]uint64

func (s *byteSet) add(b byte)     { s[b>>6] |= 1 << (b & 63) }
func (s byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s byteSet) empty() bool     { return s[0]|s[1]|s[2]|s[3] == 0 }
func (s byteSet) union(o byteSet) byteSet {
	return byteSet{s[0] | o[0], s[1] | o[1], s[2] | o[2], s[3] | o[3]}
}
func (s byteSet) inter(o byteSet) byteSet {
	return byteSet{s[0] & o[0], s[1] & o[1], s[2] & o[2], s[3] & o[3]}
}
func (s byteSet) minus(o byteSet) byteSet {
	return byteSet{s[0] &^ o[0], s[1] &^ o[1], s[2] &^ o[2], s[3] &^ o[3]}
}
func (s byteSet) complement() byteSet { return byteSet{^s[0], ^s[1], ^s[2], ^s[3]} }
func (s byteSet) count() int {
	return bits.OnesCount64(s[0]) + bits.OnesCount64(s[1]) + bits.OnesCount64(s[2]) + bits.OnesCount64(s[3])
}
func (s *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}

// only returns the set's single member when it has exactly one.
func (s byteSet) only() (byte, bool) {
	if s.count() != 1 {
		return 0, false
	}
	for i, w := range s {
		if w != 0 {
			return byte(i*64 + bits.TrailingZeros64(w)), true
		}
	}
	return 0, false
}

func rangeSet(lo, hi byte) byteSet {
	var s byteSet
	s.addRange(lo, hi)
	return s
}

func setOf(bs ...byte) byteSet {
	var s byteSet
	for _, b := range bs {
		s.add(b)
	}
	return s
}

func (s byteSet) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for c := 0; c < 256; c++ {
		if !s.has(byte(c)) {
			continue
		}
		e := c
		for e+1 < 256 && s.has(byte(e+1)) {
			e++
		}
		writeByteEsc(&b, byte(c))
		if e > c {
			b.WriteByte('-')
			writeByteEsc(&b, byte(e))
		}
		c = e
	}
	b.WriteByte(']')
	return b.String()
}

func writeByteEsc(b *strings.Builder, c byte) {
	if c >= 0x21 && c < 0x7f && c != '-' && c != ']' && c != '\\' && c != '[' {
		b.WriteByte(c)
		return
	}
	fmt.Fprintf(b, "\\x%02x", c)
}

// rangesOf lists the maximal runs of s.
func rangesOf(s byteSet) []byteRange {
	var out []byteRange
	c := 0
	for c < 256 {
		w := s[c>>6] >> (c & 63)
		if w == 0 {
			c = (c | 63) + 1
			continue
		}
		c += bits.TrailingZeros64(w)
		lo := c
		w = ^(s[c>>6] >> (c & 63))
		run := bits.TrailingZeros64(w)
		if run == 0 {
			run = 1
		}
		c += run
		if c&63 == 0 && c < 256 && run == 64-(lo&63) {
			// The run reached the word's end: continue into the next word.
			for c < 256 && s.has(byte(c)) {
				c++
			}
		}
		out = append(out, byteRange{byte(lo), byte(c - 1)})
	}
	return out
}
