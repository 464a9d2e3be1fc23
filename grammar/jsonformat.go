package grammar

import (
	"fmt"
	"sync"
)

// formats maps the JSON Schema formats the compiler enforces to regular
// expressions (RE2 syntax, matched whole) over the decoded string. Each
// follows its RFC closely enough that every string it accepts passes the
// format checks of common validators; a few rare spellings valid under
// the RFC are left out (noted).
var formats = map[string]string{
	// RFC 3339 full-date, with the days of each month (29 February only
	// in leap years).
	"date": dateRE,
	// RFC 3339 full-time: a time offset is required.
	"time":      timeRE,
	"date-time": dateRE + `[Tt]` + timeRE,
	"uuid":      `[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`,
	// A dot-atom local part and a domain of labels (quoted local parts and
	// address literals are left out).
	"email":     `[A-Za-z0-9!#$%&'*+/=?^_` + "`" + `{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_` + "`" + `{|}~-]+)*@` + hostnameRE,
	"idn-email": `[^\x00-\x20@"(),:;<>\[\\\]]+@[^\x00-\x20@"(),:;<>\[\\\]]+`,
	"hostname":  hostnameRE,
	"ipv4":      ipv4RE,
	"ipv6":      ipv6RE,
	// RFC 3986: a scheme, then the characters a URI may hold.
	"uri":           uriRE,
	"uri-reference": `(` + uriRE + `|` + uriRelRE + `)`,
	"iri":           iriRE,
	"iri-reference": `(` + iriRE + `|` + iriRelRE + `)`,
	"uri-template":  `([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]|\{[^{}]*\})*`,
	// ISO 8601 duration as RFC 3339 appendix A has it.
	"duration":              `P([0-9]+D(T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S))?|(T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S))|[0-9]+Y([0-9]+M([0-9]+D)?)?(T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S))?|[0-9]+M([0-9]+D)?(T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S))?|[0-9]+W)`,
	"json-pointer":          `(/([^/~]|~[01])*)*`,
	"relative-json-pointer": `(0|[1-9][0-9]*)(#|(/([^/~]|~[01])*)*)`,
}

const (
	dateRE = `([0-9]{4}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])` +
		`|[0-9]{4}-(0[469]|11)-(0[1-9]|[12][0-9]|30)` +
		`|[0-9]{4}-02-(0[1-9]|1[0-9]|2[0-8])` +
		`|([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)`
	timeRE     = `(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?([Zz]|[+\-]([01][0-9]|2[0-3]):[0-5][0-9])|23:59:60(\.[0-9]+)?([Zz]|[+\-]00:00))`
	labelRE    = `[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?`
	hostnameRE = labelRE + `(\.` + labelRE + `)*`
	octetRE    = `(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
	ipv4RE     = octetRE + `\.` + octetRE + `\.` + octetRE + `\.` + octetRE
	h16        = `[0-9A-Fa-f]{1,4}`
	ls32       = `(` + h16 + `:` + h16 + `|` + ipv4RE + `)`
	ipv6RE     = `((` + h16 + `:){6}` + ls32 +
		`|::(` + h16 + `:){5}` + ls32 +
		`|(` + h16 + `)?::(` + h16 + `:){4}` + ls32 +
		`|((` + h16 + `:){0,1}` + h16 + `)?::(` + h16 + `:){3}` + ls32 +
		`|((` + h16 + `:){0,2}` + h16 + `)?::(` + h16 + `:){2}` + ls32 +
		`|((` + h16 + `:){0,3}` + h16 + `)?::` + h16 + `:` + ls32 +
		`|((` + h16 + `:){0,4}` + h16 + `)?::` + ls32 +
		`|((` + h16 + `:){0,5}` + h16 + `)?::` + h16 +
		`|((` + h16 + `:){0,6}` + h16 + `)?::)`
	// RFC 3986 URI: scheme ":" hier-part ["?" query] ["#" fragment]; the
	// host is an IPv6 literal or a reg-name (IPv4 is one), and a reg-name
	// escapes only non-ASCII bytes or %25, as Go's url.Parse requires.
	uriUnres   = `A-Za-z0-9\-._~`
	uriSub     = `!$&'()*+,;=`
	uriPct     = `%[0-9A-Fa-f]{2}`
	uriPchar   = `([` + uriUnres + uriSub + `:@]|` + uriPct + `)`
	uriRegName = `([` + uriUnres + uriSub + `]|%[89A-Fa-f][0-9A-Fa-f]|%25)*`
	uriHost    = `(\[` + ipv6RE + `\]|` + uriRegName + `)`
	uriAuth    = `(([` + uriUnres + uriSub + `:]|` + uriPct + `)*@)?` + uriHost + `(:[0-9]*)?`
	uriRE      = `[A-Za-z][A-Za-z0-9+.\-]*:(//` + uriAuth + `(/` + uriPchar + `*)*|/(` + uriPchar + `+(/` + uriPchar + `*)*)?|` + uriPchar + `+(/` + uriPchar + `*)*|)(\?(` + uriPchar + `|[/?])*)?(#(` + uriPchar + `|[/?])*)?`
	uriNC      = `([` + uriUnres + uriSub + `@]|` + uriPct + `)`
	uriRelRE   = `(//` + uriAuth + `(/` + uriPchar + `*)*|/(` + uriPchar + `+(/` + uriPchar + `*)*)?|` + uriNC + `+(/` + uriPchar + `*)*|)(\?(` + uriPchar + `|[/?])*)?(#(` + uriPchar + `|[/?])*)?`
	// IRIs: the same with non-ASCII characters where URIs have unreserved
	// ones.
	iriRE    = `[A-Za-z][A-Za-z0-9+.\-]*:` + iriTail
	iriTail  = `(//` + iriAuth + `(/` + iriPchar + `*)*|/(` + iriPchar + `+(/` + iriPchar + `*)*)?|` + iriPchar + `+(/` + iriPchar + `*)*|)(\?(` + iriPchar + `|[/?])*)?(#(` + iriPchar + `|[/?])*)?`
	iriU     = uriUnres + `\x{A0}-\x{10FFFF}`
	iriPchar = `([` + iriU + uriSub + `:@]|` + uriPct + `)`
	iriNC    = `([` + iriU + uriSub + `@]|` + uriPct + `)`
	iriAuth  = `(([` + iriU + uriSub + `:]|` + uriPct + `)*@)?(\[` + ipv6RE + `\]|([` + iriU + uriSub + `]|%[89A-Fa-f][0-9A-Fa-f]|%25)*)(:[0-9]*)?`
	iriRelRE = `(//` + iriAuth + `(/` + iriPchar + `*)*|/(` + iriPchar + `+(/` + iriPchar + `*)*)?|` + iriNC + `+(/` + iriPchar + `*)*|)(\?(` + iriPchar + `|[/?])*)?(#(` + iriPchar + `|[/?])*)?`
	uriChars = `([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})`
)

// formatRegex returns the regular expression of a format the compiler
// enforces.
func formatRegex(name string) (string, bool) {
	re, ok := formats[name]
	return re, ok
}

// formatLengths bounds formats whose RFCs limit lengths: a hostname has at
// most 253 characters (RFC 1123), an email address a local part of at most
// 64 octets and 254 in all (RFC 5321).
var formatLengths = map[string]*Expr{
	"hostname": Repeat(ByteRange(0x21, 0x7e), 1, 253),
	"email":    intersectExpr(Seq(Repeat(ByteRange(0x21, 0x7e), 1, 64), Lit("@"), Star(ByteRange(0x21, 0x7e))), Repeat(ByteRange(0x21, 0x7e), 3, 254)),
}

// formatDFAs and quotedFormats build each format's automaton (decoded
// content; JSON text with the quotes) once per process: the length-bounded
// ones have tens of thousands of states.
var formatDFAs, quotedFormats = func() (map[string]func() (*dfa, error), map[string]func() (*dfa, error)) {
	plain := map[string]func() (*dfa, error){}
	quoted := map[string]func() (*dfa, error){}
	for name, re := range formats {
		plain[name] = sync.OnceValues(func() (*dfa, error) {
			e, err := regexExpr(re)
			if err != nil {
				return nil, err
			}
			if l := formatLengths[name]; l != nil {
				e = intersectExpr(e, l)
			}
			return compileExpr(e, &budget{states: DefaultLimits.States})
		})
		quoted[name] = sync.OnceValues(func() (*dfa, error) {
			d, err := plain[name]()
			if err != nil {
				return nil, err
			}
			t, err := textDFA(d, &budget{states: DefaultLimits.States})
			if err != nil {
				return nil, err
			}
			return compileExpr(Seq(Lit(`"`), &Expr{op: opDFA, d: t}, Lit(`"`)), &budget{states: DefaultLimits.States})
		})
	}
	return plain, quoted
}()

func formatDFA(name string) (*dfa, error) { return buildFormat(formatDFAs, name) }

func quotedFormatDFA(name string) (*dfa, error) { return buildFormat(quotedFormats, name) }

// buildFormat builds format name's automaton from one of the tables.
func buildFormat(table map[string]func() (*dfa, error), name string) (*dfa, error) {
	f, ok := table[name]
	if !ok {
		return nil, fmt.Errorf("format %q is not enforced", name)
	}
	d, err := f()
	if err != nil {
		return nil, fmt.Errorf("format %q: %w", name, err)
	}
	return d, nil
}
