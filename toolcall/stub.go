// Package toolcall: TEMPORARY STUB while the real package is written on branch toolcall; deleted at merge.
package toolcall

import (
	"encoding/json"
	"strings"
)

type Syntax struct {
	Name string
}

func Known(name string) (Syntax, bool) {
	switch name {
	case "hermes", "llama3", "mistral", "fallback":
		return Syntax{Name: name}, true
	}
	return Syntax{}, false
}

func FromTemplate(rendered, name, args string) (Syntax, bool) {
	switch {
	case strings.Contains(rendered, "<tool_call>"):
		return Syntax{Name: "hermes"}, true
	case strings.Contains(rendered, `"parameters"`):
		return Syntax{Name: "llama3"}, true
	}
	return Syntax{}, false
}

func q(s string) string { b, _ := json.Marshal(s); return string(b) }

func (s Syntax) Begin(name string) string {
	if s.Name == "llama3" {
		return `{"name": ` + q(name) + `, "parameters": `
	}
	return "<tool_call>\n{\"name\": " + q(name) + ", \"arguments\": "
}
func (s Syntax) End() string {
	if s.Name == "llama3" {
		return "}"
	}
	return "}\n</tool_call>"
}
func (s Syntax) Sep() string {
	if s.Name == "llama3" {
		return "; "
	}
	return "\n"
}
func (s Syntax) Prefix() string { return "" }
func (s Syntax) Suffix() string { return "" }
func (s Syntax) Triggers() []string {
	if s.Name == "llama3" {
		return []string{`{"name": "`}
	}
	return []string{"<tool_call>"}
}
func (s Syntax) Format(calls []Call) string {
	var b strings.Builder
	for i, c := range calls {
		if i > 0 {
			b.WriteString(s.Sep())
		}
		b.WriteString(s.Begin(c.Name) + c.Arguments + s.End())
	}
	return b.String()
}

type Call struct{ Name, Arguments string }

type Reasoning struct {
	Open, Close  string
	StartsInside bool
}

type Kind uint8

const (
	Content Kind = iota
	Thinking
	CallBegin
	CallArgs
)

type Event struct {
	Kind Kind
	Text string
	Call int
	Name string
}

type Parser struct {
	s   *Syntax
	r   Reasoning
	buf strings.Builder
}

func NewParser(s *Syntax, r Reasoning) *Parser { return &Parser{s: s, r: r} }
func (p *Parser) Feed(text string) []Event   { p.buf.WriteString(text); return nil }
func (p *Parser) Close() []Event {
	res := Parse(p.s, p.r, p.buf.String())
	var ev []Event
	if res.Reasoning != "" {
		ev = append(ev, Event{Kind: Thinking, Text: res.Reasoning})
	}
	if res.Content != "" {
		ev = append(ev, Event{Kind: Content, Text: res.Content})
	}
	for i, c := range res.Calls {
		ev = append(ev, Event{Kind: CallBegin, Call: i, Name: c.Name}, Event{Kind: CallArgs, Call: i, Text: c.Arguments})
	}
	return ev
}

type Result struct {
	Content, Reasoning string
	Calls              []Call
}

func Parse(s *Syntax, r Reasoning, text string) Result {
	var res Result
	if r.Close != "" {
		t := strings.TrimLeft(text, " \n")
		if r.StartsInside || strings.HasPrefix(t, r.Open) {
			t = strings.TrimPrefix(t, r.Open)
			if i := strings.Index(t, r.Close); i >= 0 {
				res.Reasoning = t[:i]
				text = strings.TrimLeft(t[i+len(r.Close):], " \n")
			} else {
				res.Reasoning = t
				return res
			}
		}
	}
	if s == nil {
		res.Content = text
		return res
	}
	for {
		i := strings.Index(text, "<tool_call>")
		if s.Name == "llama3" {
			i = strings.Index(text, `{"name"`)
		}
		if i < 0 {
			res.Content += text
			return res
		}
		res.Content += text[:i]
		rest := strings.TrimPrefix(text[i:], "<tool_call>")
		dec := json.NewDecoder(strings.NewReader(rest))
		var v struct {
			Name       string          `json:"name"`
			Arguments  json.RawMessage `json:"arguments"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if err := dec.Decode(&v); err != nil {
			res.Content += text[i:]
			return res
		}
		a := v.Arguments
		if a == nil {
			a = v.Parameters
		}
		res.Calls = append(res.Calls, Call{Name: v.Name, Arguments: string(a)})
		text = strings.TrimLeft(strings.TrimPrefix(strings.TrimLeft(rest[dec.InputOffset():], " \n"), "</tool_call>"), " \n")
	}
}

func Collect(events []Event) Result {
	var r Result
	for _, e := range events {
		switch e.Kind {
		case Content:
			r.Content += e.Text
		case Thinking:
			r.Reasoning += e.Text
		case CallBegin:
			r.Calls = append(r.Calls, Call{Name: e.Name})
		case CallArgs:
			r.Calls[e.Call].Arguments += e.Text
		}
	}
	return r
}
