package toolcall

import (
	"encoding/json"
	"strings"
)

// Call is one tool call.
type Call struct {
	Name      string
	Arguments string // the JSON text as the model wrote it, trimmed of surrounding whitespace
}

// Reasoning says how the model marks reasoning; zero value: none.
type Reasoning struct {
	Open, Close string // "<think>", "</think>"
	// StartsInside: the prompt already opened the block (the template ended
	// the prompt with Open), so output is reasoning until Close, and all of
	// it when Close never comes. An Open the model writes anyway at the
	// start is dropped.
	StartsInside bool
}

// Kind is what an Event carries.
type Kind uint8

const (
	Content   Kind = iota // Text is content
	Thinking              // Text is reasoning
	CallBegin             // a call starts: Call and Name
	CallArgs              // Text is the next fragment of call Call's arguments
)

// Event is one piece of parsed output. Content/Thinking: Text. CallBegin:
// Call (0-based index of the call in this output) and Name. CallArgs: Call
// and Text (a fragment of the arguments' JSON text).
type Event struct {
	Kind Kind
	Text string
	Call int
	Name string
}

// Result is a whole output parsed.
type Result struct {
	Content, Reasoning string
	Calls              []Call
}

// Parse parses a whole output. It is the parser fed text in one piece, so
// it equals Collect of the events of any split.
func Parse(syntax *Syntax, r Reasoning, text string) Result {
	p := NewParser(syntax, r)
	ev := p.Feed(text)
	return Collect(append(ev, p.Close()...))
}

// Collect folds events into a Result.
func Collect(events []Event) Result {
	var r Result
	var content, reasoning strings.Builder
	var args []strings.Builder
	for _, e := range events {
		switch e.Kind {
		case Content:
			content.WriteString(e.Text)
		case Thinking:
			reasoning.WriteString(e.Text)
		case CallBegin:
			for len(r.Calls) <= e.Call {
				r.Calls = append(r.Calls, Call{})
				args = append(args, strings.Builder{})
			}
			r.Calls[e.Call].Name = e.Name
		case CallArgs:
			if e.Call < len(args) {
				args[e.Call].WriteString(e.Text)
			}
		}
	}
	for i := range r.Calls {
		r.Calls[i].Arguments = args[i].String()
	}
	r.Content, r.Reasoning = content.String(), reasoning.String()
	return r
}

type pstate uint8

const (
	sStart       pstate = iota // before anything but whitespace: Open may come
	sThink                     // in reasoning, watching for Close
	sText                      // content, watching for a call
	sArrOpen                   // after mistral's tag: '[' comes
	sObjOpen                   // a call's '{' comes
	sKey                       // in a call's object: a key (or '}' when empty)
	sKeyStr                    // in a key
	sColon                     // after a key
	sValue                     // after ':': a value starts
	sValueScan                 // in a value (vmode says what becomes of it)
	sAfterMember               // ',' or '}'
	sCloseTag                  // after a call's object: its optional close tag (hermes)
	sArrNext                   // after an element of mistral's array: ',' or ']'
)

type vmode uint8

const (
	vSkip    vmode = iota // a member we do not use
	vName                 // the name: kept to decode
	vCapture              // arguments before the name: kept until the call ends
	vStream               // arguments of a begun call: streamed as CallArgs
)

// Parser parses one output as it streams. It reads bytes; a split inside
// a UTF-8 character is fine (the bytes are kept in order), and events only
// split characters where the input did.
type Parser struct {
	syn     *Syntax
	r       Reasoning
	st      pstate
	matched int // bytes of the marker or tag being matched (Open, Close, tag, closeTag)

	// Whitespace rules (see doc.go): pend holds a run of whitespace whose
	// fate depends on what follows; dropWS drops whitespace at the start of
	// content or reasoning and right after a call.
	pend    []byte
	dropWS  bool
	sepOK   bool // right after a call: one skipSep may be dropped
	calls   int  // calls begun
	keys    []string
	buf     []byte // text read since the last point of no return; content if the call fails
	js      jscan
	raw     []byte // the key, name or captured arguments being read
	mode    vmode
	key     string
	nkeys   int
	comma   bool // a ',' was read: a key must come
	name    string
	hasName bool
	args    string
	hasArgs bool
	argKey  string
	begun   bool   // CallBegin was emitted for the current call
	apend   []byte // whitespace in streamed arguments not yet followed by a token

	out []Event
	cur Event  // the event being built; merged runs of one kind
	txt []byte // its text
	has bool   // cur is live
}

// NewParser returns a parser of one output. syntax nil: no tools (all
// text is content or reasoning).
func NewParser(syntax *Syntax, r Reasoning) *Parser {
	p := &Parser{syn: syntax, r: r, st: sText, dropWS: true}
	switch {
	case r.Open != "":
		p.st = sStart
	case r.StartsInside:
		p.st = sThink
	}
	return p
}

// Feed takes the next text and returns the events decided so far. Text
// that may be the start of a marker, a whitespace run and a call not yet
// begun are held back until decided.
func (p *Parser) Feed(text string) []Event {
	for i := 0; i < len(text); i++ {
		p.step(text[i])
	}
	return p.flush()
}

// Close ends the output and returns the remaining events: held-back text
// that was not a marker becomes content (or reasoning, in reasoning), a
// call not begun becomes content as written, a begun one keeps the
// arguments it got, and trailing whitespace is dropped.
func (p *Parser) Close() []Event {
	switch p.st {
	case sStart:
		if p.r.StartsInside {
			p.addText(Thinking, p.r.Open[:p.matched])
		} else {
			p.addText(Content, p.r.Open[:p.matched])
		}
	case sThink:
		p.addText(Thinking, p.r.Close[:p.matched])
	case sText:
		if p.syn != nil && p.syn.tag != "" {
			p.addText(Content, p.syn.tag[:p.matched])
		}
	default:
		p.addText(Content, string(p.buf))
	}
	p.st, p.matched, p.buf, p.pend = sText, 0, nil, nil
	return p.flush()
}

func (p *Parser) flush() []Event {
	p.end()
	out := p.out
	p.out = nil
	return out
}

// end finishes the event being built.
func (p *Parser) end() {
	if p.has {
		p.cur.Text = string(p.txt)
		p.out = append(p.out, p.cur)
		p.txt, p.has = p.txt[:0], false
	}
}

// emit appends text of kind k (call for CallArgs), merged into the event
// being built when it is of the same kind.
func (p *Parser) emit(k Kind, call int, text ...[]byte) {
	if p.has && (p.cur.Kind != k || p.cur.Call != call) {
		p.end()
	}
	if !p.has {
		p.cur, p.has = Event{Kind: k, Call: call}, true
	}
	for _, t := range text {
		p.txt = append(p.txt, t...)
	}
}

// addText adds content or reasoning under the whitespace rules: dropped at
// the start, a trailing run held in pend until something follows it.
func (p *Parser) addText(k Kind, s string) {
	if p.dropWS {
		s = strings.TrimLeft(s, " \t\r\n")
		if s == "" {
			return
		}
		p.dropWS = false
	}
	j := len(s) // past the last byte that is not whitespace
	for j > 0 && isWS(s[j-1]) {
		j--
	}
	if j == 0 {
		p.pend = append(p.pend, s...)
		return
	}
	p.emit(k, 0, p.pend, []byte(s[:j]))
	p.pend = append(p.pend[:0], s[j:]...)
}

// replay steps through held bytes again after a decision that they are
// not what they might have been.
func (p *Parser) replay(s string) {
	for i := 0; i < len(s); i++ {
		p.step(s[i])
	}
}

// fail gives up the current call at c: what was read since the last point
// of no return becomes content, and c is read again as text.
func (p *Parser) fail(c byte) {
	p.abandon()
	p.step(c)
}

// abandon gives up the current call: its text read so far becomes content.
func (p *Parser) abandon() {
	p.addText(Content, string(p.buf))
	p.buf = p.buf[:0]
	p.resetCall()
	p.st = sText
}

func (p *Parser) resetCall() {
	p.raw, p.key, p.nkeys, p.comma = p.raw[:0], "", 0, false
	p.name, p.hasName, p.args, p.hasArgs, p.argKey, p.begun = "", false, "", false, "", false
	p.apend = p.apend[:0]
}

// begin emits CallBegin: from here the call stands whatever follows.
func (p *Parser) begin() {
	p.pend, p.dropWS, p.sepOK = p.pend[:0], true, false
	p.buf = p.buf[:0]
	p.end()
	p.out = append(p.out, Event{Kind: CallBegin, Call: p.calls, Name: p.name})
	p.keys = append(p.keys, p.argKey)
	p.calls++
	p.begun = true
}

// complete ends a call whose syntax ended.
func (p *Parser) complete() {
	if !p.begun {
		if !p.hasName || !p.hasArgs {
			p.abandon()
			return
		}
		p.begin()
		p.emit(CallArgs, p.calls-1, []byte(p.args))
	}
	p.buf = p.buf[:0]
	p.resetCall()
	p.dropWS, p.sepOK = true, true
	switch {
	case p.syn.array:
		p.st = sArrNext
	case p.syn.closeTag != "":
		p.st, p.matched = sCloseTag, 0
	default:
		p.st = sText
	}
}

func (p *Parser) step(c byte) {
	switch p.st {
	case sStart:
		open := p.r.Open
		switch {
		case p.matched == 0 && isWS(c):
		case c == open[p.matched]:
			if p.matched++; p.matched == len(open) {
				p.st, p.matched, p.dropWS = sThink, 0, true
			}
		default:
			held := open[:p.matched] + string([]byte{c})
			p.st, p.matched = sText, 0
			if p.r.StartsInside {
				p.st = sThink
			}
			p.replay(held)
		}
	case sThink:
		cl := p.r.Close
		switch {
		case cl != "" && c == cl[p.matched]:
			if p.matched++; p.matched == len(cl) {
				p.st, p.matched, p.pend, p.dropWS = sText, 0, p.pend[:0], true
			}
		case p.matched > 0:
			held := cl[:p.matched] + string([]byte{c})
			p.matched = 0
			p.addText(Thinking, held[:1])
			p.replay(held[1:])
		default:
			p.addText(Thinking, string([]byte{c}))
		}
	case sText:
		p.text(c)
	case sArrOpen, sObjOpen:
		want := byte('{')
		if p.st == sArrOpen {
			want = '['
		}
		switch {
		case isWS(c):
		case c == want:
			if p.st == sArrOpen {
				p.st = sObjOpen
			} else {
				p.st = sKey
			}
		default:
			p.fail(c)
			return
		}
		p.buf = append(p.buf, c)
	case sKey:
		switch {
		case isWS(c):
		case c == '"':
			p.js.reset()
			p.js.st, p.js.inKey = jStr, false
			p.raw = append(p.raw[:0], c)
			p.st = sKeyStr
		case c == '}' && p.nkeys == 0 && !p.comma:
			p.buf = append(p.buf, c)
			p.complete() // the object's '}' ends the call
			return
		default:
			p.fail(c)
			return
		}
		p.buf = append(p.buf, c)
	case sKeyStr:
		switch p.js.step(c) {
		case jErr:
			p.fail(c)
			return
		case jEnd:
			p.buf, p.raw = append(p.buf, c), append(p.raw, c)
			p.key = ""
			_ = json.Unmarshal(p.raw, &p.key) // the scanner checked it
			if p.nkeys++; p.nkeys == 1 && p.key != "name" && p.key != "arguments" && p.key != "parameters" {
				p.abandon() // not a call: release the text at once
				return
			}
			p.st = sColon
			return
		}
		p.buf, p.raw = append(p.buf, c), append(p.raw, c)
	case sColon:
		switch {
		case isWS(c):
		case c == ':':
			p.st = sValue
		default:
			p.fail(c)
			return
		}
		p.buf = append(p.buf, c)
	case sValue:
		if isWS(c) {
			p.buf = append(p.buf, c)
			return
		}
		p.valueStart(c)
	case sValueScan:
		p.value(c)
	case sAfterMember:
		switch {
		case isWS(c):
		case c == ',':
			p.st, p.comma = sKey, true
		case c == '}':
			p.buf = append(p.buf, c)
			p.complete() // the object's '}' ends the call
			return
		default:
			p.fail(c)
			return
		}
		p.buf = append(p.buf, c)
	case sCloseTag:
		// The call is complete; its close tag is expected but not needed.
		// Anything else is read again as text (the whitespace before it is
		// dropped after a call, a partial tag may start another call).
		tag := p.syn.closeTag
		switch {
		case p.matched == 0 && isWS(c):
		case c == tag[p.matched]:
			if p.matched++; p.matched == len(tag) {
				p.st, p.matched, p.buf = sText, 0, p.buf[:0]
				return
			}
		default:
			held := string(p.buf) + string([]byte{c})
			p.st, p.matched, p.buf = sText, 0, p.buf[:0]
			p.replay(held)
			return
		}
		p.buf = append(p.buf, c)
	case sArrNext:
		switch {
		case isWS(c):
		case c == ',':
			p.st = sObjOpen
		case c == ']':
			p.buf = p.buf[:0]
			p.st = sText
			return
		default:
			p.fail(c)
			return
		}
		p.buf = append(p.buf, c)
	}
}

// text reads c in content, watching for the start of a call.
func (p *Parser) text(c byte) {
	syn := p.syn
	if syn == nil {
		p.addText(Content, string([]byte{c}))
		return
	}
	if p.sepOK && !isWS(c) {
		p.sepOK = false
		if syn.skipSep != 0 && c == syn.skipSep && p.dropWS {
			return
		}
	}
	if syn.tag == "" {
		if c == '{' {
			p.buf = append(p.buf[:0], c)
			p.st = sKey
			return
		}
		p.addText(Content, string([]byte{c}))
		return
	}
	tag := syn.tag
	switch {
	case c == tag[p.matched]:
		if p.matched++; p.matched == len(tag) {
			p.buf = append(p.buf[:0], tag...)
			p.matched = 0
			if syn.array {
				p.st = sArrOpen
			} else {
				p.st = sObjOpen
			}
		}
	case p.matched > 0:
		held := tag[:p.matched] + string([]byte{c})
		p.matched = 0
		p.addText(Content, held[:1])
		p.replay(held[1:])
	default:
		p.addText(Content, string([]byte{c}))
	}
}

// valueStart reads the first byte of a member's value and decides what
// becomes of the value by its key.
func (p *Parser) valueStart(c byte) {
	p.js.reset()
	if p.js.step(c) == jErr {
		p.fail(c)
		return
	}
	p.st, p.mode = sValueScan, vSkip
	switch {
	case p.key == "name" && !p.hasName:
		if c != '"' {
			p.fail(c)
			return
		}
		p.mode = vName
	case (p.key == "arguments" || p.key == "parameters") && !p.hasArgs:
		p.hasArgs, p.argKey = true, p.key
		if p.hasName {
			// The name is known and the arguments start: the call begins
			// and its arguments stream from here.
			p.begin()
			p.mode = vStream
			p.emit(CallArgs, p.calls-1, []byte{c})
			return
		}
		p.mode = vCapture
	}
	// No value ends at its first byte (a number ends at the byte after it).
	p.buf = append(p.buf, c)
	p.raw = append(p.raw[:0], c)
}

// value reads the next byte of a member's value.
func (p *Parser) value(c byte) {
	r := p.js.step(c)
	switch r {
	case jErr:
		p.fail(c) // a begun call keeps the arguments it got
		return
	case jEndBefore:
		p.valueEnd(r)
		p.step(c)
		return
	}
	if p.mode == vStream {
		if isWS(c) {
			// Held until more follows, so arguments cut short still end
			// trimmed.
			p.apend = append(p.apend, c)
		} else {
			p.emit(CallArgs, p.calls-1, p.apend, []byte{c})
			p.apend = p.apend[:0]
		}
	} else {
		p.buf = append(p.buf, c)
		p.raw = append(p.raw, c)
	}
	p.valueEnd(r)
}

// valueEnd acts on the end of a member's value.
func (p *Parser) valueEnd(r jres) {
	if r == jMore {
		return
	}
	p.st = sAfterMember
	switch p.mode {
	case vName:
		p.name = ""
		_ = json.Unmarshal(p.raw, &p.name)
		if p.name == "" {
			p.abandon()
			return
		}
		p.hasName = true
	case vCapture:
		p.args = string(p.raw)
	}
}
