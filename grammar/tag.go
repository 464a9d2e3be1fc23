package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// TagStructure is one tagged value: Begin, then a JSON text valid against
// Schema, then End, with nothing between them.
type TagStructure struct {
	Begin string
	// Schema is a JSON Schema (what CompileJSONSchema accepts); nil or
	// empty: any JSON value.
	Schema []byte
	End    string
}

// TagText says where a structural tag allows free text.
type TagText uint8

const (
	// TagTextAnywhere allows free text before, between and after the
	// structures (xgrammar's structural tag).
	TagTextAnywhere TagText = iota
	// TagTextBefore allows free text only before the first structure;
	// after it come only structures separated by optional whitespace
	// ([ \t\n]*), and the output ends after the last.
	TagTextBefore
	// TagTextNone allows no free text at all: structures separated by
	// optional whitespace.
	TagTextNone
)

var tagTextNames = [...]string{TagTextAnywhere: "anywhere", TagTextBefore: "before", TagTextNone: "none"}

func (t TagText) String() string {
	if int(t) < len(tagTextNames) {
		return tagTextNames[t]
	}
	return fmt.Sprintf("TagText(%d)", t)
}

// StructuralTag is an output made of free text and tagged JSON values (tool
// calls: `<tool_call>{"name": "f", "arguments": ` + a value valid against
// f's parameters + `}</tool_call>`).
//
// Free text is any byte string (no UTF-8 check) that contains none of the
// triggers: in free text, an occurrence of a trigger can only be the start
// of a structure whose Begin starts with that trigger.
type StructuralTag struct {
	Structures []TagStructure
	// Triggers start structures in free text. Every structure's Begin must
	// start with one of them when free text is allowed; with TagTextNone
	// they may be empty.
	Triggers []string
	Text     TagText
	// Min and Max bound the number of structures (Max 0: no bound).
	Min, Max int
	// ReasoningEnd, when set, lets the output first hold any text not
	// containing ReasoningEnd, then ReasoningEnd, then what the fields above
	// say (a reasoning model's <think>…</think> before the constrained
	// part).
	ReasoningEnd string
}

// maxTagTextBytes bounds the bytes of all triggers together, and of
// ReasoningEnd: the free-text automaton has a state per byte, and building
// it keeps a 256-entry row per state.
const maxTagTextBytes = 4096

// CompileStructuralTag compiles t into a grammar whose language is the
// outputs t describes. The structures' schemas are compiled as
// CompileJSONSchema compiles them (opt's whitespace and IntegerPointZero
// apply inside them) into the same grammar, within one budget of
// opt.Limits. Invalid tags are refused with an error naming the field
// (structures[2].schema, triggers[0], min, ...).
func CompileStructuralTag(t StructuralTag, opt JSONOptions) (*Grammar, error) {
	if opt.Limits.States <= 0 {
		opt.Limits = DefaultLimits
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	// Every schema is read and checked before anything is built, so a bad
	// one costs no compilation.
	docs := make([]*schemaDoc, len(t.Structures))
	for i, s := range t.Structures {
		if len(s.Schema) == 0 {
			continue
		}
		d, err := parseSchema(s.Schema)
		if err != nil {
			return nil, fmt.Errorf("structures[%d].schema: %w", i, err)
		}
		docs[i] = &d
	}
	var b Builder
	bud := newBudget(opt.Limits)
	c := newJSONCompiler(opt, &b, bud)
	root := b.Declare("structural_tag")
	vals := make([]RuleID, len(t.Structures))
	structs := make([]*Expr, len(t.Structures))
	for i, s := range t.Structures {
		var e *Expr
		if docs[i] == nil {
			e = c.anyValue()
		} else {
			var err error
			if e, err = c.compileDoc(*docs[i]); err != nil {
				return nil, fmt.Errorf("structures[%d].schema: %w", i, err)
			}
		}
		// A rule per value, so that a schema nothing satisfies shows after
		// the build as an unreachable rule.
		vals[i] = b.Rule(fmt.Sprintf("structures[%d]", i), e)
		structs[i] = Seq(Lit(s.Begin), Ref(vals[i]), Lit(s.End))
	}
	st := Alt(structs...)
	hi := t.Max
	if hi == 0 {
		hi = -1
	}
	var body *Expr
	switch t.Text {
	case TagTextAnywhere:
		text := GraphExpr(textGraph(t.Triggers))
		if hi < 0 || hi == 1 {
			// Inline, so that the text and the Begins determinize
			// together: one parse, which a read trigger moves into a Begin.
			body = Seq(text, Repeat(Seq(st, text), t.Min, hi))
			break
		}
		// A bound above one would copy every Begin per structure; a call
		// costs one state, at the price of a second parse while a trigger
		// is read (text, or the start of a structure).
		body = Seq(text, Repeat(Seq(Ref(b.Rule("structure", st)), text), t.Min, hi))
	case TagTextBefore:
		// The first structure inline, so that the text and the Begins
		// determinize together (a trigger read ends the text); the others
		// follow whitespace only and call one shared rule, so a large Max
		// costs a few states per structure instead of a copy of every Begin.
		rest := st
		if hi != 1 {
			rest = Ref(b.Rule("structure", st))
		}
		body = Seq(GraphExpr(textGraph(t.Triggers)), tagItems(st, rest, t.Min, hi))
	case TagTextNone:
		r := Ref(b.Rule("structure", st))
		body = tagItems(r, r, t.Min, hi)
	}
	if t.ReasoningEnd != "" {
		body = Seq(GraphExpr(textGraph([]string{t.ReasoningEnd})), Lit(t.ReasoningEnd), body)
	}
	b.Define(root, body)
	g, err := b.buildWith(root, opt.Limits, bud)
	if errors.Is(err, ErrEmpty) {
		// Free text and the reasoning part are never empty languages, so
		// the whole is empty only when structures are required and no
		// structure can be written: every schema matches nothing.
		return nil, fmt.Errorf("structures[0].schema: no JSON value satisfies the schema: %w", ErrEmpty)
	}
	if err != nil {
		return nil, fmt.Errorf("structural tag: %w", err)
	}
	for i, r := range vals {
		// Build drops the calls to rules that match nothing, which leaves
		// them unreachable.
		if g.ruleStart[r] < 0 {
			return nil, fmt.Errorf("structures[%d].schema: no JSON value satisfies the schema: %w", i, ErrEmpty)
		}
	}
	return g, nil
}

// tagItems is lo to hi (hi < 0: no bound) structures separated by
// optional whitespace: first is the first structure's expression, st the
// others' (the same language).
func tagItems(first, st *Expr, lo, hi int) *Expr {
	ws := Star(bytesExpr(setOf(' ', '\t', '\n')))
	restHi := -1
	if hi > 0 {
		restHi = hi - 1
	}
	some := Seq(first, Repeat(Seq(ws, st), max(lo-1, 0), restHi))
	if lo == 0 {
		return Alt(Empty(), some)
	}
	return some
}

// validate checks t's fields, naming the first bad one.
func (t StructuralTag) validate() error {
	if len(t.Structures) == 0 {
		return errors.New("structures: the list is empty")
	}
	if t.Text > TagTextNone {
		return fmt.Errorf("text: %d is not a TagText", t.Text)
	}
	if t.Min < 0 {
		return fmt.Errorf("min: %d is negative", t.Min)
	}
	if t.Max < 0 {
		return fmt.Errorf("max: %d is negative", t.Max)
	}
	if t.Max > 0 && t.Min > t.Max {
		return fmt.Errorf("min: %d is more than max (%d)", t.Min, t.Max)
	}
	total := 0
	for i, tr := range t.Triggers {
		if tr == "" {
			return fmt.Errorf("triggers[%d]: the trigger is empty", i)
		}
		total += len(tr)
	}
	if total > maxTagTextBytes {
		return fmt.Errorf("triggers: %d bytes in all, more than the limit of %d: %w", total, maxTagTextBytes, errTooLarge)
	}
	if len(t.ReasoningEnd) > maxTagTextBytes {
		return fmt.Errorf("reasoning_end: %d bytes, more than the limit of %d: %w", len(t.ReasoningEnd), maxTagTextBytes, errTooLarge)
	}
	for i, s := range t.Structures {
		if s.Begin == "" && t.Text != TagTextNone {
			// Free text would end at no trigger and the structure could
			// begin anywhere.
			return fmt.Errorf("structures[%d].begin: empty, but free text is allowed (text %q) and a structure must begin with a trigger", i, t.Text)
		}
		if t.Text != TagTextNone && !slices.ContainsFunc(t.Triggers, func(tr string) bool { return strings.HasPrefix(s.Begin, tr) }) {
			return fmt.Errorf("structures[%d].begin: %q starts with none of the triggers %q (free text is allowed, text %q, so a structure must begin with a trigger)", i, s.Begin, t.Triggers, t.Text)
		}
	}
	return nil
}

// textGraph is the automaton of free text: the byte strings that contain
// none of pats (non-empty). It is Aho–Corasick's: a state is the longest
// suffix of the text read that is a prefix of a pattern, and the states
// where some pattern has just been read are left out. Every state accepts.
func textGraph(pats []string) *Graph {
	// The trie of the patterns; node 0 is the empty prefix.
	type node struct {
		next map[byte]int32
		fail int32
		out  bool // some pattern is a suffix of this prefix
	}
	nodes := []node{{next: map[byte]int32{}}}
	for _, p := range pats {
		n := int32(0)
		for i := 0; i < len(p); i++ {
			c := p[i]
			m, ok := nodes[n].next[c]
			if !ok {
				m = int32(len(nodes))
				nodes = append(nodes, node{next: map[byte]int32{}})
				nodes[n].next[c] = m
			}
			n = m
		}
		nodes[n].out = true
	}
	// Breadth-first, each node's full transition row from its failure
	// node's (which is shallower, so already done).
	rows := make([][256]int32, len(nodes))
	order := []int32{0}
	for c := range 256 {
		if m, ok := nodes[0].next[byte(c)]; ok {
			rows[0][c] = m
		}
	}
	for _, m := range nodes[0].next {
		order = append(order, m)
	}
	slices.Sort(order[1:])
	for k := 1; k < len(order); k++ {
		n := order[k]
		f := nodes[n].fail
		nodes[n].out = nodes[n].out || nodes[f].out
		rows[n] = rows[f]
		kids := make([]int32, 0, len(nodes[n].next))
		for c, m := range nodes[n].next {
			rows[n][c] = m
			// The failure of n·c is where n's failure goes on c.
			nodes[m].fail = rows[f][c]
			kids = append(kids, m)
		}
		slices.Sort(kids)
		order = append(order, kids...)
	}
	// Number the states that read no pattern; the others are dead.
	id := make([]int, len(nodes))
	g := &Graph{}
	for _, n := range order {
		if nodes[n].out {
			id[n] = -1
			continue
		}
		id[n] = g.States
		g.Accept = append(g.Accept, g.States)
		g.States++
	}
	for _, n := range order {
		if id[n] < 0 {
			continue
		}
		var targets []int32
		sets := map[int32]*byteSet{}
		for c := range 256 {
			m := rows[n][c]
			if id[m] < 0 {
				continue
			}
			s, ok := sets[m]
			if !ok {
				s = &byteSet{}
				sets[m] = s
				targets = append(targets, m)
			}
			s.add(byte(c))
		}
		for _, m := range targets {
			g.Edges = append(g.Edges, GraphEdge{From: id[n], To: id[m], E: bytesExpr(*sets[m])})
		}
	}
	return g
}

// ParseStructuralTag reads a structural tag in xgrammar's JSON form
// (vLLM's structured_outputs.structural_tag):
//
//	{"type": "structural_tag",
//	 "structures": [{"begin": "<f>", "schema": {...}, "end": "</f>"}],
//	 "triggers": ["<f"]}
//
// which means TagTextAnywhere, Min 0 and Max 0, plus turnstile's optional
// members "text" ("anywhere", "before" or "none"), "min", "max" and
// "reasoning_end". "type" may be left out; "schema" too (any JSON value).
// A schema is kept compacted. Unknown members are an error naming them.
// The tag is not validated (CompileStructuralTag does that).
func ParseStructuralTag(src []byte) (StructuralTag, error) {
	var t StructuralTag
	top, err := members(src, "structural tag", "type", "structures", "triggers", "text", "min", "max", "reasoning_end")
	if err != nil {
		return t, err
	}
	if raw, ok := top["type"]; ok {
		var ty string
		if err := json.Unmarshal(raw, &ty); err != nil || ty != "structural_tag" {
			return t, fmt.Errorf("type: %s is not \"structural_tag\"", raw)
		}
	}
	raw, ok := top["structures"]
	if !ok {
		return t, errors.New("structures: missing")
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return t, fmt.Errorf("structures: not an array of objects: %w", err)
	}
	for i, r := range list {
		at := fmt.Sprintf("structures[%d]", i)
		m, err := members(r, at, "begin", "schema", "end")
		if err != nil {
			return t, err
		}
		var s TagStructure
		for _, f := range []struct {
			name string
			dst  *string
		}{{"begin", &s.Begin}, {"end", &s.End}} {
			v, ok := m[f.name]
			if !ok {
				return t, fmt.Errorf("%s.%s: missing", at, f.name)
			}
			if err := json.Unmarshal(v, f.dst); err != nil {
				return t, fmt.Errorf("%s.%s: not a string: %w", at, f.name, err)
			}
		}
		if v, ok := m["schema"]; ok {
			var buf bytes.Buffer
			if err := json.Compact(&buf, v); err != nil {
				return t, fmt.Errorf("%s.schema: %w", at, err)
			}
			s.Schema = buf.Bytes()
		}
		t.Structures = append(t.Structures, s)
	}
	if v, ok := top["triggers"]; ok {
		if err := json.Unmarshal(v, &t.Triggers); err != nil {
			return t, fmt.Errorf("triggers: not an array of strings: %w", err)
		}
		if len(t.Triggers) == 0 {
			t.Triggers = nil
		}
	}
	if v, ok := top["text"]; ok {
		var s string
		_ = json.Unmarshal(v, &s)
		i := slices.Index(tagTextNames[:], s)
		if i < 0 {
			return t, fmt.Errorf("text: %s is not one of \"anywhere\", \"before\", \"none\"", v)
		}
		t.Text = TagText(i)
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"min", &t.Min}, {"max", &t.Max}} {
		if v, ok := top[f.name]; ok {
			if err := json.Unmarshal(v, f.dst); err != nil {
				return t, fmt.Errorf("%s: not an integer: %s", f.name, v)
			}
		}
	}
	if v, ok := top["reasoning_end"]; ok {
		if err := json.Unmarshal(v, &t.ReasoningEnd); err != nil {
			return t, fmt.Errorf("reasoning_end: not a string: %w", err)
		}
	}
	return t, nil
}

// members decodes a JSON object into its members, refusing members not
// in known (named in the error, at where).
func members(src []byte, where string, known ...string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(src, &m); err != nil || m == nil {
		if err == nil {
			err = errors.New("null")
		}
		return nil, fmt.Errorf("%s: not a JSON object: %w", where, err)
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(known, k) {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("%s: unknown member %s", where, strings.Join(unknown, ", "))
	}
	return m, nil
}

// JSON writes t in ParseStructuralTag's form, xgrammar's members first and
// turnstile's only where they differ from xgrammar's meaning (so a tag
// xgrammar can read is written as xgrammar writes it). Schemas are written
// compacted; one that is not valid JSON is written as a string (which
// CompileStructuralTag would refuse, as it refuses the schema). Strings
// that are not UTF-8 do not survive the trip (JSON strings are Unicode).
func (t StructuralTag) JSON() []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":"structural_tag","structures":[`)
	for i, s := range t.Structures {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"begin":`)
		writeJSONString(&b, s.Begin)
		if len(s.Schema) > 0 {
			b.WriteString(`,"schema":`)
			if err := json.Compact(&b, s.Schema); err != nil {
				writeJSONString(&b, string(s.Schema))
			}
		}
		b.WriteString(`,"end":`)
		writeJSONString(&b, s.End)
		b.WriteByte('}')
	}
	b.WriteString(`],"triggers":[`)
	for i, tr := range t.Triggers {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, tr)
	}
	b.WriteByte(']')
	if t.Text != TagTextAnywhere {
		b.WriteString(`,"text":`)
		writeJSONString(&b, t.Text.String())
	}
	if t.Min != 0 {
		fmt.Fprintf(&b, `,"min":%d`, t.Min)
	}
	if t.Max != 0 {
		fmt.Fprintf(&b, `,"max":%d`, t.Max)
	}
	if t.ReasoningEnd != "" {
		b.WriteString(`,"reasoning_end":`)
		writeJSONString(&b, t.ReasoningEnd)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// writeJSONString writes s as a JSON string, leaving <, > and & as they
// are (tags are full of them).
func writeJSONString(b *bytes.Buffer, s string) {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)         // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}
