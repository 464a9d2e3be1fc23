package grammar

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
	"uri":           `[A-Za-z][A-Za-z0-9+.\-]*:` + uriChars + `*`,
	"uri-reference": uriChars + `*`,
	"iri":           `[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20<>"{}|\\^` + "`" + `]*`,
	"iri-reference": `[^\x00-\x20<>"{}|\\^` + "`" + `]*`,
	"uri-template":  `([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]|\{[^{}]*\})*`,
	// ISO 8601 duration as RFC 3339 appendix A has it.
	"duration":              `P(([0-9]+D)?(T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S))?|[0-9]+Y([0-9]+M([0-9]+D)?)?(T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S))?|[0-9]+M([0-9]+D)?(T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S))?|[0-9]+W)`,
	"json-pointer":          `(/([^/~]|~[01])*)*`,
	"relative-json-pointer": `(0|[1-9][0-9]*)(#|(/([^/~]|~[01])*)*)`,
}

const (
	dateRE = `([0-9]{4}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])` +
		`|[0-9]{4}-(0[469]|11)-(0[1-9]|[12][0-9]|30)` +
		`|[0-9]{4}-02-(0[1-9]|1[0-9]|2[0-8])` +
		`|([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)`
	timeRE     = `([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+\-]([01][0-9]|2[0-3]):[0-5][0-9])`
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
	uriChars = `([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})`
)

// formatRegex returns the regular expression of a format the compiler
// enforces.
func formatRegex(name string) (string, bool) {
	re, ok := formats[name]
	return re, ok
}
