package server

import (
	"crypto/rand"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/toolcall"
)

// shaper parses one choice's output into content, reasoning and tool calls
// as it streams (toolcall.Parser), and names each call with an id unique
// to it. Whole answers feed the text once; streams feed each delta.
type shaper struct {
	p        *toolcall.Parser
	idPrefix string
	ids      []string         // per call, assigned at its CallBegin
	events   []toolcall.Event // every event so far, for the whole result
}

// newShaper parses by o; idPrefix starts call ids ("call_", "fc_",
// "toolu_").
func newShaper(o *outShape, idPrefix string) *shaper {
	s := &shaper{p: toolcall.NewParser(o.syntax, o.reasoning), idPrefix: idPrefix}
	if o.syntax != nil && o.syntax.Name == "mistral" {
		s.idPrefix = "" // Mistral's templates take nine letters and digits only
	}
	return s
}

// newCallID is a call id: idPrefix and 26 random letters and digits, or,
// without a prefix, nine (Mistral's form).
func (s *shaper) newCallID() string {
	if s.idPrefix == "" {
		return rand.Text()[:9]
	}
	return s.idPrefix + rand.Text()
}

// feed parses the next text and returns the events it decided.
func (s *shaper) feed(text string) []toolcall.Event {
	return s.note(s.p.Feed(text))
}

// close ends the output and returns the last events.
func (s *shaper) close() []toolcall.Event {
	return s.note(s.p.Close())
}

func (s *shaper) note(evs []toolcall.Event) []toolcall.Event {
	for _, e := range evs {
		if e.Kind == toolcall.CallBegin {
			for len(s.ids) <= e.Call {
				s.ids = append(s.ids, s.newCallID())
			}
		}
	}
	s.events = append(s.events, evs...)
	return evs
}

// callID is call i's id.
func (s *shaper) callID(i int) string {
	if i < len(s.ids) {
		return s.ids[i]
	}
	return ""
}

// result is the whole output parsed (so far).
func (s *shaper) result() toolcall.Result { return toolcall.Collect(s.events) }

// calls is result's calls with their ids.
func (s *shaper) calls(r toolcall.Result) []toolCall {
	out := make([]toolCall, len(r.Calls))
	for i, c := range r.Calls {
		out[i] = toolCall{ID: s.callID(i), Name: c.Name, Arguments: c.Arguments}
	}
	return out
}

// finishWith is the finish reason of an output with calls: a model that
// stopped after calling tools finished for "tool_calls".
func finishWith(r executor.FinishReason, calls int) *string {
	if r == executor.FinishStop && calls > 0 {
		s := "tool_calls"
		return &s
	}
	return finishString(r)
}

// shapedWhole parses a whole output d with o.
func shapedWhole(o *outShape, idPrefix, text string) (*shaper, toolcall.Result) {
	s := newShaper(o, idPrefix)
	s.feed(text)
	s.close()
	return s, s.result()
}
