package grammar

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSONOptions shape the grammar of a JSON Schema.
type JSONOptions struct {
	Whitespace Whitespace
	Limits     Limits
	// IntegerPointZero lets an integer be written with one ".0" where the
	// schema's draft counts 1.0 as an integer (6 and later): for checking
	// instances as a validator does (bench schema, the test suites). Off,
	// integers are written plainly, as a model should write them (as
	// OpenAI's and vLLM's structured outputs do): every output is valid
	// either way.
	IntegerPointZero bool
}

// MaxSchemaBytes bounds a schema's size.
const MaxSchemaBytes = 4 << 20

// schemaURL is where a compiled schema lives for the library's resolver.
const schemaURL = "file:///turnstile/schema.json"

// CompileJSONSchema compiles a JSON Schema (draft 4, 6, 7, 2019-09 or
// 2020-12; $schema picks the draft, otherwise the keywords do) into a
// grammar of the JSON texts that satisfy it: object properties in the
// order of `properties`, other members anywhere between them, whitespace
// as opt.Whitespace says. The schema is first checked against its
// metaschema. A keyword the compiler cannot turn into a grammar exactly
// is refused with an error naming it and its JSON pointer; formats the
// compiler does not know are annotations, as the specification says.
func CompileJSONSchema(schema []byte, opt JSONOptions) (*Grammar, error) {
	if opt.Limits.States <= 0 {
		opt.Limits = DefaultLimits
	}
	doc, err := parseSchema(schema)
	if err != nil {
		return nil, err
	}
	var b Builder
	c := newJSONCompiler(opt, &b, newBudget(opt.Limits))
	r := b.Declare("root")
	e, err := c.compileDoc(doc)
	if err != nil {
		return nil, err
	}
	b.Define(r, e)
	g, err := b.buildWith(r, opt.Limits, c.bud)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return g, nil
}

// schemaDoc is a schema document read and checked: the ordered tree
// (decodeOrdered's) for property order, and the loaded schema.
type schemaDoc struct {
	raw  any
	root *jsonschema.Schema
}

// parseSchema checks a schema's size, decodes it keeping member order and
// loads it (LoadSchema), with CompileJSONSchema's errors.
func parseSchema(schema []byte) (schemaDoc, error) {
	if len(schema) > MaxSchemaBytes {
		return schemaDoc{}, fmt.Errorf("schema has %d bytes, more than the limit of %d: %w", len(schema), MaxSchemaBytes, errTooLarge)
	}
	raw, err := decodeOrdered(schema)
	if err != nil {
		return schemaDoc{}, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	root, err := LoadSchema(schema)
	if err != nil {
		return schemaDoc{}, err
	}
	return schemaDoc{raw, root}, nil
}

// compileDoc compiles one schema document into c's builder and returns
// the expression of the JSON texts that satisfy it. One compiler may
// compile several documents into one grammar (a structural tag's): the
// rules it shares (any value, strings, formats, indentation) are declared
// once, and a schema's own rules are keyed by its loaded nodes, which no
// two documents share.
func (c *jsonCompiler) compileDoc(doc schemaDoc) (*Expr, error) {
	c.raw = doc.raw
	return c.compileList([]sref{{s: doc.root}})
}

// LoadSchema checks a JSON Schema against its metaschema and resolves its
// references with github.com/santhosh-tekuri/jsonschema; references to
// other documents are refused. Patterns are ECMA-262 regular expressions
// translated to RE2 (ECMAToRE2). The returned schema validates instances
// (with format assertions on).
func LoadSchema(schema []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noRemote{})
	c.UseRegexpEngine(ecmaRegexp)
	c.AssertFormat()
	c.DefaultDraft(guessDraft(doc))
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		// The library's messages name our internal URL; keep the cause.
		return nil, &schemaError{"invalid schema: " + strings.ReplaceAll(err.Error(), schemaURL, ""), err}
	}
	return s, nil
}

// schemaError rewords an error and keeps it as the cause.
type schemaError struct {
	msg string
	err error
}

func (e *schemaError) Error() string { return e.msg }
func (e *schemaError) Unwrap() error { return e.err }

type noRemote struct{}

func (noRemote) Load(u string) (any, error) {
	return nil, fmt.Errorf("reference to another document %q is %w (inline it under $defs)", u, errUnsupported)
}

func ecmaRegexp(s string) (jsonschema.Regexp, error) {
	t, err := ECMAToRE2(s)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(t)
	if err != nil {
		return nil, err
	}
	return ecmaRE{re, s}, nil
}

// ecmaRE keeps the pattern's source, which the compiler reads back.
type ecmaRE struct {
	*regexp.Regexp
	src string
}

func (r ecmaRE) String() string { return r.src }

// guessDraft picks the draft of a schema without $schema from its
// keywords: 2019-09/2020-12 words mean 2020-12, draft-4..7 forms
// (tuple items, dependencies, boolean exclusiveMinimum, definitions)
// mean draft 7 (draft 4 for the boolean bounds), and 2020-12 otherwise.
func guessDraft(doc any) *jsonschema.Draft {
	newer, older, draft4 := false, false, false
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		if depth > 64 {
			return
		}
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				switch k {
				case "prefixItems", "$defs", "dependentRequired", "dependentSchemas", "unevaluatedProperties", "unevaluatedItems", "$anchor", "$dynamicRef", "$dynamicAnchor":
					newer = true
				case "dependencies", "definitions", "additionalItems":
					older = true
				case "items":
					if _, ok := e.([]any); ok {
						older = true
					}
				case "exclusiveMinimum", "exclusiveMaximum":
					if _, ok := e.(bool); ok {
						draft4 = true
					}
				}
				walk(e, depth+1)
			}
		case []any:
			for _, e := range x {
				walk(e, depth+1)
			}
		}
	}
	walk(doc, 0)
	switch {
	case draft4:
		return jsonschema.Draft4
	case older && !newer:
		return jsonschema.Draft7
	}
	return jsonschema.Draft2020
}

// typeMask is a set of JSON types; tNum stands for numbers that are not
// integers, so "number" is tInt|tNum.
type typeMask uint8

const (
	tNull typeMask = 1 << iota
	tBool
	tInt
	tNum
	tStr
	tArr
	tObj
	tAll = tNull | tBool | tInt | tNum | tStr | tArr | tObj
)

func maskOf(t *jsonschema.Types) typeMask {
	if t == nil {
		return tAll
	}
	var m typeMask
	for _, s := range t.ToStrings() {
		switch s {
		case "null":
			m |= tNull
		case "boolean":
			m |= tBool
		case "integer":
			m |= tInt
		case "number":
			m |= tInt | tNum
		case "string":
			m |= tStr
		case "array":
			m |= tArr
		case "object":
			m |= tObj
		}
	}
	return m
}

// sref is a schema taken positively or negated (it must not hold).
type sref struct {
	s   *jsonschema.Schema
	neg bool
}

// conj is the conjunction of the schemas that apply at one place of a
// document, keyword by keyword, with the disjunctions (anyOf, oneOf,
// if/then/else, dependencies, negated conjunctions) kept as groups to
// distribute when emitting.
type conj struct {
	srcs  []sref
	ptr   string // the first schema's pointer, for errors
	draft int    // the first schema's draft (4, 6, 7, 2019, 2020)
	never bool
	types typeMask

	hasValues bool
	values    []any
	notValues []any

	minLen, maxLen        int
	patterns, notPatterns []string
	formats, notFormats   []string

	lo, hi                 *numBound
	multiples, notMultiple []*big.Rat

	arrParts           []arrPart
	unique             bool
	minItems, maxItems int
	contains           []sref
	minContains        int

	objParts         []objPart
	names            []string // property names in order of first appearance
	required         []string
	forbidden        []string
	propertyNames    []sref
	minProps, maxPro int

	groups [][]alt
}

// arrPart is one schema's say on array items: prefix schemas by position,
// then rest for every later item (nil: any; a false schema: none).
type arrPart struct {
	prefix []*jsonschema.Schema
	rest   *jsonschema.Schema
}

// objPart is one schema's say on object members: its own properties,
// pattern properties and additionalProperties (nil: any), which apply to
// members its own properties and patterns do not name.
type objPart struct {
	props    map[string][]sref
	patterns []patProp
	extra    *sref
}

type patProp struct {
	src string
	re  *jsonschema.Schema
}

// alt is one alternative of a group: schemas to hold, and a change to the
// conjunction that no schema expresses (from negation).
type alt struct {
	pos []sref
	mod func(*conj)
}

func newConj() *conj {
	return &conj{types: tAll, maxLen: -1, maxItems: -1, maxPro: -1}
}

type jsonCompiler struct {
	b   *Builder
	opt JSONOptions
	ws  *Expr
	// raw is the ordered tree of the document being compiled.
	raw     any
	rules   map[*jsonschema.Schema]*ruleUse
	active  map[*jsonschema.Schema]bool
	merging map[*jsonschema.Schema]bool
	shared  map[string]RuleID
	bud     *budget
	any     RuleID
	anyOK   bool
}

type ruleUse struct {
	id      RuleID
	defined bool
	e       *Expr
	uses    int
}

// newJSONCompiler makes a compiler that declares its rules in b and spends
// bud (the whole grammar's budget).
func newJSONCompiler(opt JSONOptions, b *Builder, bud *budget) *jsonCompiler {
	c := &jsonCompiler{
		b:       b,
		opt:     opt,
		rules:   map[*jsonschema.Schema]*ruleUse{},
		active:  map[*jsonschema.Schema]bool{},
		merging: map[*jsonschema.Schema]bool{},
		shared:  map[string]RuleID{},
		bud:     bud,
	}
	c.ws = opt.Whitespace.expr(b)
	return c
}

// ptrOf is a schema's JSON pointer within the document.
func ptrOf(s *jsonschema.Schema) string {
	loc := s.Location
	if i := strings.IndexByte(loc, '#'); i >= 0 {
		loc = loc[i+1:]
	} else {
		loc = ""
	}
	if u, err := url.PathUnescape(loc); err == nil {
		loc = u
	}
	if loc == "" {
		return "/"
	}
	return loc
}

func refuse(keyword, ptr, why string) error {
	if why != "" {
		why = ": " + why
	}
	return fmt.Errorf("keyword %q at %s is %w%s", keyword, ptr, errUnsupported, why)
}

// rawAt finds the ordered document node at a JSON pointer.
func (c *jsonCompiler) rawAt(ptr string) *object {
	var v any = c.raw
	if ptr != "/" {
		for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			switch x := v.(type) {
			case *object:
				e, ok := x.get(tok)
				if !ok {
					return nil
				}
				v = e
			case []any:
				var i int
				if _, err := fmt.Sscan(tok, &i); err != nil || i < 0 || i >= len(x) {
					return nil
				}
				v = x[i]
			default:
				return nil
			}
		}
	}
	o, _ := v.(*object)
	return o
}

// propOrder lists s's properties in document order.
func (c *jsonCompiler) propOrder(s *jsonschema.Schema) []string {
	var names []string
	if o := c.rawAt(ptrOf(s)); o != nil {
		if pv, ok := o.get("properties"); ok {
			if po, ok := pv.(*object); ok {
				for _, m := range po.members {
					if _, ok := s.Properties[m.key]; ok {
						names = append(names, m.key)
					}
				}
			}
		}
	}
	if len(names) != len(s.Properties) {
		// Not found in the document (a schema of another draft's
		// metaschema): fall back to sorted order.
		names = names[:0]
		for k := range s.Properties {
			names = append(names, k)
		}
		slices.Sort(names)
	}
	return names
}

// collect merges schemas into one conjunction.
func (c *jsonCompiler) collect(list []sref) (*conj, error) {
	cj := newConj()
	for _, r := range list {
		if cj.ptr == "" && r.s != nil {
			cj.ptr = ptrOf(r.s)
			cj.draft = r.s.DraftVersion
		}
		var err error
		if r.neg {
			err = c.negate(cj, r.s)
		} else {
			err = c.merge(cj, r.s)
		}
		if err != nil {
			return nil, err
		}
	}
	cj.srcs = list
	return cj, nil
}

func (cj *conj) addName(n string) {
	if !slices.Contains(cj.names, n) {
		cj.names = append(cj.names, n)
	}
}

// merge adds s's keywords to cj.
func (c *jsonCompiler) merge(cj *conj, s *jsonschema.Schema) error {
	ptr := ptrOf(s)
	if s.Bool != nil {
		if !*s.Bool {
			cj.never = true
		}
		return nil
	}
	if c.merging[s] {
		return refuse("$ref", ptr, "a schema that refers to itself through allOf, anyOf or oneOf before any object or array")
	}
	c.merging[s] = true
	defer delete(c.merging, s)
	if s.Ref != nil {
		if err := c.merge(cj, s.Ref); err != nil {
			return err
		}
	}
	if s.RecursiveRef != nil {
		return refuse("$recursiveRef", ptr, "")
	}
	if s.DynamicRef != nil {
		return refuse("$dynamicRef", ptr, "")
	}
	if s.UnevaluatedProperties != nil && !isTrue(s.UnevaluatedProperties) {
		return refuse("unevaluatedProperties", ptr, "")
	}
	if s.UnevaluatedItems != nil && !isTrue(s.UnevaluatedItems) {
		return refuse("unevaluatedItems", ptr, "")
	}
	if s.UniqueItems {
		// Decided when the array's size is known (at most one item is
		// trivially unique).
		cj.unique = true
	}
	if s.MaxContains != nil {
		return refuse("maxContains", ptr, "")
	}
	if len(s.Extensions) > 0 {
		return refuse("vocabulary extension", ptr, "")
	}
	cj.types &= maskOf(s.Types)
	if s.Enum != nil {
		cj.intersectValues(s.Enum.Values)
	}
	if s.Const != nil {
		cj.intersectValues([]any{*s.Const})
	}
	if s.Not != nil {
		if err := c.negate(cj, s.Not); err != nil {
			return err
		}
	}
	for _, a := range s.AllOf {
		if err := c.merge(cj, a); err != nil {
			return err
		}
	}
	if len(s.AnyOf) > 0 {
		g := make([]alt, len(s.AnyOf))
		for i, a := range s.AnyOf {
			g[i] = alt{pos: []sref{{s: a}}}
		}
		cj.groups = append(cj.groups, g)
	}
	if len(s.OneOf) > 0 {
		g, err := c.oneOf(cj, s)
		if err != nil {
			return err
		}
		cj.groups = append(cj.groups, g)
	}
	if s.If != nil && (s.Then != nil || s.Else != nil) {
		yes := alt{pos: []sref{{s: s.If}}}
		if s.Then != nil {
			yes.pos = append(yes.pos, sref{s: s.Then})
		}
		no := alt{pos: []sref{{s: s.If, neg: true}}}
		if s.Else != nil {
			no.pos = append(no.pos, sref{s: s.Else})
		}
		cj.groups = append(cj.groups, []alt{yes, no})
	}
	if s.Format != nil {
		if _, ok := formatRegex(s.Format.Name); ok {
			cj.formats = append(cj.formats, s.Format.Name)
		} else if unenforceable[s.Format.Name] {
			return refuse("format", ptr, fmt.Sprintf("%q is a standard format no grammar can enforce exactly", s.Format.Name))
		}
	}
	// strings
	if s.MinLength != nil {
		cj.minLen = max(cj.minLen, *s.MinLength)
	}
	if s.MaxLength != nil {
		cj.maxLen = minBound(cj.maxLen, *s.MaxLength)
	}
	if s.Pattern != nil {
		cj.patterns = append(cj.patterns, s.Pattern.String())
	}
	// numbers
	if s.Minimum != nil {
		cj.lo = tighter(cj.lo, &numBound{s.Minimum, false}, true)
	}
	if s.ExclusiveMinimum != nil {
		cj.lo = tighter(cj.lo, &numBound{s.ExclusiveMinimum, true}, true)
	}
	if s.Maximum != nil {
		cj.hi = tighter(cj.hi, &numBound{s.Maximum, false}, false)
	}
	if s.ExclusiveMaximum != nil {
		cj.hi = tighter(cj.hi, &numBound{s.ExclusiveMaximum, true}, false)
	}
	if s.MultipleOf != nil {
		cj.multiples = append(cj.multiples, s.MultipleOf)
	}
	// arrays
	if s.MinItems != nil {
		cj.minItems = max(cj.minItems, *s.MinItems)
	}
	if s.MaxItems != nil {
		cj.maxItems = minBound(cj.maxItems, *s.MaxItems)
	}
	if s.Contains != nil {
		n := 1
		if s.MinContains != nil {
			n = *s.MinContains
		}
		if n > 0 {
			cj.contains = append(cj.contains, sref{s: s.Contains})
			cj.minContains = max(cj.minContains, n)
		}
	}
	var ap arrPart
	hasArr := false
	switch it := s.Items.(type) {
	case []*jsonschema.Schema:
		ap.prefix, hasArr = it, true
		if ai, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
			ap.rest = ai
		} else if b, ok := s.AdditionalItems.(bool); ok && !b {
			ap.rest = falseSchema
		}
	case *jsonschema.Schema:
		ap.rest, hasArr = it, true
	}
	if len(s.PrefixItems) > 0 {
		ap.prefix, hasArr = s.PrefixItems, true
	}
	if s.Items2020 != nil {
		ap.rest, hasArr = s.Items2020, true
	}
	if hasArr {
		cj.arrParts = append(cj.arrParts, ap)
	}
	// objects
	if s.MinProperties != nil {
		cj.minProps = max(cj.minProps, *s.MinProperties)
	}
	if s.MaxProperties != nil {
		cj.maxPro = minBound(cj.maxPro, *s.MaxProperties)
	}
	for _, r := range s.Required {
		if !slices.Contains(cj.required, r) {
			cj.required = append(cj.required, r)
		}
	}
	if s.PropertyNames != nil {
		cj.propertyNames = append(cj.propertyNames, sref{s: s.PropertyNames})
	}
	if len(s.Properties) > 0 || len(s.PatternProperties) > 0 || s.AdditionalProperties != nil {
		op := objPart{props: map[string][]sref{}}
		for _, n := range c.propOrder(s) {
			op.props[n] = []sref{{s: s.Properties[n]}}
			cj.addName(n)
		}
		for re, ps := range s.PatternProperties {
			op.patterns = append(op.patterns, patProp{re.String(), ps})
		}
		slices.SortFunc(op.patterns, func(a, b patProp) int { return strings.Compare(a.src, b.src) })
		switch ap := s.AdditionalProperties.(type) {
		case *jsonschema.Schema:
			op.extra = &sref{s: ap}
		case bool:
			if !ap {
				op.extra = &sref{s: falseSchema}
			}
		}
		cj.objParts = append(cj.objParts, op)
	}
	deps := map[string]any{}
	for k, v := range s.Dependencies {
		deps[k] = v
	}
	for k, v := range s.DependentRequired {
		deps[k] = v
	}
	for k, v := range s.DependentSchemas {
		deps[k] = v
	}
	keys := make([]string, 0, len(deps))
	for k := range deps {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		// k absent, or k present and the dependency holds.
		trigger := k
		absent := alt{mod: func(cj *conj) { cj.forbid(trigger) }}
		present := alt{mod: func(cj *conj) { cj.require(trigger) }}
		switch d := deps[k].(type) {
		case []string:
			names := d
			prev := present.mod
			present.mod = func(cj *conj) {
				prev(cj)
				for _, n := range names {
					cj.require(n)
				}
			}
		case *jsonschema.Schema:
			present.pos = []sref{{s: d}}
		}
		cj.groups = append(cj.groups, []alt{absent, present})
	}
	return nil
}

// unenforceable are the standard formats the compiler refuses rather than
// ignore: a regular expression's syntax is not a regular language, and
// idn-hostname needs IDNA's tables. Formats outside the specification are
// annotations (ignored, as the specification says).
var unenforceable = map[string]bool{"regex": true, "idn-hostname": true}

var falseSchema = func() *jsonschema.Schema {
	f := false
	return &jsonschema.Schema{Bool: &f, Location: "#/false"}
}()

func isTrue(s *jsonschema.Schema) bool { return s.Bool != nil && *s.Bool }

func minBound(a, b int) int {
	if a < 0 {
		return b
	}
	if b < 0 {
		return a
	}
	return min(a, b)
}

// tighter returns the stricter of two bounds (lower bounds when lower).
func tighter(a, b *numBound, lower bool) *numBound {
	if a == nil {
		return b
	}
	c := a.v.Cmp(b.v)
	if c == 0 {
		if b.excl {
			return b
		}
		return a
	}
	if (c < 0) == lower {
		return b
	}
	return a
}

func (cj *conj) forbid(n string) {
	if !slices.Contains(cj.forbidden, n) {
		cj.forbidden = append(cj.forbidden, n)
	}
}

func (cj *conj) require(n string) {
	if !slices.Contains(cj.required, n) {
		cj.required = append(cj.required, n)
	}
}

func (cj *conj) intersectValues(vs []any) {
	if !cj.hasValues {
		cj.hasValues = true
		cj.values = slices.Clone(vs)
		return
	}
	cj.values = slices.DeleteFunc(cj.values, func(v any) bool {
		return !slices.ContainsFunc(vs, func(w any) bool { return jsonEqual(v, w) })
	})
}

// oneOf: alternatives that cannot overlap are an anyOf; otherwise each
// alternative must also fail the others, which needs their negation.
func (c *jsonCompiler) oneOf(base *conj, s *jsonschema.Schema) ([]alt, error) {
	n := len(s.OneOf)
	merged := make([]*conj, n)
	for i, a := range s.OneOf {
		m, err := c.collect([]sref{{s: a}})
		if err != nil {
			return nil, err
		}
		merged[i] = m
	}
	g := make([]alt, n)
	for i, a := range s.OneOf {
		g[i] = alt{pos: []sref{{s: a}}}
		for j, b := range s.OneOf {
			if j != i && !disjoint(merged[i], merged[j], base) {
				g[i].pos = append(g[i].pos, sref{s: b, neg: true})
			}
		}
	}
	return g, nil
}

// disjoint reports whether no value can satisfy both a and b (given the
// base constraints), by the cheap tests that decide the oneOf uses seen
// in practice: types, values, a discriminating property, a property one
// requires and the other forbids.
func disjoint(a, b, base *conj) bool {
	ta, tb := a.types&base.types, b.types&base.types
	if ta&tb == 0 {
		return true
	}
	if a.hasValues && b.hasValues {
		none := true
		for _, v := range a.values {
			if slices.ContainsFunc(b.values, func(w any) bool { return jsonEqual(v, w) }) {
				none = false
			}
		}
		if none {
			return true
		}
	}
	if ta&tb == tObj || ta&tb&^tObj == 0 {
		// Only objects in common: a discriminator or a required/forbidden
		// property separates them.
		req := func(c *conj, n string) bool {
			return slices.Contains(c.required, n) || slices.Contains(base.required, n)
		}
		for _, n := range a.required {
			if b.forbids(n) {
				return true
			}
		}
		for _, n := range b.required {
			if a.forbids(n) {
				return true
			}
		}
		for _, n := range a.names {
			if !req(a, n) || !req(b, n) {
				continue
			}
			va, oka := a.propValues(n)
			vb, okb := b.propValues(n)
			if oka && okb {
				none := true
				for _, v := range va {
					if slices.ContainsFunc(vb, func(w any) bool { return jsonEqual(v, w) }) {
						none = false
					}
				}
				if none {
					return true
				}
			}
		}
	}
	return false
}

// forbids: the property can never appear.
func (cj *conj) forbids(n string) bool {
	if slices.Contains(cj.forbidden, n) {
		return true
	}
	for _, p := range cj.objParts {
		if rs, ok := p.props[n]; ok {
			for _, r := range rs {
				if !r.neg && r.s.Bool != nil && !*r.s.Bool {
					return true
				}
			}
			continue
		}
		if len(p.patterns) == 0 && p.extra != nil && p.extra.s.Bool != nil && !*p.extra.s.Bool {
			return true
		}
	}
	return false
}

// propValues: the enum/const a property's own schemas restrict it to.
func (cj *conj) propValues(n string) ([]any, bool) {
	for _, p := range cj.objParts {
		for _, r := range p.props[n] {
			s := r.s
			for s.Ref != nil && s.Enum == nil && s.Const == nil {
				s = s.Ref
			}
			if r.neg {
				continue
			}
			if s.Const != nil {
				return []any{*s.Const}, true
			}
			if s.Enum != nil {
				return s.Enum.Values, true
			}
		}
	}
	return nil, false
}

// negate adds to cj that s must not hold. A schema is a conjunction of
// keywords, each true of the types it does not apply to; its negation is
// the disjunction of the keywords' negations, each of which restricts
// the types to those the keyword applies to.
func (c *jsonCompiler) negate(cj *conj, s *jsonschema.Schema) error {
	ptr := ptrOf(s)
	if s.Bool != nil {
		if *s.Bool {
			cj.never = true
		}
		return nil
	}
	if c.merging[s] {
		return refuse("not", ptr, "a negated schema that refers to itself")
	}
	c.merging[s] = true
	defer delete(c.merging, s)
	var alts []alt
	add := func(f func(*conj)) { alts = append(alts, alt{mod: f}) }
	fail := func(kw string) error { return refuse("not", ptr, fmt.Sprintf("the negation of %q", kw)) }
	if s.Ref != nil {
		r := s.Ref
		alts = append(alts, alt{pos: []sref{{s: r, neg: true}}})
	}
	if s.Types != nil {
		m := maskOf(s.Types)
		add(func(cj *conj) { cj.types &^= m })
	}
	if s.Enum != nil {
		vs := s.Enum.Values
		add(func(cj *conj) { cj.notValues = append(cj.notValues, vs...) })
	}
	if s.Const != nil {
		v := *s.Const
		add(func(cj *conj) { cj.notValues = append(cj.notValues, v) })
	}
	if s.Not != nil {
		alts = append(alts, alt{pos: []sref{{s: s.Not}}})
	}
	if len(s.AnyOf) > 0 {
		// not anyOf = every alternative fails: one alternative holding
		// all the negations.
		var all []sref
		for _, a := range s.AnyOf {
			all = append(all, sref{s: a, neg: true})
		}
		alts = append(alts, alt{pos: all})
	}
	for _, a := range s.AllOf {
		alts = append(alts, alt{pos: []sref{{s: a, neg: true}}})
	}
	if len(s.OneOf) > 0 {
		return fail("oneOf")
	}
	if s.If != nil {
		return fail("if")
	}
	for _, r := range s.Required {
		n := r
		add(func(cj *conj) { cj.types &= tObj; cj.forbid(n) })
	}
	if s.Pattern != nil {
		p := s.Pattern.String()
		add(func(cj *conj) { cj.types &= tStr; cj.notPatterns = append(cj.notPatterns, p) })
	}
	if s.Format != nil {
		if _, ok := formatRegex(s.Format.Name); ok {
			f := s.Format.Name
			add(func(cj *conj) { cj.types &= tStr; cj.notFormats = append(cj.notFormats, f) })
		}
	}
	// negCount adds the negations of a count's bounds (a string's length,
	// an array's items, an object's properties; field gives the
	// conjunction's lower and upper bound of it): not (count >= n) is
	// count <= n-1, which nothing meets when n is 0; not (count <= n) is
	// count >= n+1.
	negCount := func(minV, maxV *int, types typeMask, field func(*conj) (lo, hi *int)) {
		if minV != nil {
			n := *minV
			add(func(cj *conj) {
				cj.types &= types
				if n == 0 {
					cj.never = true
				}
				_, hi := field(cj)
				*hi = minBound(*hi, n-1)
			})
		}
		if maxV != nil {
			n := *maxV
			add(func(cj *conj) {
				cj.types &= types
				lo, _ := field(cj)
				*lo = max(*lo, n+1)
			})
		}
	}
	negCount(s.MinLength, s.MaxLength, tStr, func(cj *conj) (lo, hi *int) { return &cj.minLen, &cj.maxLen })
	for _, b := range []struct {
		v     *big.Rat
		lower bool
		excl  bool
	}{{s.Minimum, true, false}, {s.ExclusiveMinimum, true, true}, {s.Maximum, false, false}, {s.ExclusiveMaximum, false, true}} {
		if b.v == nil {
			continue
		}
		nb := &numBound{b.v, !b.excl}
		lower := b.lower
		add(func(cj *conj) {
			cj.types &= tInt | tNum
			if lower {
				cj.hi = tighter(cj.hi, nb, false)
			} else {
				cj.lo = tighter(cj.lo, nb, true)
			}
		})
	}
	if s.MultipleOf != nil {
		m := s.MultipleOf
		add(func(cj *conj) { cj.types &= tInt | tNum; cj.notMultiple = append(cj.notMultiple, m) })
	}
	negCount(s.MinItems, s.MaxItems, tArr, func(cj *conj) (lo, hi *int) { return &cj.minItems, &cj.maxItems })
	negCount(s.MinProperties, s.MaxProperties, tObj, func(cj *conj) (lo, hi *int) { return &cj.minProps, &cj.maxPro })
	for n, ps := range s.Properties {
		name, sub := n, ps
		alts = append(alts, alt{
			pos: nil,
			mod: func(cj *conj) {
				cj.types &= tObj
				cj.require(name)
				cj.addName(name)
				cj.objParts = append(cj.objParts, objPart{props: map[string][]sref{name: {{s: sub, neg: true}}}})
			},
		})
	}
	for _, kw := range []struct {
		name string
		set  bool
	}{
		{"items", s.Items != nil || s.Items2020 != nil || len(s.PrefixItems) > 0},
		{"additionalProperties", s.AdditionalProperties != nil},
		{"patternProperties", len(s.PatternProperties) > 0},
		{"propertyNames", s.PropertyNames != nil},
		{"dependencies", len(s.Dependencies) > 0 || len(s.DependentRequired) > 0 || len(s.DependentSchemas) > 0},
		{"contains", s.Contains != nil},
		{"uniqueItems", s.UniqueItems},
		{"$dynamicRef", s.DynamicRef != nil},
		{"$recursiveRef", s.RecursiveRef != nil},
		{"unevaluatedProperties", s.UnevaluatedProperties != nil && !isTrue(s.UnevaluatedProperties)},
		{"unevaluatedItems", s.UnevaluatedItems != nil && !isTrue(s.UnevaluatedItems)},
		{"vocabulary extension", len(s.Extensions) > 0},
	} {
		if kw.set {
			return fail(kw.name)
		}
	}
	switch len(alts) {
	case 0:
		// not {} matches nothing.
		cj.never = true
	case 1:
		a := alts[0]
		if a.mod != nil {
			a.mod(cj)
		}
		for _, r := range a.pos {
			var err error
			if r.neg {
				err = c.negate(cj, r.s)
			} else {
				err = c.merge(cj, r.s)
			}
			if err != nil {
				return err
			}
		}
	default:
		cj.groups = append(cj.groups, alts)
	}
	return nil
}

// jsonEqual compares JSON values as JSON Schema does (numbers by value).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	}
	ra, oka := numRat(a)
	rb, okb := numRat(b)
	return oka && okb && ra.Cmp(rb) == 0
}

func numRat(v any) (*big.Rat, bool) {
	switch x := v.(type) {
	case interface{ String() string }:
		return new(big.Rat).SetString(x.String())
	case float64:
		return new(big.Rat).SetFloat64(x), true
	case int:
		return big.NewRat(int64(x), 1), true
	}
	return nil, false
}

// errNever marks a schema no value satisfies.
var errNever = errors.New("no value satisfies the schema")
