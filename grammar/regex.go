package grammar

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// regexExpr turns a regular expression (RE2 syntax, as Go's regexp/syntax
// parses it with Perl flags) into an expression over the UTF-8 bytes of
// the text it matches, whole. Anchors become zero-width assertions; word
// boundaries, multi-line anchors and anything RE2 refuses (backreferences,
// lookaround) are refused with an error naming the construct.
func regexExpr(pattern string) (*Expr, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("regular expression %q: %w", pattern, err)
	}
	e, err := reExpr(re)
	if err != nil {
		return nil, fmt.Errorf("regular expression %q: %w", pattern, err)
	}
	return e, nil
}

// anyRune matches one UTF-8 encoded scalar value.
var anyRune = runeClass([]rune{0, utf8.MaxRune})

// anyRuneNotNL matches a scalar value other than '\n'.
var anyRuneNotNL = runeClass([]rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune})

// runeClass builds the UTF-8 byte expression of a class given as sorted
// inclusive rune range pairs.
func runeClass(ranges []rune) *Expr {
	var alts []*Expr
	var ascii byteSet
	for i := 0; i+1 < len(ranges); i += 2 {
		utf8Sequences(ranges[i], ranges[i+1], func(seq []byteRange) {
			if len(seq) == 1 {
				ascii = ascii.union(rangeSet(seq[0].lo, seq[0].hi))
				return
			}
			parts := make([]*Expr, len(seq))
			for k, r := range seq {
				parts[k] = ByteRange(r.lo, r.hi)
			}
			alts = append(alts, Seq(parts...))
		})
	}
	if !ascii.empty() {
		alts = append([]*Expr{bytesExpr(ascii)}, alts...)
	}
	return Alt(alts...)
}

func foldClass(r rune) []rune {
	rs := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		rs = append(rs, f)
	}
	var out []rune
	for _, x := range rs {
		out = append(out, x, x)
	}
	return sortRanges(out)
}

// sortRanges sorts and merges rune range pairs.
func sortRanges(r []rune) []rune {
	type pr struct{ lo, hi rune }
	ps := make([]pr, 0, len(r)/2)
	for i := 0; i+1 < len(r); i += 2 {
		ps = append(ps, pr{r[i], r[i+1]})
	}
	slices.SortFunc(ps, func(a, b pr) int { return int(a.lo - b.lo) })
	var out []rune
	for _, p := range ps {
		if n := len(out); n > 0 && p.lo <= out[n-1]+1 {
			out[n-1] = max(out[n-1], p.hi)
			continue
		}
		out = append(out, p.lo, p.hi)
	}
	return out
}

func reExpr(re *syntax.Regexp) (*Expr, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return None(), nil
	case syntax.OpEmptyMatch:
		return Empty(), nil
	case syntax.OpLiteral:
		parts := make([]*Expr, len(re.Rune))
		for i, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				parts[i] = runeClass(foldClass(r))
			} else {
				parts[i] = runeClass([]rune{r, r})
			}
		}
		return Seq(parts...), nil
	case syntax.OpCharClass:
		return runeClass(re.Rune), nil
	case syntax.OpAnyCharNotNL:
		return anyRuneNotNL, nil
	case syntax.OpAnyChar:
		return anyRune, nil
	case syntax.OpBeginText:
		return &Expr{op: opAssertBegin}, nil
	case syntax.OpEndText:
		return &Expr{op: opAssertEnd}, nil
	case syntax.OpBeginLine, syntax.OpEndLine:
		return nil, fmt.Errorf("multi-line anchors ((?m)^ and $) are %w", errUnsupported)
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return nil, fmt.Errorf(`word boundaries (\b, \B) are %w`, errUnsupported)
	case syntax.OpCapture:
		return reExpr(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := reExpr(re.Sub[0])
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpStar:
			return Star(sub), nil
		case syntax.OpPlus:
			return Plus(sub), nil
		case syntax.OpQuest:
			return Opt(sub), nil
		}
		return Repeat(sub, re.Min, re.Max), nil
	case syntax.OpConcat, syntax.OpAlternate:
		parts := make([]*Expr, len(re.Sub))
		for i, s := range re.Sub {
			p, err := reExpr(s)
			if err != nil {
				return nil, err
			}
			parts[i] = p
		}
		if re.Op == syntax.OpConcat {
			return Seq(parts...), nil
		}
		return Alt(parts...), nil
	}
	return nil, fmt.Errorf("regular expression operator %v is %w", re.Op, errUnsupported)
}

// ECMAToRE2 rewrites the ECMA-262 escapes JSON Schema patterns use that RE2
// spells differently (\uXXXX, \u{X...}, \cX, named groups), and
// refuses what RE2 cannot express (lookaround, backreferences) with an
// error naming it. The result parses with Go's regexp/syntax.
func ECMAToRE2(p string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '(' && i+2 < len(p) && p[i+1] == '?' {
			switch p[i+2] {
			case '=', '!':
				return "", fmt.Errorf("lookahead %q is %w", p[i:i+3], errUnsupported)
			case '<':
				if i+3 < len(p) && (p[i+3] == '=' || p[i+3] == '!') {
					return "", fmt.Errorf("lookbehind %q is %w", p[i:i+4], errUnsupported)
				}
				// (?<name>...) is a named group: RE2 spells it (?P<name>...).
				b.WriteString("(?P<")
				i += 2
				continue
			}
		}
		if c != '\\' || i+1 >= len(p) {
			b.WriteByte(c)
			continue
		}
		n := p[i+1]
		switch {
		case n == 'u' && i+2 < len(p) && p[i+2] == '{':
			end := strings.IndexByte(p[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated escape %q", p[i:])
			}
			b.WriteString(`\x{` + p[i+3:i+end] + `}`)
			i += end
		case n == 'u' && i+5 < len(p) && isHex4(p[i+2:i+6]):
			b.WriteString(`\x{` + p[i+2:i+6] + `}`)
			i += 5
		case n == 'c' && i+2 < len(p) && (p[i+2]|0x20) >= 'a' && (p[i+2]|0x20) <= 'z':
			fmt.Fprintf(&b, `\x{%x}`, p[i+2]%32)
			i += 2
		case n >= '1' && n <= '9':
			return "", fmt.Errorf("backreference %q is %w", p[i:i+2], errUnsupported)
		default:
			b.WriteByte(c)
			b.WriteByte(n)
			i++
		}
	}
	return b.String(), nil
}

func isHex4(s string) bool {
	for i := 0; i < 4; i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
