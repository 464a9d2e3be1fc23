package grammar

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTextDFASpellings checks the one spelling textDFA allows for each
// ASCII character inside a JSON string: raw, a short escape for the five
// controls and the two characters JSON names, \u00XX in either case of
// hex for the other controls, and no other escape.
func TestTextDFASpellings(t *testing.T) {
	e, err := regexExpr(`(?s:.)`)
	require.NoError(t, err)
	d, err := compileExpr(e, newBudget(DefaultLimits))
	require.NoError(t, err)
	text, err := textDFA(d, newBudget(DefaultLimits))
	require.NoError(t, err)
	short := map[int]string{'"': `\"`, '\\': `\\`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}
	want := map[string]bool{}
	for c := range 0x80 {
		switch s, ok := short[c]; {
		case ok:
			want[s] = true
		case c < 0x20:
			want[fmt.Sprintf(`\u%04x`, c)] = true
			want[fmt.Sprintf(`\u%04X`, c)] = true
			want[fmt.Sprintf(`\u%02x%02X`, c>>8, c&0xff)] = true
		default:
			want[string(rune(c))] = true
		}
	}
	for c := range 0x80 {
		for _, s := range []string{
			string(rune(c)), `\` + string(rune(c)), fmt.Sprintf(`\u%04x`, c), fmt.Sprintf(`\u%04X`, c),
			fmt.Sprintf(`\u%04x`, c) + "a", `\\` + string(rune(c)),
		} {
			require.Equal(t, want[s], text.matches([]byte(s)), "character %#x spelled %q", c, s)
		}
	}
}

// TestQuoteDFA checks quoteDFA against the compiled sequence of quotes
// around a text DFA: the same minimal size and language.
func TestQuoteDFA(t *testing.T) {
	for _, re := range []string{`(?s:.*)`, `a{2,4}`, `"x"|\\`, `(ab)*c?`, ``} {
		text, err := textDFA(regexDFA(t, re), newBudget(DefaultLimits))
		require.NoError(t, err)
		got, ok := quoteDFA(text)
		require.True(t, ok, re)
		want, err := compileExpr(Seq(Lit(`"`), &Expr{op: opDFA, d: text}, Lit(`"`)), newBudget(DefaultLimits))
		require.NoError(t, err)
		require.Len(t, got.trim().minimize().states, len(want.states), re)
		for _, s := range []string{`""`, `"aa"`, `"aaa"`, `"aaaaa"`, `"\"x\""`, `"\\"`, `"ababc"`, `"c"`, `"x"`, `"abab"`, `"a"a"`, `"`, `"é"`} {
			require.Equal(t, want.matches([]byte(s)), got.matches([]byte(s)), "%s %s", re, s)
		}
	}
}
