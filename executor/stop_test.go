package executor

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// runMatcher feeds pieces and returns the emitted text and whether it stopped.
func runMatcher(stops []string, pieces []string) (string, bool) {
	var m textMatcher
	m.reset(stops)
	var out []byte
	for _, p := range pieces {
		emit, stopped := m.add([]byte(p))
		out = append(out, emit...)
		if stopped {
			return string(out), true
		}
		m.commit(len(emit))
	}
	out = append(out, m.flush()...)
	return string(out), false
}

func TestTextMatcher(t *testing.T) {
	tests := []struct {
		name     string
		stops    []string
		pieces   []string
		want     string
		wantStop bool
	}{
		{"no stops", nil, []string{"ab", "c"}, "abc", false},
		{"stop inside one piece", []string{"END"}, []string{"xyENDzz"}, "xy", true},
		{"stop across pieces", []string{"END"}, []string{"hello E", "N", "D more"}, "hello ", true},
		{"false start released", []string{"END"}, []string{"E", "N", "x"}, "ENx", false},
		{"earliest of two stops", []string{"bc", "ab"}, []string{"xa", "bc"}, "x", true},
		{"overlapping prefix", []string{"aab"}, []string{"a", "a", "a", "b"}, "a", true},
		{"stop at very start", []string{"\n"}, []string{"\n", "more"}, "", true},
		{"multibyte split", nil, []string{"\xe4", "\xbd", "\xa0", "!"}, "你!", false},
		{"multibyte stop across bytes", []string{"你"}, []string{"a\xe4\xbd", "\xa0b"}, "a", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, stopped := runMatcher(tc.stops, tc.pieces)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.wantStop, stopped)
		})
	}
}

// TestTextMatcherNeverEmitsHalfCharacter checks the incremental output stays
// on rune boundaries when a 4-byte emoji arrives one byte per token.
func TestTextMatcherNeverEmitsHalfCharacter(t *testing.T) {
	var m textMatcher
	m.reset(nil)
	in := "a😀b"
	var out []byte
	for i := 0; i < len(in); i++ {
		emit, _ := m.add([]byte{in[i]})
		require.True(t, utf8.Valid(emit), "emitted %q", emit)
		out = append(out, emit...)
		m.commit(len(emit))
	}
	require.Equal(t, in, string(out)+string(m.flush()))
}

// FuzzTextMatcher: whatever the split, the output equals the input cut at
// the first stop string, and nothing is emitted past it.
func FuzzTextMatcher(f *testing.F) {
	f.Add("hello world END tail", "END", uint64(7))
	f.Add("aaab", "aab", uint64(1))
	f.Add("x😀y\nz", "\n", uint64(3))
	f.Fuzz(func(t *testing.T, text, stop string, splits uint64) {
		if stop == "" {
			return
		}
		var pieces []string
		rest := text
		for len(rest) > 0 {
			n := int(splits%4) + 1
			splits = splits/4 + 0x9e37
			n = min(n, len(rest))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		got, stopped := runMatcher([]string{stop}, pieces)
		if i := strings.Index(text, stop); i >= 0 {
			require.True(t, stopped)
			require.Equal(t, text[:i], got)
		} else {
			require.False(t, stopped)
			require.Equal(t, text, got)
		}
	})
}
