package grammar

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxGBNFBytes bounds a GBNF grammar's source.
const MaxGBNFBytes = 1 << 20

const (
	// gbnfMaxDepth bounds the nesting of parentheses, and the height of
	// the expression tree (parentheses and repetition operators), so the
	// recursive descent and the compilers' recursion over the tree stay
	// shallow.
	gbnfMaxDepth = 1000
	// gbnfMaxCount bounds a repetition count {m,n}; the real bound on what
	// a repetition costs is Limits.States.
	gbnfMaxCount = 100_000
)

// CompileGBNF compiles a grammar in llama.cpp's GBNF format (see
// llama.cpp's grammars/README.md): rules `name ::= alternatives`, one per
// line unless the line ends in `|` or parentheses are open; sequences,
// `|`, `( )`, rule references in any order, "string" literals,
// [character classes] with ranges and ^ negation, `.` for any character,
// the repetitions `* + ? {m} {m,} {m,n}`, `#` comments; escapes \n \r \t
// \\ \" \[ \] \- \xXX \uXXXX \UXXXXXXXX in strings and classes.
// Terminals are Unicode scalar values matched as their UTF-8 bytes (\xFF
// is U+00FF, two bytes). The start rule is `root`. Left recursion is
// refused, as llama.cpp does.
//
// Deliberate differences from llama.cpp, each toward a clearer grammar:
//   - a rule defined twice is an error (llama.cpp keeps the last
//     definition silently);
//   - rule names may also contain '_' (llama.cpp's are [a-zA-Z0-9-]+;
//     other GBNF dialects allow '_', and it means nothing else here);
//   - repetition counts are honoured exactly up to 100,000, Limits
//     bounding the cost (llama.cpp refuses a minimum above 2,000 and turns
//     a maximum above 2,000 into no maximum); `{,n}` means `{0,n}`;
//   - `{m,n}` with n < m, a reversed range [z-a], an empty class [] or
//     [^], a class that matches no character, invalid UTF-8 in a string or
//     class, and surrogates or values past U+10FFFF in a string are errors
//     (llama.cpp accepts them, with odd or no meaning);
//   - a root that can match nothing is refused (Builder.Build);
//   - token references (<[id]>, <token>, !<...>) are refused as
//     unsupported: the grammar constrains text, not token ids.
//
// Syntax errors name the line and column (in characters, from 1) and what
// was expected or found, as in
//
//	gbnf: line 3 col 14: expected "::=" after rule name "value", found "="
func CompileGBNF(src string, lim Limits) (*Grammar, error) {
	if lim.States <= 0 {
		lim = DefaultLimits
	}
	if len(src) > MaxGBNFBytes {
		return nil, fmt.Errorf("gbnf: the grammar has %d bytes, more than the limit of %d: %w", len(src), MaxGBNFBytes, errTooLarge)
	}
	p := &gbnfParser{src: src, ids: map[string]RuleID{}}
	if err := p.parse(); err != nil {
		return nil, err
	}
	root, ok := p.ids["root"]
	if !ok {
		if len(p.ids) == 0 {
			return nil, fmt.Errorf(`gbnf: the grammar has no rules; its start rule must be named "root"`)
		}
		return nil, fmt.Errorf(`gbnf: the grammar has no rule named "root" (the start rule)`)
	}
	g, err := p.b.buildWith(root, lim, newBudget(lim))
	if err != nil {
		return nil, fmt.Errorf("gbnf: %w", err)
	}
	return g, nil
}

type gbnfParser struct {
	src   string
	pos   int
	b     Builder
	ids   map[string]RuleID
	def   []int // per rule: offset of its definition, -1 while undefined
	ref   []int // per rule: offset of its first reference, -1 if none
	depth int
	rules int // rules defined so far
}

func (p *gbnfParser) parse() error {
	p.space(true)
	for p.pos < len(p.src) {
		if err := p.rule(); err != nil {
			return err
		}
	}
	// Report an undefined rule at its first reference, in source order.
	first, firstOff := RuleID(-1), len(p.src)+1
	for id, off := range p.def {
		if off < 0 && p.ref[id] < firstOff {
			first, firstOff = RuleID(id), p.ref[id]
		}
	}
	if first >= 0 {
		return p.errorf(firstOff, "rule %q is referenced but never defined", p.b.Name(first))
	}
	return nil
}

// rule parses `name ::= alternatives` and the line break after it.
func (p *gbnfParser) rule() error {
	start := p.pos
	name := p.name()
	if name == "" {
		hint := ""
		if p.rules > 0 && p.pos < len(p.src) && strings.IndexByte(`"[(.|*+?{<!`, p.src[p.pos]) >= 0 {
			hint = ` (a rule continues on the next line only after a line ending in "|", or inside parentheses)`
		}
		return p.errorf(p.pos, "expected a rule name, found %s%s", p.found(p.pos), hint)
	}
	p.space(false)
	if !strings.HasPrefix(p.src[p.pos:], "::=") {
		hint := ""
		if p.rules > 0 && p.pos < len(p.src) && p.src[p.pos] != ':' && p.src[p.pos] != '=' {
			hint = ` (a rule continues on the next line only after a line ending in "|", or inside parentheses)`
		}
		return p.errorf(p.pos, "expected \"::=\" after rule name %q, found %s%s", name, p.found(p.pos), hint)
	}
	id := p.lookup(name, -1)
	if prev := p.def[id]; prev >= 0 {
		// llama.cpp lets the last definition win silently; a second
		// definition is far more often a mistake (a pasted rule, a
		// misspelt name) than intended, so it is refused.
		line, col := p.lineCol(prev)
		return p.errorf(start, "rule %q is defined twice (first at line %d col %d)", name, line, col)
	}
	p.def[id] = start
	p.rules++
	p.pos += len("::=")
	p.space(true)
	e, _, err := p.alternates(false)
	if err != nil {
		return err
	}
	p.b.Define(id, e)
	switch {
	case p.pos >= len(p.src):
	case p.src[p.pos] == '\r':
		p.pos++
		if p.pos < len(p.src) && p.src[p.pos] == '\n' {
			p.pos++
		}
	case p.src[p.pos] == '\n':
		p.pos++
	default:
		hint := p.hint()
		if p.src[p.pos] == ')' {
			hint = ` (a ")" without a matching "(")`
		}
		return p.errorf(p.pos, "expected end of line after the definition of rule %q, found %s%s", name, p.found(p.pos), hint)
	}
	p.space(true)
	return nil
}

// hint explains a few common mistakes at the current position.
func (p *gbnfParser) hint() string {
	rest := p.src[p.pos:]
	switch {
	case strings.HasPrefix(rest, "::="):
		return " (each rule must start on a new line)"
	case strings.HasPrefix(rest, "'"):
		return ` (string literals are written in double quotes)`
	}
	return ""
}

// alternates parses sequences separated by '|'; a line break may follow
// any '|'. It returns the expression and the height of its tree.
func (p *gbnfParser) alternates(nested bool) (*Expr, int, error) {
	var alts []*Expr
	height := 0
	for {
		s, h, err := p.sequence(nested)
		if err != nil {
			return nil, 0, err
		}
		alts, height = append(alts, s), max(height, h)
		if p.pos >= len(p.src) || p.src[p.pos] != '|' {
			break
		}
		p.pos++
		p.space(true)
	}
	return Alt(alts...), height, nil
}

// sequence parses items, each with its repetition operators, until
// something that cannot start an item. Inside parentheses line breaks
// are spaces; outside they end the sequence (and the rule).
func (p *gbnfParser) sequence(nested bool) (*Expr, int, error) {
	var items []*Expr
	// Heights count parentheses and repetition operators.
	height, last := 0, 0 // of the sequence, of its last item
loop:
	for p.pos < len(p.src) {
		start := p.pos
		c := p.src[p.pos]
		switch {
		case c == '"':
			e, err := p.literal()
			if err != nil {
				return nil, 0, err
			}
			items, last = append(items, e), 0
		case c == '[':
			e, err := p.class()
			if err != nil {
				return nil, 0, err
			}
			items, last = append(items, e), 0
		case c == '.':
			p.pos++
			items, last = append(items, anyRune), 0
		case isGBNFNameChar(c):
			name := p.name()
			items, last = append(items, Ref(p.lookup(name, start))), 0
		case c == '(':
			if p.depth >= gbnfMaxDepth {
				return nil, 0, p.errorf(start, "parentheses nested deeper than %d: %w", gbnfMaxDepth, errTooLarge)
			}
			p.depth++
			p.pos++
			p.space(true)
			e, h, err := p.alternates(true)
			if err != nil {
				return nil, 0, err
			}
			if p.pos >= len(p.src) || p.src[p.pos] != ')' {
				line, col := p.lineCol(start)
				hint := p.hint()
				if strings.HasPrefix(p.src[p.pos:], "::=") {
					hint = ` (a rule definition inside parentheses: is a ")" missing?)`
				}
				return nil, 0, p.errorf(p.pos, "expected \")\" to close the \"(\" at line %d col %d, found %s%s", line, col, p.found(p.pos), hint)
			}
			p.pos++
			p.depth--
			items, last = append(items, e), h+1
			if last > gbnfMaxDepth {
				return nil, 0, p.errorf(start, "expression nested deeper than %d (parentheses and repetition operators): %w", gbnfMaxDepth, errTooLarge)
			}
		case c == '<' || c == '!':
			return nil, 0, p.errorf(start, "token references (<[id]>, <token>, !<...>) are %w: this engine constrains text, not token ids", errUnsupported)
		case c == '*' || c == '+' || c == '?' || c == '{':
			if len(items) == 0 {
				return nil, 0, p.errorf(start, "expected an item (a string, class, rule or group) before %q", string(c))
			}
			lo, hi := 0, -1
			switch c {
			case '*':
				p.pos++
			case '+':
				lo = 1
				p.pos++
			case '?':
				hi = 1
				p.pos++
			case '{':
				var err error
				if lo, hi, err = p.counts(nested); err != nil {
					return nil, 0, err
				}
			}
			if last++; last > gbnfMaxDepth {
				return nil, 0, p.errorf(start, "expression nested deeper than %d (parentheses and repetition operators): %w", gbnfMaxDepth, errTooLarge)
			}
			items[len(items)-1] = Repeat(items[len(items)-1], lo, hi)
		default:
			break loop
		}
		height = max(height, last)
		p.space(nested)
	}
	return Seq(items...), height, nil
}

// counts parses `{m}`, `{m,}`, `{m,n}` or `{,n}`.
func (p *gbnfParser) counts(nested bool) (lo, hi int, err error) {
	open := p.pos
	p.pos++ // '{'
	p.space(nested)
	hasMin := p.pos >= len(p.src) || p.src[p.pos] != ','
	if hasMin {
		if lo, err = p.count(open); err != nil {
			return 0, 0, err
		}
		p.space(nested)
	}
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
		return lo, lo, nil
	}
	if p.pos >= len(p.src) || p.src[p.pos] != ',' {
		return 0, 0, p.errorf(p.pos, `expected "," or "}" in the repetition at line %s, found %s`, p.lineColString(open), p.found(p.pos))
	}
	p.pos++
	p.space(nested)
	hi = -1
	// {m,} has no maximum; {m,n} and {,n} have one ({,} is an error).
	if !hasMin || p.pos < len(p.src) && gbnfIsDigit(p.src[p.pos]) {
		if hi, err = p.count(open); err != nil {
			return 0, 0, err
		}
		p.space(nested)
	}
	if p.pos >= len(p.src) || p.src[p.pos] != '}' {
		return 0, 0, p.errorf(p.pos, `expected "}" to close the repetition at line %s, found %s`, p.lineColString(open), p.found(p.pos))
	}
	p.pos++
	if hi >= 0 && hi < lo {
		return 0, 0, p.errorf(open, "repetition {%d,%d}: the maximum is below the minimum", lo, hi)
	}
	return lo, hi, nil
}

// count parses a repetition count.
func (p *gbnfParser) count(open int) (int, error) {
	start := p.pos
	for p.pos < len(p.src) && gbnfIsDigit(p.src[p.pos]) {
		p.pos++
	}
	if p.pos == start {
		return 0, p.errorf(p.pos, "expected a number in the repetition at line %s, found %s", p.lineColString(open), p.found(p.pos))
	}
	digits := strings.TrimLeft(p.src[start:p.pos], "0")
	n, err := strconv.Atoi(digits)
	if digits == "" {
		n, err = 0, nil
	}
	if err != nil || n > gbnfMaxCount {
		return 0, p.errorf(start, "repetition count %s is above the limit of %d: %w", p.src[start:p.pos], gbnfMaxCount, errTooLarge)
	}
	return n, nil
}

// literal parses a "string".
func (p *gbnfParser) literal() (*Expr, error) {
	open := p.pos
	p.pos++
	var buf []byte
	for {
		if p.pos >= len(p.src) {
			return nil, p.errorf(open, `unterminated string: expected a closing '"', found end of input`)
		}
		if p.src[p.pos] == '"' {
			p.pos++
			return Lit(string(buf)), nil
		}
		at := p.pos
		r, err := p.char()
		if err != nil {
			return nil, err
		}
		if r > utf8.MaxRune {
			return nil, p.errorf(at, "%s is above U+10FFFF, not a Unicode character", p.src[at:p.pos])
		}
		if r >= 0xD800 && r <= 0xDFFF {
			return nil, p.errorf(at, "%s is a UTF-16 surrogate, not a Unicode character (write the character itself, or \\U followed by its 8 hex digits)", p.src[at:p.pos])
		}
		buf = utf8.AppendRune(buf, rune(r))
	}
}

// class parses a [character class].
func (p *gbnfParser) class() (*Expr, error) {
	open := p.pos
	p.pos++
	neg := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		neg = true
		p.pos++
	}
	var ranges []rune
	items := 0
	for {
		if p.pos >= len(p.src) {
			return nil, p.errorf(open, `unterminated character class: expected a closing "]", found end of input`)
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		at := p.pos
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		// As in llama.cpp, '-' before ']' is a literal '-'.
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf(at, "character range %s is reversed", p.src[at:p.pos])
			}
		}
		items++
		if lo <= utf8.MaxRune {
			ranges = append(ranges, rune(lo), rune(min(hi, utf8.MaxRune)))
		}
	}
	if items == 0 {
		return nil, p.errorf(open, "empty character class %s", p.src[open:p.pos])
	}
	// sortRanges merges in linear time only sorted input (it sorts by
	// insertion): sort first.
	pairs := make([][2]rune, 0, len(ranges)/2)
	for i := 0; i+1 < len(ranges); i += 2 {
		pairs = append(pairs, [2]rune{ranges[i], ranges[i+1]})
	}
	slices.SortFunc(pairs, func(a, b [2]rune) int { return cmp.Compare(a[0], b[0]) })
	ranges = ranges[:0]
	for _, pr := range pairs {
		ranges = append(ranges, pr[0], pr[1])
	}
	ranges = sortRanges(ranges)
	if neg {
		ranges = gbnfComplement(ranges)
	}
	e := runeClass(ranges)
	if e.op == opNone {
		return nil, p.errorf(open, "character class %s matches no character", p.src[open:p.pos])
	}
	return e, nil
}

// gbnfComplement returns the scalar values outside sorted, merged
// ranges (surrogates are dropped later, by runeClass).
func gbnfComplement(r []rune) []rune {
	var out []rune
	next := rune(0)
	for i := 0; i+1 < len(r); i += 2 {
		if r[i] > next {
			out = append(out, next, r[i]-1)
		}
		next = r[i+1] + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, next, utf8.MaxRune)
	}
	return out
}

// char parses one character of a string or class: an escape or one UTF-8
// encoded character. Values may exceed U+10FFFF (\U takes 8 hex digits).
func (p *gbnfParser) char() (uint32, error) {
	at := p.pos
	c := p.src[p.pos]
	if c != '\\' {
		r, size := utf8.DecodeRuneInString(p.src[p.pos:])
		if r == utf8.RuneError && size <= 1 {
			return 0, p.errorf(at, "invalid UTF-8 byte 0x%02x", c)
		}
		p.pos += size
		return uint32(r), nil
	}
	if p.pos+1 >= len(p.src) {
		return 0, p.errorf(at, `expected a character after "\", found end of input`)
	}
	e := p.src[p.pos+1]
	p.pos += 2
	switch e {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-':
		return uint32(e), nil
	case 'x', 'u', 'U':
		n := 2
		if e == 'u' {
			n = 4
		} else if e == 'U' {
			n = 8
		}
		var v uint32
		for i := 0; i < n; i++ {
			if p.pos >= len(p.src) {
				return 0, p.errorf(at, `expected %d hex digits after "\%c", found end of input`, n, e)
			}
			d := gbnfUnhex(p.src[p.pos])
			if d < 0 {
				return 0, p.errorf(at, `expected %d hex digits after "\%c", found %s`, n, e, p.found(p.pos))
			}
			v = v<<4 | uint32(d)
			p.pos++
		}
		return v, nil
	}
	p.pos = at
	r, _ := utf8.DecodeRuneInString(p.src[at+1:])
	return 0, p.errorf(at, `unknown escape "\%c" (GBNF has \n \r \t \\ \" \[ \] \- \xXX \uXXXX \UXXXXXXXX)`, r)
}

func gbnfUnhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func gbnfIsDigit(c byte) bool { return c >= '0' && c <= '9' }

// isGBNFNameChar: rule names are [a-zA-Z0-9_-]+ ('_' is an extension).
func isGBNFNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isGBNFNameChar(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// lookup returns the rule named name, declaring it on first sight; ref is
// the offset of a reference to it (-1 for a definition).
func (p *gbnfParser) lookup(name string, ref int) RuleID {
	id, ok := p.ids[name]
	if !ok {
		id = p.b.Declare(name)
		p.ids[name] = id
		p.def = append(p.def, -1)
		p.ref = append(p.ref, -1)
	}
	if ref >= 0 && p.ref[id] < 0 {
		p.ref[id] = ref
	}
	return id
}

// space skips blanks, tabs and comments, and line breaks if newlines.
func (p *gbnfParser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t':
			p.pos++
		case '\r', '\n':
			if !newlines {
				return
			}
			p.pos++
		case '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.pos++
			}
		default:
			return
		}
	}
}

// found describes what is at off, for an error message.
func (p *gbnfParser) found(off int) string {
	if off >= len(p.src) {
		return "end of input"
	}
	c := p.src[off]
	switch {
	case c == '\n' || c == '\r':
		return "end of line"
	case isGBNFNameChar(c):
		end := off
		for end < len(p.src) && end-off < 32 && isGBNFNameChar(p.src[end]) {
			end++
		}
		return strconv.Quote(p.src[off:end])
	}
	r, size := utf8.DecodeRuneInString(p.src[off:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("byte 0x%02x", c)
	}
	return strconv.Quote(string(r))
}

// lineCol gives the 1-based line and column (in characters) of off; a
// line ends at "\n", "\r\n" or a lone "\r".
func (p *gbnfParser) lineCol(off int) (line, col int) {
	line, start := 1, 0
	for i := 0; i < off && i < len(p.src); i++ {
		switch p.src[i] {
		case '\n':
			line, start = line+1, i+1
		case '\r':
			if i+1 < len(p.src) && p.src[i+1] == '\n' {
				continue
			}
			line, start = line+1, i+1
		}
	}
	return line, utf8.RuneCountInString(p.src[start:min(off, len(p.src))]) + 1
}

func (p *gbnfParser) lineColString(off int) string {
	line, col := p.lineCol(off)
	return fmt.Sprintf("%d col %d", line, col)
}

func (p *gbnfParser) errorf(off int, format string, args ...any) error {
	line, col := p.lineCol(off)
	return fmt.Errorf("gbnf: line %d col %d: "+format, append([]any{line, col}, args...)...)
}
