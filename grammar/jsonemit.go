package grammar

import (
	"encoding/json"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// maxCombinations bounds how many alternatives distributing anyOf,
// oneOf, if/then/else, dependencies and negations over one schema may
// produce.
const maxCombinations = 256

// compileList compiles the conjunction of schemas that apply at one place.
func (c *jsonCompiler) compileList(list []sref) (*Expr, error) {
	if len(list) == 0 {
		return c.anyValue(), nil
	}
	if len(list) == 1 && !list[0].neg {
		return c.compileOne(list[0].s)
	}
	cj, err := c.collect(list)
	if err != nil {
		return nil, err
	}
	return c.emit(cj, 0)
}

// onlyRef: the schema is a reference and nothing else.
func onlyRef(s *jsonschema.Schema) bool {
	if s.Ref == nil {
		return false
	}
	t := *s
	t.Ref, t.Location, t.DraftVersion, t.ID, t.Anchor = nil, "", 0, "", ""
	t.Title, t.Description, t.Default, t.Comment, t.Examples = "", "", nil, "", nil
	t.ReadOnly, t.WriteOnly, t.Deprecated, t.DynamicAnchor, t.RecursiveAnchor = false, false, false, "", false
	return isBlank(&t)
}

// isBlank: no constraint keyword is set.
func isBlank(s *jsonschema.Schema) bool {
	return s.Bool == nil && s.Ref == nil && s.RecursiveRef == nil && s.DynamicRef == nil && s.Types == nil &&
		s.Enum == nil && s.Const == nil && s.Not == nil && len(s.AllOf) == 0 && len(s.AnyOf) == 0 &&
		len(s.OneOf) == 0 && s.If == nil && s.Then == nil && s.Else == nil && s.Format == nil &&
		s.MaxProperties == nil && s.MinProperties == nil && len(s.Required) == 0 && s.PropertyNames == nil &&
		len(s.Properties) == 0 && len(s.PatternProperties) == 0 && s.AdditionalProperties == nil &&
		len(s.Dependencies) == 0 && len(s.DependentRequired) == 0 && len(s.DependentSchemas) == 0 &&
		s.UnevaluatedProperties == nil && s.MinItems == nil && s.MaxItems == nil && !s.UniqueItems &&
		s.Contains == nil && s.MinContains == nil && s.MaxContains == nil && s.Items == nil &&
		s.AdditionalItems == nil && len(s.PrefixItems) == 0 && s.Items2020 == nil && s.UnevaluatedItems == nil &&
		s.MinLength == nil && s.MaxLength == nil && s.Pattern == nil && s.ContentEncoding == nil &&
		s.ContentMediaType == nil && s.ContentSchema == nil && s.Maximum == nil && s.Minimum == nil &&
		s.ExclusiveMaximum == nil && s.ExclusiveMinimum == nil && s.MultipleOf == nil && len(s.Extensions) == 0
}

// compileOne compiles one schema. A schema reached again while it is being
// compiled (recursion) becomes a rule; one used again after it was
// compiled is inlined while small and becomes a shared rule otherwise.
func (c *jsonCompiler) compileOne(s *jsonschema.Schema) (*Expr, error) {
	seen := map[*jsonschema.Schema]bool{}
	for onlyRef(s) {
		if seen[s] {
			return nil, fmt.Errorf("$ref at %s: the references form a cycle that never reaches a schema", ptrOf(s))
		}
		seen[s] = true
		s = s.Ref
	}
	if s.Bool != nil {
		if *s.Bool {
			return c.anyValue(), nil
		}
		return None(), nil
	}
	if isBlank(s) {
		return c.anyValue(), nil
	}
	u := c.rules[s]
	if u == nil {
		u = &ruleUse{id: -1}
		c.rules[s] = u
	}
	if c.active[s] {
		if u.id < 0 {
			u.id = c.b.Declare(ptrOf(s))
		}
		return Ref(u.id), nil
	}
	if u.e != nil {
		u.uses++
		if u.id >= 0 {
			return Ref(u.id), nil
		}
		if exprSize(u.e, 40) >= 40 {
			u.id = c.b.Rule(ptrOf(s), u.e)
			return Ref(u.id), nil
		}
		return u.e, nil
	}
	c.active[s] = true
	cj, err := c.collect([]sref{{s: s}})
	var e *Expr
	if err == nil {
		e, err = c.emit(cj, 0)
	}
	delete(c.active, s)
	if err != nil {
		return nil, err
	}
	u.uses = 1
	if u.id >= 0 {
		c.b.Define(u.id, e)
		u.e = Ref(u.id)
		return u.e, nil
	}
	u.e = e
	return e, nil
}

// exprSize counts e's nodes, stopping at limit.
func exprSize(e *Expr, limit int) int {
	n := 1
	switch e.op {
	case opLit:
		n += len(e.lit) / 4
	case opSeq, opAlt, opRepeat, opAnd:
		for _, s := range e.subs {
			if n >= limit {
				return n
			}
			n += exprSize(s, limit-n)
		}
		if e.op == opRepeat && e.max > 1 {
			n *= min(e.max, 8)
		}
	case opGraph:
		for _, ed := range e.graph.Edges {
			if n >= limit {
				return n
			}
			n += exprSize(ed.E, limit-n)
		}
	}
	return n
}

// share makes e a rule when it is big and about to be copied onto many
// edges.
func (c *jsonCompiler) share(e *Expr, uses int, name string) *Expr {
	if uses <= 1 || e.op == opRef || exprSize(e, 24) < 24 {
		return e
	}
	return Ref(c.b.Rule(name, e))
}

func (cj *conj) clone() *conj {
	d := *cj
	d.srcs = slices.Clone(cj.srcs)
	d.values = slices.Clone(cj.values)
	d.notValues = slices.Clone(cj.notValues)
	d.patterns = slices.Clone(cj.patterns)
	d.notPatterns = slices.Clone(cj.notPatterns)
	d.formats = slices.Clone(cj.formats)
	d.notFormats = slices.Clone(cj.notFormats)
	d.multiples = slices.Clone(cj.multiples)
	d.notMultiple = slices.Clone(cj.notMultiple)
	d.arrParts = slices.Clone(cj.arrParts)
	d.contains = slices.Clone(cj.contains)
	d.objParts = slices.Clone(cj.objParts)
	d.names = slices.Clone(cj.names)
	d.required = slices.Clone(cj.required)
	d.forbidden = slices.Clone(cj.forbidden)
	d.propertyNames = slices.Clone(cj.propertyNames)
	d.groups = slices.Clone(cj.groups)
	return &d
}

// trivial: nothing but groups constrains cj.
func (cj *conj) trivial() bool {
	return !cj.never && cj.types == tAll && !cj.hasValues && len(cj.notValues) == 0 && cj.minLen == 0 && cj.maxLen < 0 &&
		len(cj.patterns)+len(cj.notPatterns)+len(cj.formats)+len(cj.notFormats) == 0 && cj.lo == nil && cj.hi == nil &&
		len(cj.multiples)+len(cj.notMultiple) == 0 && len(cj.arrParts) == 0 && !cj.unique && cj.minItems == 0 &&
		cj.maxItems < 0 && len(cj.contains) == 0 && len(cj.objParts) == 0 && len(cj.names) == 0 && len(cj.required) == 0 &&
		len(cj.forbidden) == 0 && len(cj.propertyNames) == 0 && cj.minProps == 0 && cj.maxPro < 0
}

// emit turns a conjunction into an expression, distributing its groups.
func (c *jsonCompiler) emit(cj *conj, combos int) (*Expr, error) {
	if cj.never {
		return None(), nil
	}
	if cj.hasValues {
		return c.emitValues(cj)
	}
	if len(cj.groups) == 0 {
		return c.emitFlat(cj)
	}
	g := cj.groups[0]
	if cj.trivial() && len(cj.groups) == 1 && !slices.ContainsFunc(g, func(a alt) bool {
		return a.mod != nil || len(a.pos) != 1 || a.pos[0].neg
	}) {
		// A bare anyOf (or a disjoint oneOf): its alternatives compile on
		// their own, keeping their rules.
		alts := make([]*Expr, len(g))
		for i, a := range g {
			e, err := c.compileOne(a.pos[0].s)
			if err != nil {
				return nil, err
			}
			alts[i] = e
		}
		return Alt(alts...), nil
	}
	if combos == 0 {
		combos = 1
	}
	combos *= len(g)
	if combos > maxCombinations {
		return nil, refuse("anyOf", cj.ptr, fmt.Sprintf("distributing anyOf/oneOf/if/dependencies/not over the schema makes more than %d alternatives", maxCombinations))
	}
	var alts []*Expr
	for _, a := range g {
		d := cj.clone()
		d.groups = d.groups[1:]
		if a.mod != nil {
			a.mod(d)
		}
		for _, r := range a.pos {
			var err error
			if r.neg {
				err = c.negate(d, r.s)
			} else {
				err = c.merge(d, r.s)
			}
			if err != nil {
				return nil, err
			}
			d.srcs = append(d.srcs, r)
		}
		e, err := c.emit(d, combos)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return Alt(alts...), nil
}

// valid checks a value against every schema of the conjunction.
func (cj *conj) valid(v any) bool {
	for _, r := range cj.srcs {
		if r.s == falseSchema {
			if !r.neg {
				return false
			}
			continue
		}
		if (r.s.Validate(v) == nil) == r.neg {
			return false
		}
	}
	return true
}

// emitValues: an enum or const, filtered by everything else.
func (c *jsonCompiler) emitValues(cj *conj) (*Expr, error) {
	var alts []*Expr
	seen := map[string]bool{}
	// A lone enum (with at most a type beside it) needs no validation of
	// each value against the schema, which would compare every value with
	// every other.
	typeOnly := len(cj.srcs) == 1 && !cj.srcs[0].neg && valuesAndType(cj.srcs[0].s)
	for _, v := range cj.values {
		if typeOnly {
			if cj.types&typeOfValue(v) == 0 {
				continue
			}
		} else if !cj.valid(v) {
			continue
		}
		if slices.ContainsFunc(cj.notValues, func(w any) bool { return jsonEqual(v, w) }) {
			continue
		}
		lv := fromLib(v)
		s := string(appendJSON(nil, lv))
		if seen[s] {
			continue
		}
		seen[s] = true
		e, err := c.valueExpr(lv)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return Alt(alts...), nil
}

// valueExpr is the compact texts of one value: numbers in every spelling
// of their value without an exponent (1, 1.0, 1.00, ...), the rest as
// appendJSON writes it.
func (c *jsonCompiler) valueExpr(v any) (*Expr, error) {
	switch x := v.(type) {
	case json.Number:
		r, ok := numRat(x)
		if !ok {
			return Lit(string(x)), nil
		}
		d, err := numberRangeDFA(&numBound{r, false}, &numBound{r, false}, false, c.bud)
		if err != nil {
			return nil, err
		}
		return d.toExpr(), nil
	case []any:
		parts := []*Expr{Lit("[")}
		for i, e := range x {
			if i > 0 {
				parts = append(parts, Lit(","))
			}
			ee, err := c.valueExpr(e)
			if err != nil {
				return nil, err
			}
			parts = append(parts, ee)
		}
		return Seq(append(parts, Lit("]"))...), nil
	case *object:
		parts := []*Expr{Lit("{")}
		for i, m := range x.members {
			if i > 0 {
				parts = append(parts, Lit(","))
			}
			ee, err := c.valueExpr(m.val)
			if err != nil {
				return nil, err
			}
			parts = append(parts, Lit(string(appendString(nil, m.key))+":"), ee)
		}
		return Seq(append(parts, Lit("}"))...), nil
	}
	return Lit(string(appendJSON(nil, v))), nil
}

// valuesAndType: s constrains with enum/const and type only.
func valuesAndType(s *jsonschema.Schema) bool {
	t := *s
	t.Enum, t.Const, t.Types, t.Location, t.DraftVersion = nil, nil, nil, "", 0
	t.Title, t.Description, t.Default, t.Comment, t.Examples = "", "", nil, "", nil
	t.ReadOnly, t.WriteOnly, t.Deprecated, t.ID, t.Anchor = false, false, false, "", ""
	return isBlank(&t)
}

// typeOfValue is the type mask of a decoded value (integers are numbers
// with no fraction).
func typeOfValue(v any) typeMask {
	switch x := v.(type) {
	case nil:
		return tNull
	case bool:
		return tBool
	case string:
		return tStr
	case []any:
		return tArr
	case map[string]any:
		return tObj
	default:
		r, ok := numRat(x)
		if !ok {
			return 0
		}
		if r.IsInt() {
			return tInt | tNum
		}
		return tNum
	}
}

// fromLib converts a value as the library decodes it (maps) to the
// ordered form appendJSON writes (members sorted by key).
func fromLib(v any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		o := &object{}
		for _, k := range keys {
			o.members = append(o.members, member{k, fromLib(x[k])})
		}
		return o
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fromLib(e)
		}
		return out
	case float64:
		return json.Number(fmt.Sprint(x))
	}
	return v
}

func (c *jsonCompiler) emitFlat(cj *conj) (*Expr, error) {
	var alts []*Expr
	excluded := func(v any) bool {
		return slices.ContainsFunc(cj.notValues, func(w any) bool { return jsonEqual(v, w) })
	}
	for _, v := range cj.notValues {
		switch v.(type) {
		case []any, map[string]any:
			return nil, refuse("not", cj.ptr, "excluding array or object values")
		}
	}
	if cj.types&tNull != 0 && !excluded(nil) {
		alts = append(alts, Lit("null"))
	}
	if cj.types&tBool != 0 {
		for _, b := range []bool{true, false} {
			if !excluded(b) {
				alts = append(alts, Lit(fmt.Sprint(b)))
			}
		}
	}
	steps := []struct {
		t    typeMask
		emit func(*conj) (*Expr, error)
	}{{tInt | tNum, c.emitNumber}, {tStr, c.emitString}, {tArr, c.emitArray}, {tObj, c.emitObject}}
	for _, st := range steps {
		if cj.types&st.t == 0 {
			continue
		}
		e, err := st.emit(cj)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return Alt(alts...), nil
}

// anyValue is the rule of every JSON value.
func (c *jsonCompiler) anyValue() *Expr {
	if !c.anyOK {
		c.any = c.b.Declare("value")
		c.anyOK = true
		v := Ref(c.any)
		str := Ref(c.stringRule())
		sep := Seq(c.ws, Lit(","), c.ws)
		member := Seq(str, c.ws, Lit(":"), c.ws, v)
		obj := Seq(Lit("{"), c.ws, Opt(Seq(member, Star(Seq(sep, member)), c.ws)), Lit("}"))
		arr := Seq(Lit("["), c.ws, Opt(Seq(v, Star(Seq(sep, v)), c.ws)), Lit("]"))
		c.b.Define(c.any, Alt(obj, arr, str, jsonNumberExpr(), Lit("true"), Lit("false"), Lit("null")))
	}
	return Ref(c.any)
}

// stringRule is the shared rule of a JSON string with no constraints.
func (c *jsonCompiler) stringRule() RuleID {
	if r, ok := c.shared["string"]; ok {
		return r
	}
	r := c.b.Rule("string", &Expr{op: opDFA, d: jsonStringDFA()})
	c.shared["string"] = r
	return r
}

func (c *jsonCompiler) emitNumber(cj *conj) (*Expr, error) {
	integer := cj.types&tNum == 0
	nonInteger := cj.types&tInt == 0
	var nums []any
	for _, v := range cj.notValues {
		if _, ok := numRat(v); ok {
			if _, isStr := v.(string); !isStr {
				nums = append(nums, v)
			}
		}
	}
	// Since draft 6 an integer is any number with no fraction, 1.0 too
	// (draft 4 wanted integers written without one). With
	// IntegerPointZero the grammar takes one zero after the point, as
	// serializers write a float that holds an integer: more would let a
	// model pad an integer with zeros forever.
	zeros := integer && cj.draft >= 6 && c.opt.IntegerPointZero
	if cj.lo == nil && cj.hi == nil && len(cj.multiples) == 0 && len(cj.notMultiple) == 0 && len(nums) == 0 && !nonInteger {
		switch {
		case zeros:
			return Seq(jsonIntegerExpr(), Opt(Lit(".0"))), nil
		case integer:
			return jsonIntegerExpr(), nil
		}
		return jsonNumberExpr(), nil
	}
	lim := c.bud
	d, err := numberRangeDFA(cj.lo, cj.hi, integer && !zeros, lim)
	if err != nil {
		return nil, fmt.Errorf("number bounds at %s: %w", cj.ptr, err)
	}
	and := func(o *dfa, keep func(x, y bool) bool) error {
		var err error
		d, err = product(d, o, keep, lim)
		return err
	}
	if zeros {
		whole, err := compileExpr(Seq(plainNumberExpr(true), Opt(Lit(".0"))), lim)
		if err != nil {
			return nil, err
		}
		if err := and(whole, func(x, y bool) bool { return x && y }); err != nil {
			return nil, err
		}
	}
	for i, m := range append(slices.Clone(cj.multiples), cj.notMultiple...) {
		p, digits, ok := multipleParts(m)
		if !ok || p > maxMultipleStates {
			return nil, refuse("multipleOf", cj.ptr, fmt.Sprintf("%s needs more than %d automaton states", m.RatString(), maxMultipleStates))
		}
		keep := func(x, y bool) bool { return x && y }
		if i >= len(cj.multiples) {
			keep = func(x, y bool) bool { return x && !y }
		}
		if err := and(multipleDFA(p, digits), keep); err != nil {
			return nil, err
		}
	}
	for _, v := range nums {
		r, _ := numRat(v)
		eq, err := numberRangeDFA(&numBound{r, false}, &numBound{r, false}, false, lim)
		if err != nil {
			return nil, err
		}
		if err := and(eq, func(x, y bool) bool { return x && !y }); err != nil {
			return nil, err
		}
	}
	if nonInteger {
		whole, err := compileExpr(Seq(plainNumberExpr(true), Opt(Seq(Lit("."), Plus(Lit("0"))))), lim)
		if err != nil {
			return nil, err
		}
		if err := and(whole, func(x, y bool) bool { return x && !y }); err != nil {
			return nil, err
		}
	}
	return d.toExpr(), nil
}

// stringDFA is the decoded content a string's constraints allow, as a DFA
// over its UTF-8 bytes; nil when nothing constrains it.
// lengthDFA is the DFA of strings of min to max scalar values (max < 0:
// unbounded).
func (c *jsonCompiler) lengthDFA(min, max int) (*dfa, error) {
	unit, err := compileExpr(anyRune, c.bud)
	if err != nil {
		return nil, err
	}
	d, ok, err := repeatUnit(unit, min, max, c.bud)
	if !ok {
		return compileExpr(Repeat(anyRune, min, max), c.bud)
	}
	return d, err
}

func (c *jsonCompiler) stringDFA(cj *conj) (*dfa, error) {
	var strs []string
	for _, v := range cj.notValues {
		if s, ok := v.(string); ok {
			strs = append(strs, s)
		}
	}
	if cj.minLen == 0 && cj.maxLen < 0 && len(cj.patterns)+len(cj.notPatterns)+len(cj.formats)+len(cj.notFormats)+len(strs) == 0 {
		return nil, nil
	}
	lim := c.bud
	if cj.maxLen >= 0 && cj.maxLen < cj.minLen {
		return compileExpr(None(), lim)
	}
	if max(cj.minLen, cj.maxLen) > lim.states/4 {
		return nil, fmt.Errorf("string at %s: minLength %d / maxLength %d need more than %d automaton states: %w", cj.ptr, cj.minLen, cj.maxLen, lim.states/4, errTooLarge)
	}
	d, err := c.lengthDFA(cj.minLen, cj.maxLen)
	if err != nil {
		return nil, fmt.Errorf("minLength/maxLength at %s: %w", cj.ptr, err)
	}
	and := func(e *Expr, keep func(x, y bool) bool, what string) error {
		o, err := compileExpr(e, lim)
		if err == nil {
			d, err = product(d, o, keep, lim)
		}
		if err != nil {
			return fmt.Errorf("%s at %s: %w", what, cj.ptr, err)
		}
		return nil
	}
	yes := func(x, y bool) bool { return x && y }
	no := func(x, y bool) bool { return x && !y }
	for i, p := range append(slices.Clone(cj.patterns), cj.notPatterns...) {
		e, err := searchExpr(p)
		if err != nil {
			return nil, refuse("pattern", cj.ptr, err.Error())
		}
		keep := yes
		if i >= len(cj.patterns) {
			keep = no
		}
		if err := and(e, keep, "pattern "+p); err != nil {
			return nil, err
		}
	}
	for i, f := range append(slices.Clone(cj.formats), cj.notFormats...) {
		fd, err := formatDFA(f)
		if err != nil {
			return nil, err
		}
		e := &Expr{op: opDFA, d: fd}
		keep := yes
		if i >= len(cj.formats) {
			keep = no
		}
		if err := and(e, keep, "format "+f); err != nil {
			return nil, err
		}
	}
	if len(strs) > 0 {
		alts := make([]*Expr, len(strs))
		for i, s := range strs {
			alts[i] = Lit(s)
		}
		if err := and(Alt(alts...), no, "not enum"); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// searchExpr is the language of strings that contain a match of a JSON
// Schema pattern (patterns are not anchored unless they say so).
func searchExpr(p string) (*Expr, error) {
	t, err := ECMAToRE2(p)
	if err != nil {
		return nil, err
	}
	e, err := regexExpr(t)
	if err != nil {
		return nil, err
	}
	re, _ := syntax.Parse(t, syntax.Perl)
	pre, post := Star(anyRune), Star(anyRune)
	if anchored(re, syntax.OpBeginText) {
		pre = Empty()
	}
	if anchored(re, syntax.OpEndText) {
		post = Empty()
	}
	return Seq(pre, e, post), nil
}

// anchored reports whether every match of re starts (OpBeginText) or ends
// (OpEndText) with the anchor, so the search needs no free prefix or
// suffix there.
func anchored(re *syntax.Regexp, op syntax.Op) bool {
	switch re.Op {
	case op:
		return true
	case syntax.OpCapture:
		return anchored(re.Sub[0], op)
	case syntax.OpConcat:
		if len(re.Sub) == 0 {
			return false
		}
		if op == syntax.OpBeginText {
			return anchored(re.Sub[0], op)
		}
		return anchored(re.Sub[len(re.Sub)-1], op)
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			if !anchored(s, op) {
				return false
			}
		}
		return true
	}
	return false
}

func (c *jsonCompiler) emitString(cj *conj) (*Expr, error) {
	if len(cj.formats) == 1 && cj.minLen == 0 && cj.maxLen < 0 && len(cj.patterns)+len(cj.notPatterns)+len(cj.notFormats) == 0 &&
		!slices.ContainsFunc(cj.notValues, func(v any) bool { _, ok := v.(string); return ok }) {
		// A format alone: its quoted text automaton is built once per
		// process.
		d, err := quotedFormatDFA(cj.formats[0])
		if err != nil {
			return nil, err
		}
		f := "format:" + cj.formats[0]
		if r, ok := c.shared[f]; ok {
			return Ref(r), nil
		}
		r := c.b.Rule(f, &Expr{op: opDFA, d: d})
		c.shared[f] = r
		return Ref(r), nil
	}
	d, err := c.stringDFA(cj)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return Ref(c.stringRule()), nil
	}
	return c.quoted(d, "string "+cj.ptr)
}

// quoted turns decoded string content into a shared rule of its JSON
// text with the quotes.
func (c *jsonCompiler) quoted(d *dfa, name string) (*Expr, error) {
	if d.isEmpty() {
		return None(), nil
	}
	t, err := textDFA(d, c.bud)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if q, ok := quoteDFA(t); ok {
		return Ref(c.b.Rule(name, &Expr{op: opDFA, d: q})), nil
	}
	return Ref(c.b.Rule(name, Seq(Lit(`"`), t.toExpr(), Lit(`"`)))), nil
}

func (c *jsonCompiler) emitArray(cj *conj) (*Expr, error) {
	m, M := cj.minItems, cj.maxItems
	if cj.unique && (M < 0 || M > 1) {
		return nil, refuse("uniqueItems", cj.ptr, "")
	}
	if M >= 0 && M < m {
		return None(), nil
	}
	L := 0
	for _, p := range cj.arrParts {
		L = max(L, len(p.prefix))
	}
	at := func(i int) []sref {
		var list []sref
		for _, p := range cj.arrParts {
			switch {
			case i < len(p.prefix):
				list = append(list, sref{s: p.prefix[i]})
			case p.rest != nil:
				list = append(list, sref{s: p.rest})
			}
		}
		return list
	}
	if len(cj.contains) > 1 {
		return nil, refuse("contains", cj.ptr, "more than one contains on one array")
	}
	k := 0
	if len(cj.contains) == 1 {
		k = cj.minContains
	}
	// States 0..N count the items; past N (unbounded) the last one loops,
	// so it must stand for at least one item (its separator).
	N := max(L, m, 1)
	if M >= 0 {
		N = M
	}
	if k > 0 && (M < 0 && N < L) {
		N = L
	}
	if (N+1)*(k+1) > c.bud.states/4 {
		return nil, fmt.Errorf("array at %s: counting %d items (minItems %d, maxItems %d, prefixItems %d) needs more than %d automaton states: %w",
			cj.ptr, N, m, M, L, c.bud.states/4, errTooLarge)
	}
	sep := Seq(c.ws, Lit(","), c.ws)
	// Item i's expression (first, and after a separator), and the same
	// with the contains schema. Positions past the prefix repeat one
	// expression; on a long chain it becomes a rule so that each edge is
	// one call.
	items := make([]*Expr, N+1)
	later := make([]*Expr, N+1)
	with := make([]*Expr, N+1)
	withLater := make([]*Expr, N+1)
	for i := 0; i <= N; i++ {
		if i > L && i > 1 {
			items[i], later[i], with[i], withLater[i] = items[i-1], later[i-1], with[i-1], withLater[i-1]
			continue
		}
		e, err := c.compileList(at(i))
		if err != nil {
			return nil, err
		}
		uses := 1
		if i >= L {
			uses = N - L + 2
		}
		items[i] = e
		later[i] = c.share(Seq(sep, e), uses, fmt.Sprintf("%s/items", cj.ptr))
		if k > 0 {
			w, err := c.compileList(append(at(i), cj.contains[0]))
			if err != nil {
				return nil, err
			}
			with[i] = w
			withLater[i] = c.share(Seq(sep, w), uses, fmt.Sprintf("%s/contains", cj.ptr))
		}
	}
	// graph states: 0 before "[", then (i, f) for i items, f found
	g := &Graph{}
	id := func(i, f int) int { return 1 + i*(k+1) + f }
	g.States = 1 + (N+1)*(k+1) + 1
	end := g.States - 1
	g.Accept = []int{end}
	g.Edges = append(g.Edges, GraphEdge{0, id(0, 0), Seq(Lit("["), c.ws)})
	for i := 0; i <= N; i++ {
		for f := 0; f <= k; f++ {
			from := id(i, f)
			if f == k && i >= m {
				closing := Lit("]")
				if i > 0 {
					closing = Seq(c.ws, Lit("]"))
				}
				g.Edges = append(g.Edges, GraphEdge{from, end, closing})
			}
			next := i + 1
			if next > N {
				if M >= 0 {
					continue
				}
				next = N // unbounded: loop on the last state
			}
			item, withC := items[i], with[i]
			if i > 0 {
				item, withC = later[i], withLater[i]
			}
			g.Edges = append(g.Edges, GraphEdge{from, id(next, f), item})
			if k > 0 {
				g.Edges = append(g.Edges, GraphEdge{from, id(next, min(f+1, k)), withC})
			}
		}
	}
	return GraphExpr(g), nil
}

// propVals lists the schemas a member named n must satisfy.
func (cj *conj) propVals(n string) []sref {
	var list []sref
	for _, p := range cj.objParts {
		// properties and patternProperties both apply; additionalProperties
		// only to names neither covers.
		rs, matched := p.props[n]
		list = append(list, rs...)
		for _, pp := range p.patterns {
			if patternMatches(pp.src, n) {
				list = append(list, sref{s: pp.re})
				matched = true
			}
		}
		if !matched && p.extra != nil {
			list = append(list, *p.extra)
		}
	}
	return list
}

func patternMatches(p, s string) bool {
	t, err := ECMAToRE2(p)
	if err != nil {
		return false
	}
	re, err := regexp.Compile(t)
	return err == nil && re.MatchString(s)
}

// maxPatternRegions bounds the pattern properties whose overlaps an object
// splits into regions.
const maxPatternRegions = 4

func (c *jsonCompiler) emitObject(cj *conj) (*Expr, error) {
	// Property names must pass propertyNames.
	var pn *conj
	if len(cj.propertyNames) > 0 {
		var err error
		if pn, err = c.collect(cj.propertyNames); err != nil {
			return nil, err
		}
		if len(pn.groups) > 0 {
			return nil, refuse("propertyNames", cj.ptr, "anyOf/oneOf/not inside propertyNames")
		}
	}
	nameOK := func(n string) bool {
		return pn == nil || pn.valid(n)
	}
	type prop struct {
		name     string
		key      *Expr
		val      *Expr
		required bool
	}
	var props []prop
	names := slices.Clone(cj.names)
	for _, r := range cj.required {
		if !slices.Contains(names, r) {
			names = append(names, r)
		}
	}
	nReq := 0
	for _, n := range names {
		req := slices.Contains(cj.required, n)
		if slices.Contains(cj.forbidden, n) || !nameOK(n) {
			if req {
				return None(), nil
			}
			continue
		}
		v, err := c.compileList(cj.propVals(n))
		if err != nil {
			return nil, err
		}
		if v.op == opNone {
			if req {
				return None(), nil
			}
			continue
		}
		if req {
			nReq++
		}
		props = append(props, prop{n, Lit(string(appendString(nil, n))), v, req})
	}
	minP, maxP := cj.minProps, cj.maxPro
	if maxP >= 0 && (nReq > maxP || minP > maxP) {
		return None(), nil
	}
	extras, err := c.extraMembers(cj, append(slices.Clone(names), cj.forbidden...), pn)
	if err != nil {
		return nil, err
	}
	n := len(props)
	capN := max(minP, 1)
	if maxP >= 0 {
		capN = maxP
	}
	if (n+1)*(capN+1) > c.bud.states {
		return nil, fmt.Errorf("object at %s: %d properties with minProperties/maxProperties %d: %w", cj.ptr, n, capN, errTooLarge)
	}
	// A state (j, cnt) is reachable only if cnt members fit before
	// property j: at most j named ones, any number of others.
	reach := func(j, cnt int) bool { return len(extras) > 0 || cnt <= j }
	for j := range props {
		uses := 0
		for cnt := 0; cnt <= capN; cnt++ {
			if reach(j, cnt) {
				uses++
			}
		}
		props[j].val = c.share(props[j].val, uses, fmt.Sprintf("%s/%s", cj.ptr, props[j].name))
	}
	sep := Seq(c.ws, Lit(","), c.ws)
	g := &Graph{}
	id := func(j, cnt int) int { return 1 + j*(capN+1) + cnt }
	g.States = 1 + (n+1)*(capN+1) + 1
	end := g.States - 1
	g.Accept = []int{end}
	g.Edges = append(g.Edges, GraphEdge{0, id(0, 0), Seq(Lit("{"), c.ws)})
	inc := func(cnt int) (int, bool) {
		if maxP >= 0 && cnt >= maxP {
			return 0, false
		}
		return min(cnt+1, capN), true
	}
	for j := 0; j <= n; j++ {
		for cnt := 0; cnt <= capN; cnt++ {
			if !reach(j, cnt) {
				continue
			}
			from := id(j, cnt)
			lead := Empty()
			if cnt > 0 {
				lead = sep
			}
			if j == n && cnt >= minP {
				closing := Lit("}")
				if cnt > 0 {
					closing = Seq(c.ws, Lit("}"))
				}
				g.Edges = append(g.Edges, GraphEdge{from, end, closing})
			}
			if nc, ok := inc(cnt); ok {
				for _, x := range extras {
					g.Edges = append(g.Edges, GraphEdge{from, id(j, nc), Seq(lead, x)})
				}
				if j < n {
					p := props[j]
					g.Edges = append(g.Edges, GraphEdge{from, id(j+1, nc), Seq(lead, p.key, c.ws, Lit(":"), c.ws, p.val)})
				}
			}
			if j < n && !props[j].required {
				g.Edges = append(g.Edges, GraphEdge{from, id(j+1, cnt), Empty()})
			}
		}
	}
	return GraphExpr(g), nil
}

// extraMembers builds the members an object may have besides its named
// properties: one rule per region of keys (which patternProperties match
// them), each with the value schemas that apply there.
func (c *jsonCompiler) extraMembers(cj *conj, names []string, pn *conj) ([]*Expr, error) {
	var pats []string
	closed := false
	for _, p := range cj.objParts {
		for _, pp := range p.patterns {
			if !slices.Contains(pats, pp.src) {
				pats = append(pats, pp.src)
			}
		}
		if p.extra != nil && p.extra.s == falseSchema {
			closed = true
		}
	}
	if closed && len(pats) == 0 {
		return nil, nil
	}
	lim := c.bud
	// The decoded keys allowed at all: not a named or forbidden property,
	// and propertyNames' string constraints.
	base, err := compileExpr(Star(anyRune), lim)
	if err != nil {
		return nil, err
	}
	if len(names) > 0 {
		alts := make([]*Expr, len(names))
		for i, n := range names {
			alts[i] = Lit(n)
		}
		nd, err := compileExpr(Alt(alts...), lim)
		if err != nil {
			return nil, err
		}
		if base, err = product(base, nd, func(x, y bool) bool { return x && !y }, lim); err != nil {
			return nil, err
		}
	}
	if pn != nil {
		if pn.never || pn.types&tStr == 0 {
			return nil, nil
		}
		var pd *dfa
		if pn.hasValues {
			var alts []*Expr
			for _, v := range pn.values {
				if s, ok := v.(string); ok && pn.valid(s) {
					alts = append(alts, Lit(s))
				}
			}
			pd, err = compileExpr(Alt(alts...), lim)
		} else {
			pd, err = c.stringDFA(pn)
		}
		if err != nil {
			return nil, err
		}
		if pd != nil {
			if base, err = product(base, pd, func(x, y bool) bool { return x && y }, lim); err != nil {
				return nil, err
			}
		}
	}
	pdfa := make([]*dfa, len(pats))
	for i, p := range pats {
		e, err := searchExpr(p)
		if err != nil {
			return nil, refuse("patternProperties", cj.ptr, err.Error())
		}
		if pdfa[i], err = compileExpr(e, lim); err != nil {
			return nil, fmt.Errorf("patternProperties %q at %s: %w", p, cj.ptr, err)
		}
	}
	var subsets [][]int
	if len(pats) <= maxPatternRegions {
		for mask := 0; mask < 1<<len(pats); mask++ {
			var s []int
			for i := range pats {
				if mask&(1<<i) != 0 {
					s = append(s, i)
				}
			}
			subsets = append(subsets, s)
		}
	} else {
		for i := range pats {
			for j := i + 1; j < len(pats); j++ {
				both, err := product(pdfa[i], pdfa[j], func(x, y bool) bool { return x && y }, lim)
				if err != nil {
					return nil, err
				}
				if !both.isEmpty() {
					return nil, refuse("patternProperties", cj.ptr, fmt.Sprintf("more than %d patterns, and %q and %q overlap", maxPatternRegions, pats[i], pats[j]))
				}
			}
		}
		subsets = append(subsets, nil)
		for i := range pats {
			subsets = append(subsets, []int{i})
		}
	}
	var out []*Expr
	for _, sub := range subsets {
		d := base
		for i := range pats {
			in := slices.Contains(sub, i)
			keep := func(x, y bool) bool { return x && y == in }
			var err error
			if d, err = product(d, pdfa[i], keep, lim); err != nil {
				return nil, err
			}
		}
		if d.isEmpty() {
			continue
		}
		var vals []sref
		for _, p := range cj.objParts {
			matched := false
			for _, pp := range p.patterns {
				if slices.Contains(sub, slices.Index(pats, pp.src)) {
					vals = append(vals, sref{s: pp.re})
					matched = true
				}
			}
			if !matched && p.extra != nil {
				vals = append(vals, *p.extra)
			}
		}
		v, err := c.compileList(vals)
		if err != nil {
			return nil, err
		}
		if v.op == opNone {
			continue
		}
		key, err := c.quoted(d, fmt.Sprintf("%s/key%v", cj.ptr, sub))
		if err != nil {
			return nil, err
		}
		var names []string
		for _, i := range sub {
			names = append(names, pats[i])
		}
		out = append(out, Ref(c.b.Rule(fmt.Sprintf("%s/member[%s]", cj.ptr, strings.Join(names, "|")), Seq(key, c.ws, Lit(":"), c.ws, v))))
	}
	return out, nil
}
