package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/turnstile-llm/turnstile/guided"
	"github.com/turnstile-llm/turnstile/toolcall"
)

// This file reads OpenAI's tool fields (tools, tool_choice,
// parallel_tool_calls, a message's tool_calls and tool_call_id) into a
// convo, and builds a conversation's job: the prompt, the tool grammar and
// the output's shape.

// wireTool is one element of OpenAI's tools.
type wireTool struct {
	Type     string        `json:"type"`
	Function *wireFunction `json:"function"`
}

type wireFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// wireToolCall is one element of an assistant message's tool_calls.
type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function *struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// openAITools decodes OpenAI's tools array.
func openAITools(raw json.RawMessage) ([]toolDef, *APIError) {
	return decodeTools(raw, func(at string, t *wireTool) (toolDef, *APIError) {
		if t.Type != "function" {
			return toolDef{}, badRequest(at+".type", "invalid_value", "%s.type %q: only function tools are supported", at, clipValue(t.Type))
		}
		if t.Function == nil {
			return toolDef{}, badRequest(at+".function", "invalid_value", "%s.function is missing", at)
		}
		return toolDef{Name: t.Function.Name, Description: t.Function.Description,
			Parameters: t.Function.Parameters, Strict: t.Function.Strict != nil && *t.Function.Strict}, nil
	})
}

// openAIToolChoice decodes tool_choice: "none", "auto", "required" or
// {"type": "function", "function": {"name": ...}}. Absent: auto with
// tools, none without.
func openAIToolChoice(raw json.RawMessage, haveTools bool) (toolChoice, *APIError) {
	if !present(raw) {
		if haveTools {
			return toolChoice{Mode: toolsAuto}, nil
		}
		return toolChoice{Mode: toolsNone}, nil
	}
	t := bytes.TrimSpace(raw)
	if t[0] == '"' {
		var s string
		_ = json.Unmarshal(t, &s)
		switch s {
		case "none":
			return toolChoice{Mode: toolsNone}, nil
		case "auto":
			return toolChoice{Mode: toolsAuto}, nil
		case "required":
			return toolChoice{Mode: toolsRequired}, nil
		}
		return toolChoice{}, badRequest("tool_choice", "invalid_value", "tool_choice %q: must be none, auto, required or an object naming a function", clipValue(s))
	}
	var o struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if e := unmarshalAt(t, &o, "tool_choice"); e != nil {
		return toolChoice{}, e
	}
	if o.Type != "function" || o.Function == nil || o.Function.Name == "" {
		return toolChoice{}, badRequest("tool_choice", "invalid_value", `tool_choice %s: expected {"type": "function", "function": {"name": ...}}`, clipValue(compact(raw)))
	}
	return toolChoice{Mode: toolsNamed, Name: o.Function.Name}, nil
}

// openAIToolCalls decodes an assistant message's tool_calls.
func openAIToolCalls(raw json.RawMessage, at string) ([]toolCall, *APIError) {
	if !present(raw) {
		return nil, nil
	}
	var calls []toolCall
	e := eachElem(raw, at, func(k int, elem json.RawMessage) *APIError {
		ca := fmt.Sprintf("%s[%d]", at, k)
		if k >= maxToolCalls {
			return badRequest(at, "invalid_value", "%s: more than %d calls", at, maxToolCalls)
		}
		var w wireToolCall
		if e := decodeElem(elem, &w, ca); e != nil {
			return e
		}
		switch {
		case w.Type != "" && w.Type != "function":
			return badRequest(ca+".type", "invalid_value", "%s.type %q: only function calls are supported", ca, clipValue(w.Type))
		case w.ID == "" || len(w.ID) > maxToolIDLength:
			return badRequest(ca+".id", "invalid_value", "%s.id: must be 1 to %d bytes", ca, maxToolIDLength)
		case w.Function == nil || w.Function.Name == "":
			return badRequest(ca+".function.name", "invalid_value", "%s.function.name is missing", ca)
		}
		if _, e := parseArguments(w.Function.Arguments, ca+".function.arguments"); e != nil {
			return e
		}
		calls = append(calls, toolCall{ID: w.ID, Name: w.Function.Name, Arguments: w.Function.Arguments})
		return nil
	})
	return calls, e
}

// renderConvo checks c's tools and message sequence, renders its prompt
// (ending with the assistant's cue when cue) and encodes it as the chat
// endpoints submit it. It returns the tokens and the rendered text.
func (p *parser) renderConvo(c *convo, cue bool) ([]int32, string, *APIError) {
	if e := c.checkTools(); e != nil {
		return nil, "", e
	}
	if e := c.checkSequence(); e != nil {
		return nil, "", e
	}
	// Tools are rendered into the prompt: like message content, they are
	// bounded before rendering costs time and memory in proportion.
	toolBytes := 0
	for _, t := range c.tools {
		toolBytes += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	if e := p.checkBytes(c.toolsParam, "the tools", toolBytes); e != nil {
		return nil, "", e
	}
	text, bos, err := p.chat.renderCue(c.msgs, c.tools, c.kwargs, cue)
	if err != nil {
		return nil, "", badRequest(c.msgsParam, "invalid_value", "%s: %v", c.msgsParam, err)
	}
	if e := p.checkBytes(c.msgsParam, "the rendered prompt", len(text)); e != nil {
		return nil, "", e
	}
	prompt := p.chat.encode(p.tok, text, bos || p.tok.AddBOS())
	if len(prompt) == 0 {
		return nil, "", badRequest(c.msgsParam, "invalid_value", "%s: the rendered prompt encodes to no tokens", c.msgsParam)
	}
	return prompt, text, nil
}

// convoJob builds a conversation's job: it checks the tools and the
// message sequence, renders the prompt, attaches the tool grammar (or the
// request's own constraint) and the output's shape, then finishes the job
// with the shared fields f.
func (p *parser) convoJob(c *convo, j *job, f *sharedFields, maxTok *int, param string) (*job, *APIError) {
	if len(c.tools) > 0 && c.choice.Mode != toolsNone {
		if own, e := parseConstraint(&f.constraintFields); e != nil || own != nil {
			if e != nil {
				return nil, e
			}
			return nil, badRequest(own.param, "invalid_value", "%s and %s both constrain the output: give one (or tool_choice none)", c.toolsParam, own.param)
		}
	}
	prompt, text, e := p.renderConvo(c, true)
	if e != nil {
		return nil, e
	}
	shape := &outShape{}
	thinking := false
	if p.chat.thinks {
		// The template may open the reasoning block itself (DeepSeek-R1)
		// or close an empty one to turn thinking off (Qwen3 with
		// enable_thinking false).
		tail := strings.TrimRight(text, " \t\r\n")
		shape.reasoning = toolcall.Reasoning{Open: thinkOpen, Close: thinkClose, StartsInside: strings.HasSuffix(tail, thinkOpen)}
		thinking = !strings.HasSuffix(tail, thinkClose)
	}
	if len(c.tools) > 0 && c.choice.Mode != toolsNone {
		s := p.chat.syntax
		shape.syntax = &s
	}
	j, e = p.finish(j, f, maxTok, param, [][]int32{prompt})
	if e != nil {
		return nil, e
	}
	if shape.active() {
		j.shape = shape
	}
	reasoningEnd := ""
	if thinking {
		reasoningEnd = thinkClose
	}
	if shape.syntax != nil {
		tc, e := p.toolConstraint(c, shape.syntax, reasoningEnd)
		if e != nil {
			return nil, e
		}
		j.constraint = tc
	} else if j.constraint != nil && thinking && j.constraint.spec.Kind == guided.JSONSchema {
		// Structured output applies after the reasoning: a tag of one
		// structure, the schema, after the reasoning block.
		j.constraint = afterReasoning(j.constraint, reasoningEnd)
	}
	return j, nil
}

// tagJSON is the JSON form of a structural tag (grammar.ParseStructuralTag).
type tagJSON struct {
	Type         string          `json:"type"`
	Structures   []tagStructJSON `json:"structures"`
	Triggers     []string        `json:"triggers"`
	Text         string          `json:"text"`
	Min          int             `json:"min,omitempty"`
	Max          int             `json:"max,omitempty"`
	ReasoningEnd string          `json:"reasoning_end,omitempty"`
}

// marshal writes t as JSON, markers unescaped ("<tool_call>", not
// "\u003ctool_call\u003e").
func (t tagJSON) marshal() (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(t); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

type tagStructJSON struct {
	Begin  string          `json:"begin"`
	Schema json.RawMessage `json:"schema"`
	End    string          `json:"end"`
}

// anyObject is the arguments' schema of a tool without parameters.
var anyObject = json.RawMessage(`{"type":"object"}`)

// toolConstraint is the grammar of a request's tool calls in the model's
// syntax: required and named choices start with a call; auto lets the
// model write text and constrains a call from its opening marker on (the
// tag's triggers); without parallel calls the grammar allows one call, so
// generation stops after it rather than being cut afterwards.
func (p *parser) toolConstraint(c *convo, s *toolcall.Syntax, reasoningEnd string) (*constraint, *APIError) {
	if s.Prefix() != "" || s.Suffix() != "" {
		// A syntax that wraps all calls (Mistral's [TOOL_CALLS][...]) is
		// parsed but not constrained: its opening marker is a control
		// token no grammar spells.
		if c.choice.Mode == toolsAuto {
			return nil, nil
		}
		return nil, badRequest(c.choiceParam, "unsupported", "%s: calls in this model's %s syntax cannot be enforced (use auto)", c.choiceParam, s.Name)
	}
	key := tagKey(c, s, reasoningEnd)
	tag, ok := p.tags.get(key)
	if !ok {
		var err error
		if tag, err = buildTag(c, s, reasoningEnd); err != nil {
			return nil, badRequest(c.toolsParam, "invalid_value", "%s: %v", c.toolsParam, err)
		}
		p.tags.add(key, tag)
	}
	return &constraint{spec: guided.Spec{Kind: guided.StructuralTag, Source: tag.src}, param: c.toolsParam,
		optional: c.choice.Mode == toolsAuto, rename: structureNames(c, tag.toolIndex)}, nil
}

// toolTag is a request's tool grammar as a structural tag's JSON, and the
// tool of each of its structures.
type toolTag struct {
	src       string
	toolIndex []int
}

// tagCache caches tool tags by what they are built from (nil: none).
type tagCache struct{ c *lru.Cache[[32]byte, toolTag] }

// tagEntries bounds the tag cache (distinct tool sets and choices).
const tagEntries = 1024

func newTagCache() (tagCache, error) {
	c, err := lru.New[[32]byte, toolTag](tagEntries)
	return tagCache{c}, err
}

func (t tagCache) get(k [32]byte) (toolTag, bool) {
	if t.c == nil {
		return toolTag{}, false
	}
	return t.c.Get(k)
}

func (t tagCache) add(k [32]byte, v toolTag) {
	if t.c != nil {
		t.c.Add(k, v)
	}
}

// tagKey identifies what buildTag reads: the syntax, the choice, the
// tools' names and schemas, the reasoning end.
func tagKey(c *convo, s *toolcall.Syntax, reasoningEnd string) [32]byte {
	h := sha256.New()
	var n [8]byte
	put := func(b []byte) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	put([]byte(s.Name))
	put([]byte{byte(c.choice.Mode), boolByte(c.parallel)})
	put([]byte(c.choice.Name))
	put([]byte(reasoningEnd))
	for _, t := range c.tools {
		put([]byte(t.Name))
		put(t.Parameters)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// buildTag writes the tool grammar: required and named choices start
// with a call; auto lets the model write text and constrains a call from
// its opening marker on (the tag's triggers); without parallel calls the
// grammar allows one call, so generation stops after it rather than being
// cut afterwards.
func buildTag(c *convo, s *toolcall.Syntax, reasoningEnd string) (toolTag, error) {
	t := tagJSON{Type: "structural_tag", Triggers: s.Triggers(), ReasoningEnd: reasoningEnd}
	var toolIndex []int
	for i, tool := range c.tools {
		if c.choice.Mode == toolsNamed && tool.Name != c.choice.Name {
			continue
		}
		schema := tool.Parameters
		if !present(schema) {
			schema = anyObject
		}
		t.Structures = append(t.Structures, tagStructJSON{Begin: s.Begin(tool.Name), Schema: compactRaw(schema), End: s.End()})
		toolIndex = append(toolIndex, i)
	}
	switch c.choice.Mode {
	case toolsAuto:
		t.Text = "before"
	default:
		t.Text, t.Min = "none", 1
	}
	if !c.parallel || c.choice.Mode == toolsNamed || s.Sep() != "\n" {
		// One call: asked for, or the syntax separates calls with more
		// than whitespace (Llama 3's "; "), which the grammar cannot
		// place between structures.
		t.Max = 1
	}
	src, err := t.marshal()
	return toolTag{src: src, toolIndex: toolIndex}, err
}

// structurePattern finds a structure's index in a grammar error.
var structurePattern = regexp.MustCompile(`structures\[(\d+)\]\.schema`)

// structureNames maps the grammar's "structures[k].schema" in errors to
// the tool's field.
func structureNames(c *convo, toolIndex []int) func(string) string {
	return func(msg string) string {
		return structurePattern.ReplaceAllStringFunc(msg, func(m string) string {
			k, err := strconv.Atoi(structurePattern.FindStringSubmatch(m)[1])
			if err != nil || k >= len(toolIndex) {
				return m
			}
			return c.toolField(toolIndex[k], c.schemaField)
		})
	}
}

// afterReasoning moves a JSON-schema constraint behind the reasoning
// block: a structural tag holding the schema once, after reasoningEnd.
func afterReasoning(c *constraint, reasoningEnd string) *constraint {
	t := tagJSON{Type: "structural_tag", Structures: []tagStructJSON{{Schema: json.RawMessage(c.spec.Source)}},
		Triggers: []string{}, Text: "none", Min: 1, Max: 1, ReasoningEnd: reasoningEnd}
	src, err := t.marshal()
	if err != nil {
		return c // the schema is JSON (parseConstraint checked); cannot fail
	}
	return &constraint{spec: guided.Spec{Kind: guided.StructuralTag, Source: src, Whitespace: c.spec.Whitespace}, param: c.param}
}
