package toolcall

// jscan reads one JSON value a byte at a time and says when it ends, so a
// call's arguments can stream while the parser still knows where they stop
// (a "}" or a marker inside a string does not end them). It checks the
// whole RFC 8259 grammar but not UTF-8 validity.
type jscan struct {
	stack []byte // open containers, '{' or '['
	st    jstate
	inKey bool   // the string being read is an object key
	lit   string // what remains of true, false or null
	hex   int    // hex digits left of a \u escape
}

type jstate uint8

const (
	jValue      jstate = iota // a value may start (whitespace allowed)
	jArrFirst                 // after '[': a value or ']'
	jObjFirst                 // after '{': a key or '}'
	jObjKey                   // after ',' in an object: a key
	jColon                    // after a key
	jAfterValue               // after a value in a container: ',' or the closer
	jStr
	jEsc
	jHex
	jLit
	jNumSign // after '-': a digit
	jNumZero // a leading 0: no more integer digits
	jNumInt
	jNumDot // after '.': a digit
	jNumFrac
	jNumE     // after 'e': a sign or a digit
	jNumESign // after the exponent's sign: a digit
	jNumExp
)

type jres uint8

const (
	jMore      jres = iota // consumed; the value goes on
	jEnd                   // consumed; it ended the value
	jEndBefore             // not consumed: the value (a number) ended before it
	jErr                   // not JSON
)

func (j *jscan) reset() { *j = jscan{stack: j.stack[:0]} }

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// done is called when a value ends: it ends the whole value or returns to
// its container.
func (j *jscan) done() jres {
	if len(j.stack) == 0 {
		return jEnd
	}
	j.st = jAfterValue
	return jMore
}

func (j *jscan) step(c byte) jres {
	switch j.st {
	case jValue:
		switch {
		case isWS(c):
			return jMore
		case c == '"':
			j.st, j.inKey = jStr, false
		case c == '{':
			j.stack = append(j.stack, '{')
			j.st = jObjFirst
		case c == '[':
			j.stack = append(j.stack, '[')
			j.st = jArrFirst
		case c == '-':
			j.st = jNumSign
		case c == '0':
			j.st = jNumZero
		case c >= '1' && c <= '9':
			j.st = jNumInt
		case c == 't':
			j.st, j.lit = jLit, "rue"
		case c == 'f':
			j.st, j.lit = jLit, "alse"
		case c == 'n':
			j.st, j.lit = jLit, "ull"
		default:
			return jErr
		}
		return jMore
	case jArrFirst:
		if isWS(c) {
			return jMore
		}
		if c == ']' {
			j.stack = j.stack[:len(j.stack)-1]
			return j.done()
		}
		j.st = jValue
		return j.step(c)
	case jObjFirst, jObjKey:
		switch {
		case isWS(c):
			return jMore
		case c == '"':
			j.st, j.inKey = jStr, true
			return jMore
		case c == '}' && j.st == jObjFirst:
			j.stack = j.stack[:len(j.stack)-1]
			return j.done()
		}
		return jErr
	case jColon:
		switch {
		case isWS(c):
			return jMore
		case c == ':':
			j.st = jValue
			return jMore
		}
		return jErr
	case jAfterValue:
		top := j.stack[len(j.stack)-1]
		switch {
		case isWS(c):
			return jMore
		case c == ',':
			if top == '{' {
				j.st = jObjKey
			} else {
				j.st = jValue
			}
			return jMore
		case c == '}' && top == '{', c == ']' && top == '[':
			j.stack = j.stack[:len(j.stack)-1]
			return j.done()
		}
		return jErr
	case jStr:
		switch {
		case c == '"':
			if j.inKey {
				j.st = jColon
				return jMore
			}
			return j.done()
		case c == '\\':
			j.st = jEsc
		case c < 0x20:
			return jErr
		}
		return jMore
	case jEsc:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			j.st = jStr
		case 'u':
			j.st, j.hex = jHex, 4
		default:
			return jErr
		}
		return jMore
	case jHex:
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return jErr
		}
		if j.hex--; j.hex == 0 {
			j.st = jStr
		}
		return jMore
	case jLit:
		if c != j.lit[0] {
			return jErr
		}
		if j.lit = j.lit[1:]; j.lit == "" {
			return j.done()
		}
		return jMore
	case jNumSign:
		switch {
		case c == '0':
			j.st = jNumZero
		case c >= '1' && c <= '9':
			j.st = jNumInt
		default:
			return jErr
		}
		return jMore
	case jNumDot, jNumESign:
		if c < '0' || c > '9' {
			return jErr
		}
		if j.st == jNumDot {
			j.st = jNumFrac
		} else {
			j.st = jNumExp
		}
		return jMore
	case jNumE:
		switch {
		case c == '+' || c == '-':
			j.st = jNumESign
		case c >= '0' && c <= '9':
			j.st = jNumExp
		default:
			return jErr
		}
		return jMore
	}
	// A number that may end here: jNumZero, jNumInt, jNumFrac, jNumExp.
	switch {
	case c >= '0' && c <= '9' && j.st != jNumZero:
		return jMore
	case c == '.' && (j.st == jNumZero || j.st == jNumInt):
		j.st = jNumDot
		return jMore
	case (c == 'e' || c == 'E') && j.st != jNumExp:
		j.st = jNumE
		return jMore
	}
	// The number ended before c: only its delimiter tells.
	if len(j.stack) == 0 {
		return jEndBefore
	}
	j.st = jAfterValue
	return j.step(c)
}
