package grammar

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// gbnfByteVocab has one token per byte value (id = the byte), a control
// token (256) and a stop token (257).
func gbnfByteVocab(t testing.TB) *Vocab {
	pieces := make([][]byte, 258)
	for i := range 256 {
		pieces[i] = []byte{byte(i)}
	}
	pieces[256] = []byte("<ctl>")
	special := make([]bool, 258)
	special[256], special[257] = true, true
	v, err := NewVocab(pieces, special, []int32{257})
	require.NoError(t, err)
	return v
}

// gbnfMatches feeds text one byte token at a time, checking at every step
// that the mask allows exactly the byte Accept takes, and reports whether
// the whole text is a sentence of g.
func gbnfMatches(t testing.TB, g *Grammar, v *Vocab, text string) bool {
	m := NewMatcher(g, v)
	mask := make([]uint64, v.MaskWords())
	check := len(text) <= 400 // masks on every step of long texts are slow
	for i := 0; i < len(text); i++ {
		c := text[i]
		if check {
			require.NoError(t, m.FillMask(mask))
		}
		err := m.Accept(int32(c))
		if check {
			allowed := mask[c>>6]&(1<<(c&63)) != 0
			require.Equal(t, allowed, err == nil, "byte %d (%q) of %q: mask %v, Accept %v", i, c, text, allowed, err)
		}
		if err != nil {
			require.ErrorIs(t, err, ErrRejected)
			return false
		}
	}
	require.NoError(t, m.FillMask(mask))
	complete := m.Complete()
	require.Equal(t, complete, mask[257>>6]&(1<<(257&63)) != 0, "stop token in the mask vs Complete at the end of %q", text)
	return complete
}

type gbnfCase struct {
	name          string
	src           string
	match, reject []string
}

var gbnfCases = []gbnfCase{
	{"literal and alternation", `root ::= "a" | "bc"`,
		[]string{"a", "bc"}, []string{"", "b", "abc", "bca", "A"}},
	{"escapes in strings", `root ::= "\n\r\t\"\\\x41\u00e9\U0001F600\[\]\-"`,
		[]string{"\n\r\t\"\\Aé😀[]-"}, []string{"\n\r\t\"\\A"}},
	{"\\x is a code point, not a byte", `root ::= "\xff" [\x80-\xfe]`,
		[]string{"ÿ\u0080", "ÿþ"}, []string{"\xff\x80", "ÿ\x80"}},
	{"raw UTF-8 text", `root ::= "héllo 世界 😀"`,
		[]string{"héllo 世界 😀"}, []string{"hello 世界 😀", "héllo"}},
	{"classes", `root ::= [a-c0-9_] [^a-z] [-a] [a-] [\]\-\\] [+*/-]`,
		[]string{"b0--]+", "_Ea--/", "9é-a\\-", "c\na-]*"}, []string{"d0--]+", "bz--]+", "b0b-]+", "b0--a+", "b0--]."}},
	{"class with unescaped [ and ranges of punctuation", `root ::= [!"#$%&'()*+,-./:;<=>?@[\\\]^_` + "`" + `{|}~]+`,
		[]string{"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"}, []string{"a", " "}},
	{"negated class over Unicode", `root ::= [^\n]+ "\n"`,
		[]string{"héllo 😀\n", "\x7f\n", "\U0010FFFF\n"}, []string{"\n", "a\nb\n", "\xff\n", "\xed\xa0\x80\n", "a"}},
	{"unicode ranges", `root ::= [ぁ-ゟ]+ [\u4e00-\u9fff]`,
		[]string{"ひらがな漢"}, []string{"漢", "ひらがな", "カ漢"}},
	{"any character", `root ::= ... "abc" ...`,
		[]string{"abcabcabc", "aaaabcccc", "🔵🟠✅abc❌🟠🔵"},
		[]string{"aaabcccc", "aaaaabcccc", "aaaabccc", "aaaabccccc", "🔵🟠✅❌abc❌✅🟠🔵", "🔵🟠abc🟠🔵", "\xc3abc\xc3\xa9\xc3\xa9"}},
	{"star", `root ::= "a"*`, []string{"", "a", "aaaaaaaaaaaaaaaaaa"}, []string{"b", "ab", "aab", "ba"}},
	{"plus", `root ::= "a"+`, []string{"a", "aaaaa"}, []string{"", "b", "ab", "aaab"}},
	{"optional", `root ::= "a"?`, []string{"", "a"}, []string{"b", "ab", "aa"}},
	{"exact count", `root ::= [ab]{4}`, []string{"aaaa", "abab"}, []string{"", "a", "aaa", "aaaaa"}},
	{"minimum count", `root ::= [ab]{4,}`, []string{"aaaa", "aaaaab", "ababab"}, []string{"", "aba"}},
	{"maximum count", `root ::= [ab]{0,4}`, []string{"", "a", "aaab"}, []string{"aaaaa"}},
	{"maximum count, no minimum", `root ::= "x" [ab]{,2} "y"`, []string{"xy", "xay", "xaby"}, []string{"xabay", "x"}},
	{"counts with spaces", `root ::= "a"{ 2 , 3 } "b"{ 1 }`, []string{"aab", "aaab"}, []string{"ab", "aaaab", "aabb"}},
	{"count on a group", `root ::= ("0x" [A-F0-9]{2} " "?){3,5}`,
		[]string{"0xFF 0x12 0xAB", "0xFF 0x12 0xAB 0x00 0x00"}, []string{"", "0xFF", "0xFF 0x12", "0xFF 0x12 0xAB 0x00 0x00 0x00"}},
	{"nested stars", `root ::= ( [x]* )*`, []string{"", "x", "xx"}, []string{"y", "yy"}},
	{"stacked repetition", `root ::= "ab"?+ "c"{2}{3}`, []string{"cccccc", "ababcccccc"}, []string{"ccccc", "aba", "abccccccc"}},
	{"large counts are exact", `root ::= "a"{2500,2501}`,
		[]string{strings.Repeat("a", 2500), strings.Repeat("a", 2501)}, []string{strings.Repeat("a", 2499), strings.Repeat("a", 2502)}},
	{"mixed quantifiers", `
		root ::= cons+ vowel* cons? (vowel cons)*
		vowel ::= [aeiouy]
		cons ::= [bcdfghjklmnpqrstvwxyz]
		`,
		[]string{"yes", "no", "noyes", "crwth", "four", "bryyyy"}, []string{"yess", "yesno", "forty", "catyyy"}},
	{"empty alternatives and empty root", `root ::= ws "x" ws
ws ::= | " " | "\n" [ \t]{0,2}`,
		[]string{"x", " x ", "\n  x\n\t"}, []string{"  x", "\n   x", ""}},
	{"deep nesting within the limits", "root ::= " + strings.Repeat("(", 1000) + `"a"` + strings.Repeat(")", 1000) + "\nb ::= " + strings.Repeat("(", 499) + `"b"` + strings.Repeat(")?", 499),
		[]string{"a"}, []string{"", "aa"}},
	{"empty root", `root ::= ""`, []string{""}, []string{"a"}},
	{"nothing after ::=", "root ::=\n", []string{""}, []string{"a"}},
	{"empty group", `root ::= () "a" ()*`, []string{"a"}, []string{""}},
	{"recursion", `root ::= ("(" root ")")*`, []string{"", "()", "(())()", "((()))"}, []string{"(", ")(", "(()"}},
	{"forward references, names with digits, dashes, capitals, underscores", `
root ::= rule-2 Rule_3
rule-2 ::= "b"
Rule_3 ::= 3x
3x ::= "c"`,
		[]string{"bc"}, []string{"b", "cb"}},
	{"multi-line rules, comments, CRLF", "# a comment\r\nroot ::= ( # open\r\n  \"a\" # in a group\r\n  | \"b\"\r\n) |\r\n  \"c\" # after an alternative\r\n\r\n#end",
		[]string{"a", "b", "c"}, []string{"", "ab", "#"}},
	{"lone CR ends a rule", "root ::= a\ra ::= \"x\"", []string{"x"}, []string{""}},
	{"tabs and no spaces", "root\t::=\"a\"[b](\"c\")root2\nroot2::=\"d\"", []string{"abcd"}, []string{"abc"}},
	{"medium complexity grammar", `
		root ::= expression
		expression ::= term ws (("+"|"-") ws term)*
		term ::= factor ws (("*"|"/") ws factor)*
		factor ::= number | variable | "(" expression ")" | function-call
		number ::= [0-9]+
		variable ::= [a-zA-Z_][a-zA-Z0-9_]*
		function-call ::= variable ws "(" (expression ("," ws expression)*)? ")"
		ws ::= [ \t\n\r]?`,
		[]string{"42", "1*2*3*4*5", "x+10", "(a+b)*(c-d)", "func()", "func(x,y+2)", "f(g(x), h(y, z))", "a * (b + c) - d / e",
			"123+456*789-123/456+789*123-456/789+123*456-789/123+456*789-123/456+789*123-456"},
		[]string{"+", "/ 3x", "x + + y", "a * / b", "func(,)", "func(x y)", "(a + b", "x + y)", "42 +", "f(g(x), h(y, z)"}},

	// llama.cpp's example grammars.
	{"json.gbnf", readGBNFFile("json.gbnf"),
		[]string{
			`{}`,
			`{"a": 1}`,
			`{"name":"Ada","age":36,"langs":["en","fr"],"ok":true,"x":null,"pi":-3.25,"big":1.5e+3}`,
			"{\n  \"key\": \"va\\\"lue\\\\ \\u00e9 \\n é 😀\",\n  \"list\": [\n    1,\n    {\"n\": []},\n    false\n  ],\n  \"empty\": {}\n}",
			`{"deep":[[[[[[[[[[{"a":[0]}]]]]]]]]]]}`,
		},
		[]string{`[1]`, `{"a":}`, `{"a" 1}`, `{'a': 1}`, `{"a": 01}`, `{"a":1,}`, "{\"a\":\"x\ty\"}", `{"a":"\x"}`, `{"a":1}}`, `{"a":1`, `{"a":tru}`}},
	{"json_arr.gbnf", readGBNFFile("json_arr.gbnf"),
		[]string{"[\n{\"a\": 1},\n[2, \"x\"]]", "[\n]"},
		[]string{"[]", "[\n1,]", "{}"}},
	{"arithmetic.gbnf", readGBNFFile("arithmetic.gbnf"),
		[]string{"1+2= 3\n", "x*(y-2)=z\n", "a = b\nc_1/4=5\n"},
		[]string{"", "1+2=3", "1++2=3\n", "=3\n", "X=1\n"}},
	{"list.gbnf", readGBNFFile("list.gbnf"),
		[]string{"- a\n", "- milk\n- eggs 🥚\n"},
		[]string{"", "- \n", "a\n", "- a", "- a\u2028b\n"}},
	{"chess.gbnf", readGBNFFile("chess.gbnf"),
		[]string{"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8#\n10. exd8=Q+ Kxd8\n"},
		[]string{"1. e4 e5\n", "1. e9 e5\n2. Nf3 Nc6\n", "2. e4 e5\n3. e5 e6\n", "1. e4 e5\n0. e5 e6\n"}},
	{"c.gbnf", readGBNFFile("c.gbnf"),
		[]string{"", "int main(){return 0;}", "int f(int x){x = x+1;while(x<10){x = x*2;}return x;}float g(){}",
			"char c(){/* note */// line\nif(a==b){return 1;}else{return -f(2);}}"},
		[]string{"int main(){return 0}", "main(){}", "int main(){return 0;", "int main() {}"}},
	{"japanese.gbnf", readGBNFFile("japanese.gbnf"),
		[]string{"こんにちは", "カタカナ 漢字、ひらがな"},
		[]string{"", "hello", "こんにちは ", "こんにちは  せかい"}},
	{"english.gbnf", readGBNFFile("english.gbnf"),
		[]string{"Hello, world!", "a\tb\nc [1] {2}"},
		[]string{"", "héllo", "a  b", " a"}},
}

// readGBNFFile reads an example grammar for the case table (panics are
// fine at init: the files are part of the package's test data).
func readGBNFFile(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", "gbnf", name))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestGBNFMatch(t *testing.T) {
	v := gbnfByteVocab(t)
	for _, tc := range gbnfCases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := CompileGBNF(tc.src, DefaultLimits)
			require.NoError(t, err)
			for _, s := range tc.match {
				require.True(t, gbnfMatches(t, g, v, s), "should match %q", s)
			}
			for _, s := range tc.reject {
				require.False(t, gbnfMatches(t, g, v, s), "should not match %q", s)
			}
		})
	}
}

// TestGBNFMaskBruteForce walks random tokens through a few grammars and
// checks every mask against brute force and Accept.
func TestGBNFMaskBruteForce(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine and long under -race; the non-race pass of make test runs it")
	}
	for _, tc := range []struct {
		name, src, alphabet string
		extra               []string
	}{
		{"json", readGBNFFile("json.gbnf"), `{}[]":1a,`, []string{`{"`, `":`, `", "`, "\n  ", ` "`, "true", "-0.5", `\"`, "é"}},
		{"arithmetic", readGBNFFile("arithmetic.gbnf"), "1x+(=) \n", []string{"= ", "x_1", ")\n"}},
		{"unicode", "root ::= ([^a\\n] | \"ab\")* \"\\n\" .", "a\n\xc3\xa9x", []string{"é", "éa", "\xa9\n", "ab\n"}},
		{"counts", `root ::= ("x" [0-9]{1,3} ","?){2,4} tail
tail ::= "" | "y" tail`, "x01,y", []string{"x12", "345,", "yyyy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := CompileGBNF(tc.src, DefaultLimits)
			require.NoError(t, err)
			v := testVocab(t, tc.alphabet, tc.extra...)
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			mask := make([]uint64, v.MaskWords())
			for trial := 0; trial < 12; trial++ {
				m := NewMatcher(g, v)
				for step := 0; step < 25; step++ {
					require.NoError(t, m.FillMask(mask))
					require.Equal(t, maskIDs(bruteMask(m), v), maskIDs(mask, v), "trial %d step %d", trial, step)
					for id := range v.Size() {
						allowed := mask[id>>6]&(1<<(id&63)) != 0
						err := m.Accept(int32(id))
						require.Equal(t, allowed, err == nil, "token %q: mask %v, Accept %v", v.pieces[id], allowed, err)
						if err == nil {
							require.NoError(t, m.Rollback(1))
						}
					}
					var ids []int32
					forBits(mask, func(id int32) { ids = append(ids, id) })
					if len(ids) == 0 || m.Done() {
						break
					}
					require.NoError(t, m.Accept(ids[rng.IntN(len(ids))]))
				}
			}
		})
	}
}

// TestGBNFLargeClass: a class of many members in descending order (sorted
// in O(n log n); sortRanges alone is quadratic on it).
func TestGBNFLargeClass(t *testing.T) {
	var b strings.Builder
	b.WriteString("root ::= [")
	for i := 20000; i > 0; i-- {
		b.WriteRune(rune(0x10000 + 2*i))
	}
	b.WriteString("]")
	g, err := CompileGBNF(b.String(), DefaultLimits)
	require.NoError(t, err)
	v := gbnfByteVocab(t)
	require.True(t, gbnfMatches(t, g, v, string(rune(0x10002))))
	require.True(t, gbnfMatches(t, g, v, string(rune(0x10000+40000))))
	require.False(t, gbnfMatches(t, g, v, string(rune(0x10003))))
	require.False(t, gbnfMatches(t, g, v, string(rune(0x10000))))
}

// gbnfRandomExpr returns a random regular GBNF expression and the RE2
// regular expression with the same language.
func gbnfRandomExpr(rng *rand.Rand, depth int) (gbnf, re string) {
	k := rng.IntN(10)
	if depth <= 0 {
		k = rng.IntN(3)
	}
	switch k {
	case 0: // a literal: GBNF source, the text it matches
		lits := [][2]string{{``, ``}, {`a`, `a`}, {`ab`, `ab`}, {`é`, `é`}, {`\n`, "\n"}, {`\x62`, `b`}, {`\u00e9`, `é`}, {`\-\[`, `-[`}}
		l := lits[rng.IntN(len(lits))]
		return `"` + l[0] + `"`, "(?:" + regexp.QuoteMeta(l[1]) + ")"
	case 1: // a class: GBNF, RE2
		classes := [][2]string{{`a`, `a`}, {`a-c`, `a-c`}, {`b-d`, `b-d`}, {`ac`, `ac`}, {`a-b\n`, `a-b\n`}, {`é-ê`, `é-ê`}, {`-a`, `\-a`}, {`a-`, `a\-`}, {`\x00-\x61`, `\x00-\x61`}}
		c := classes[rng.IntN(len(classes))]
		if rng.IntN(2) == 0 {
			return "[^" + c[0] + "]", "[^" + c[1] + "]"
		}
		return "[" + c[0] + "]", "[" + c[1] + "]"
	case 2:
		return ".", "(?s:.)"
	case 3, 4:
		g1, r1 := gbnfRandomExpr(rng, depth-1)
		g2, r2 := gbnfRandomExpr(rng, depth-1)
		return g1 + " " + g2, r1 + r2
	case 5, 6:
		g1, r1 := gbnfRandomExpr(rng, depth-1)
		g2, r2 := gbnfRandomExpr(rng, depth-1)
		return "(" + g1 + " | " + g2 + ")", "(?:" + r1 + "|" + r2 + ")"
	}
	g, r := gbnfRandomExpr(rng, depth-1)
	g, r = "("+g+")", "(?:"+r+")"
	m, n := rng.IntN(3), rng.IntN(3)
	switch rng.IntN(7) {
	case 0:
		return g + "*", r + "*"
	case 1:
		return g + "+", r + "+"
	case 2:
		return g + "?", r + "?"
	case 3:
		return fmt.Sprintf("%s{%d}", g, m), fmt.Sprintf("%s{%d}", r, m)
	case 4:
		return fmt.Sprintf("%s{%d,}", g, m), fmt.Sprintf("%s{%d,}", r, m)
	case 5:
		return fmt.Sprintf("%s{%d,%d}", g, m, m+n), fmt.Sprintf("%s{%d,%d}", r, m, m+n)
	}
	return fmt.Sprintf("%s{,%d}", g, n), fmt.Sprintf("%s{0,%d}", r, n)
}

// TestGBNFRegexDifferential compares random regular GBNF grammars with
// the equivalent RE2 expressions on random texts (some not UTF-8).
func TestGBNFRegexDifferential(t *testing.T) {
	v := gbnfByteVocab(t)
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"a", "b", "c", "d", "-", "[", "é", "ê", "\n", "\xc3", "\x00"}
	for range 300 {
		src, re := gbnfRandomExpr(rng, 4)
		g, err := CompileGBNF("root ::= "+src+" # random", DefaultLimits)
		require.NoError(t, err, "root ::= %s", src)
		rx := regexp.MustCompile("^(?:" + re + ")$")
		for range 40 {
			var text strings.Builder
			for n := rng.IntN(6); n > 0; n-- {
				text.WriteString(pieces[rng.IntN(len(pieces))])
			}
			s := text.String()
			want := utf8.ValidString(s) && rx.MatchString(s)
			require.Equal(t, want, gbnfMatches(t, g, v, s), "grammar root ::= %s, regexp %s, text %q", src, re, s)
		}
	}
}

// gbnfErrorCases are malformed grammars and a part of their error.
var gbnfErrorCases = []struct{ src, want string }{
	{"", `gbnf: the grammar has no rules; its start rule must be named "root"`},
	{"# only a comment\n", `no rules`},
	{`rot ::= "a"`, `gbnf: the grammar has no rule named "root"`},
	{"root ::= value\nvalue = \"x\"", `gbnf: line 2 col 7: expected "::=" after rule name "value", found "="`},
	{"root ::= a\n\n  value  \"x\"", `gbnf: line 3 col 10: expected "::=" after rule name "value", found "\""`},
	{"root\n::= \"a\"", `gbnf: line 1 col 5: expected "::=" after rule name "root", found end of line`},
	{"root ::= \"a\"\n  \"b\"", `gbnf: line 2 col 3: expected a rule name, found "\"" (a rule continues on the next line only after a line ending in "|", or inside parentheses)`},
	{"root ::= \"a\"\n| \"b\"", `line 2 col 1: expected a rule name, found "|"`},
	{`::= "a"`, `gbnf: line 1 col 1: expected a rule name, found ":"`},
	{`root ::= "a" b ::= "c"`, `line 1 col 16: expected end of line after the definition of rule "root", found ":" (each rule must start on a new line)`},
	{`root ::= "a")`, `line 1 col 13: expected end of line after the definition of rule "root", found ")" (a ")" without a matching "(")`},
	{`root ::= 'a'`, `line 1 col 10: expected end of line after the definition of rule "root", found "'" (string literals are written in double quotes)`},
	{`root ::= "a" ]`, `found "]"`},
	{`root ::= ("a" | "b"`, `line 1 col 20: expected ")" to close the "(" at line 1 col 10, found end of input`},
	{"root ::= (\"a\"\nb ::= \"c\")", `line 2 col 3: expected ")" to close the "(" at line 1 col 10, found ":" (a rule definition inside parentheses: is a ")" missing?)`},
	{`root ::= ("a"]`, `expected ")" to close the "(" at line 1 col 10, found "]"`},
	{`root ::= "abc`, `line 1 col 10: unterminated string: expected a closing '"', found end of input`},
	{`root ::= [abc`, `line 1 col 10: unterminated character class: expected a closing "]", found end of input`},
	{`root ::= [a-`, `unterminated character class`},
	{`root ::= []`, `line 1 col 10: empty character class []`},
	{`root ::= [^]`, `empty character class [^]`},
	{`root ::= [z-a]`, `line 1 col 11: character range z-a is reversed`},
	{`root ::= [^\x00-\U0010FFFF]`, `character class [^\x00-\U0010FFFF] matches no character`},
	{`root ::= [\uD800-\uDFFF]`, `matches no character`},
	{`root ::= "a\qb"`, `line 1 col 12: unknown escape "\q"`},
	{`root ::= "\x4"`, `line 1 col 11: expected 2 hex digits after "\x", found "\""`},
	{`root ::= "\u00g0"`, `expected 4 hex digits after "\u", found "g0"`},
	{`root ::= "\U0001F60`, `expected 8 hex digits after "\U", found end of input`},
	{`root ::= "\`, `expected a character after "\", found end of input`},
	{`root ::= "\uD83D\uDE00"`, `line 1 col 11: \uD83D is a UTF-16 surrogate`},
	{`root ::= "\U00110000"`, `\U00110000 is above U+10FFFF`},
	{"root ::= \"\xff\"", `line 1 col 11: invalid UTF-8 byte 0xff`},
	{"root ::= [\xc3]", `invalid UTF-8 byte 0xc3`},
	{`root ::= *"a"`, `line 1 col 10: expected an item (a string, class, rule or group) before "*"`},
	{`root ::= "a" | +`, `expected an item (a string, class, rule or group) before "+"`},
	{`root ::= ( ? )`, `before "?"`},
	{`root ::= {2}`, `before "{"`},
	{`root ::= "a"{`, `line 1 col 14: expected a number in the repetition at line 1 col 13, found end of input`},
	{`root ::= "a"{x}`, `expected a number in the repetition at line 1 col 13, found "x"`},
	{`root ::= "a"{,}`, `expected a number in the repetition at line 1 col 13, found "}"`},
	{`root ::= "a"{2`, `expected "," or "}" in the repetition at line 1 col 13, found end of input`},
	{`root ::= "a"{2 3}`, `expected "," or "}" in the repetition at line 1 col 13, found "3"`},
	{`root ::= "a"{2,3`, `expected "}" to close the repetition at line 1 col 13, found end of input`},
	{`root ::= "a"{3,2}`, `line 1 col 13: repetition {3,2}: the maximum is below the minimum`},
	{`root ::= "a"{100001}`, `repetition count 100001 is above the limit of 100000`},
	{`root ::= "a"{99999999999999999999999}`, `above the limit`},
	{`root ::= <[1000]>`, `line 1 col 10: token references (<[id]>, <token>, !<...>) are not supported`},
	{`root ::= <think> "x"`, `token references`},
	{`root ::= "x" !<[2]>*`, `line 1 col 14: token references`},
	{"root ::= a\na ::= \"x\"\nroot ::= \"y\"", `gbnf: line 3 col 1: rule "root" is defined twice (first at line 1 col 1)`},
	{"root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= numero\nnumber ::= [0-9]+", `gbnf: line 3 col 10: rule "numero" is referenced but never defined`},
	{"root ::= a b\nb ::= c", `line 1 col 10: rule "a" is referenced but never defined`},
	{`root ::= "a" | root "a"`, `gbnf: left recursion: "root" -> "root" can call itself before reading anything`},
	{"root ::= asdf\nasdf ::= \"a\" | foo \"b\"\nfoo ::= \"c\" | empty asdf \"d\" | \"e\"\nempty ::= \"blah\" | ", `gbnf: left recursion: "asdf" -> "foo" -> "asdf"`},
	{"root ::= \"x\" root", `gbnf: rule "root" cannot match any string`},
	{"root ::= " + strings.Repeat("(", 1001) + `"a"` + strings.Repeat(")", 1001), `line 1 col 1010: parentheses nested deeper than 1000`},
	{`root ::= "a"` + strings.Repeat("*", 1001), `line 1 col 1013: expression nested deeper than 1000 (parentheses and repetition operators)`},
	{"root ::= " + strings.Repeat("(", 600) + `"a"` + strings.Repeat(")*", 600), `line 1 col 109: expression nested deeper than 1000`},
	{"root ::= " + strings.Repeat("(", 1000) + `"a"` + strings.Repeat(")", 1000) + "*", `line 1 col 2013: expression nested deeper than 1000`},
	{"root ::= \"a\"\n" + strings.Repeat("#", MaxGBNFBytes), `the grammar has 1048589 bytes, more than the limit of 1048576`},
	{`root ::= ((((([^x]{0,99}){0,99}){0,99}){0,99}){0,99})`, `too large`},
	{`root ::= "héllo" é`, `line 1 col 18: expected end of line after the definition of rule "root", found "é"`},
}

func TestGBNFErrors(t *testing.T) {
	for _, tc := range gbnfErrorCases {
		name := tc.src
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			// Smaller than the default limits, so that grammars past them
			// are refused quickly.
			_, err := CompileGBNF(tc.src, Limits{States: 50_000, Rules: 1000, Configs: 64, Time: 5 * time.Second})
			require.ErrorContains(t, err, tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "gbnf: "), "%v", err)
		})
	}
}

func TestGBNFErrorKinds(t *testing.T) {
	_, err := CompileGBNF(`root ::= <[1]>`, DefaultLimits)
	require.True(t, IsUnsupported(err), "%v", err)
	_, err = CompileGBNF(strings.Repeat(" ", MaxGBNFBytes+1), DefaultLimits)
	require.True(t, IsTooLarge(err), "%v", err)
	_, err = CompileGBNF(`root ::= [a-z]{0,2000}`, Limits{States: 1000, Rules: 10, Configs: 10, Time: time.Second})
	require.True(t, IsTooLarge(err), "%v", err)
	_, err = CompileGBNF("root ::= a\na ::= \"x\"\nb ::= \"y\"", Limits{States: 1000, Rules: 2, Configs: 10})
	require.True(t, IsTooLarge(err), "%v", err)
	_, err = CompileGBNF(`root ::= "a"{5`, DefaultLimits)
	require.False(t, IsUnsupported(err) || IsTooLarge(err), "%v", err)
}

// FuzzCompileGBNF: no input panics; every error is a gbnf error; a grammar
// that compiles gives masks that agree with Accept and Complete.
func FuzzCompileGBNF(f *testing.F) {
	for _, tc := range gbnfCases {
		text := ""
		if len(tc.match) > 0 {
			text = tc.match[len(tc.match)-1]
		}
		f.Add(tc.src, []byte(text))
	}
	for _, tc := range gbnfErrorCases {
		if len(tc.src) < 4096 {
			f.Add(tc.src, []byte("a"))
		}
	}
	v := gbnfByteVocab(f)
	lim := Limits{States: 4000, Rules: 200, Configs: 64, Time: 250 * time.Millisecond}
	f.Fuzz(func(t *testing.T, src string, text []byte) {
		g, err := CompileGBNF(src, lim)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gbnf: ") {
				t.Fatalf("error without the gbnf prefix: %v", err)
			}
			return
		}
		m := NewMatcher(g, v)
		mask := make([]uint64, v.MaskWords())
		for i, c := range text[:min(len(text), 24)] {
			if err := m.FillMask(mask); err != nil {
				t.Fatalf("FillMask: %v", err)
			}
			if (mask[257>>6]&(1<<(257&63)) != 0) != m.Complete() {
				t.Fatalf("stop token in mask %v, Complete %v", !m.Complete(), m.Complete())
			}
			if mask[256>>6]&(1<<(256&63)) != 0 {
				t.Fatalf("control token allowed")
			}
			allowed := mask[c>>6]&(1<<(c&63)) != 0
			err := m.Accept(int32(c))
			if err != nil && IsTooLarge(err) {
				return
			}
			if allowed != (err == nil) {
				t.Fatalf("byte %d (%q) after %q: mask %v, Accept %v", i, c, text[:i], allowed, err)
			}
			if err != nil {
				return
			}
		}
	})
}
