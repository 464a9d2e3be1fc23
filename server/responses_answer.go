package server

import (
	"context"
	"net/http"
	"strings"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/toolcall"
)

// This file writes Responses answers: the response object whole, or its
// typed event stream. One builder turns the output's parsed events into
// output items for both, so a streamed answer and a whole one hold the same
// items; the whole answer is the builder without an event sink.

// respBuilder turns one output's parsed events (content, reasoning, tool
// calls) into output items, sending the stream's events as it goes when
// sse is set.
type respBuilder struct {
	t   *respTurn
	sh  *shaper // nil: the output is plain text
	sse *sseWriter
	seq int // the next event's sequence_number

	items []any // *respReasoningItem, *respMessageItem, *respCallItem
	// The open item: one of these, at output index idx.
	rs   *respReasoningItem
	msg  *respMessageItem
	call *respCallItem
	text strings.Builder // the open reasoning or message item's text
	// What the output says, for the stored conversation.
	content, reasoning strings.Builder
	calls              []toolCall
	sawMessage         bool
}

func newRespBuilder(j *job, sse *sseWriter) *respBuilder {
	b := &respBuilder{t: j.resp, sse: sse}
	if j.shape != nil {
		b.sh = newShaper(j.shape, "call_")
	}
	return b
}

// event sends one stream event (nothing without a stream).
func (b *respBuilder) event(name string, fields map[string]any) error {
	if b.sse == nil {
		return nil
	}
	fields["type"] = name
	fields["sequence_number"] = b.seq
	b.seq++
	return b.sse.sendEvent(name, fields)
}

// feed parses the next output text; final closes the output.
func (b *respBuilder) feed(text string, final bool) error {
	var evs []toolcall.Event
	if b.sh == nil {
		if text != "" {
			evs = []toolcall.Event{{Kind: toolcall.Content, Text: text}}
		}
	} else {
		evs = b.sh.feed(text)
		if final {
			evs = append(evs, b.sh.close()...)
		}
	}
	for _, e := range evs {
		if err := b.on(e); err != nil {
			return err
		}
	}
	return nil
}

// on applies one parsed event.
func (b *respBuilder) on(e toolcall.Event) error {
	switch e.Kind {
	case toolcall.Thinking:
		if e.Text == "" {
			return nil
		}
		b.reasoning.WriteString(e.Text)
		if b.rs == nil {
			if err := b.openItem(&respReasoningItem{Type: "reasoning", ID: newID("rs_"), Summary: []respPart{}, Content: []respPart{}}); err != nil {
				return err
			}
			if err := b.event("response.content_part.added", b.part(respPart{Type: "reasoning_text", Text: ""})); err != nil {
				return err
			}
		}
		b.text.WriteString(e.Text)
		f := b.at()
		f["content_index"], f["delta"] = 0, e.Text
		return b.event("response.reasoning_text.delta", f)
	case toolcall.Content:
		if e.Text == "" {
			return nil
		}
		b.content.WriteString(e.Text)
		if b.msg == nil {
			if err := b.openMessage(); err != nil {
				return err
			}
		}
		b.text.WriteString(e.Text)
		f := b.at()
		f["content_index"], f["delta"], f["logprobs"] = 0, e.Text, []any{}
		return b.event("response.output_text.delta", f)
	case toolcall.CallBegin:
		id := ""
		if b.sh != nil {
			id = b.sh.callID(e.Call)
		}
		b.calls = append(b.calls, toolCall{ID: id, Name: e.Name})
		return b.openItem(&respCallItem{Type: "function_call", ID: newID("fc_"), CallID: id, Name: e.Name, Status: "in_progress"})
	case toolcall.CallArgs:
		if e.Call >= len(b.calls) || b.call == nil {
			return nil
		}
		b.calls[e.Call].Arguments += e.Text
		b.call.Arguments += e.Text
		f := b.at()
		f["delta"] = e.Text
		return b.event("response.function_call_arguments.delta", f)
	}
	return nil
}

func (b *respBuilder) openMessage() error {
	b.sawMessage = true
	if err := b.openItem(&respMessageItem{Type: "message", ID: newID("msg_"), Status: "in_progress", Role: "assistant", Content: []respOutputText{}}); err != nil {
		return err
	}
	return b.event("response.content_part.added", b.part(respOutputText{Type: "output_text", Text: "", Annotations: []any{}, Logprobs: []any{}}))
}

// at is the open item's address fields.
func (b *respBuilder) at() map[string]any {
	f := map[string]any{"output_index": len(b.items) - 1}
	switch {
	case b.rs != nil:
		f["item_id"] = b.rs.ID
	case b.msg != nil:
		f["item_id"] = b.msg.ID
	case b.call != nil:
		f["item_id"] = b.call.ID
	}
	return f
}

func (b *respBuilder) part(p any) map[string]any {
	f := b.at()
	f["content_index"], f["part"] = 0, p
	return f
}

// openItem closes the open item (completed) and opens item.
func (b *respBuilder) openItem(item any) error {
	if err := b.closeItem("completed"); err != nil {
		return err
	}
	b.items = append(b.items, item)
	switch it := item.(type) {
	case *respReasoningItem:
		b.rs = it
	case *respMessageItem:
		b.msg = it
	case *respCallItem:
		b.call = it
	}
	b.text.Reset()
	return b.event("response.output_item.added", map[string]any{"output_index": len(b.items) - 1, "item": item})
}

// closeItem finishes the open item with status.
func (b *respBuilder) closeItem(status string) error {
	var item any
	switch {
	case b.rs != nil:
		p := respPart{Type: "reasoning_text", Text: b.text.String()}
		b.rs.Content = []respPart{p}
		f := b.at()
		f["content_index"], f["text"] = 0, p.Text
		if err := b.event("response.reasoning_text.done", f); err != nil {
			return err
		}
		if err := b.event("response.content_part.done", b.part(p)); err != nil {
			return err
		}
		item = b.rs
	case b.msg != nil:
		p := respOutputText{Type: "output_text", Text: b.text.String(), Annotations: []any{}, Logprobs: []any{}}
		b.msg.Content, b.msg.Status = []respOutputText{p}, status
		f := b.at()
		f["content_index"], f["text"], f["logprobs"] = 0, p.Text, []any{}
		if err := b.event("response.output_text.done", f); err != nil {
			return err
		}
		if err := b.event("response.content_part.done", b.part(p)); err != nil {
			return err
		}
		item = b.msg
	case b.call != nil:
		b.call.Status = status
		f := b.at()
		f["name"], f["arguments"] = b.call.Name, b.call.Arguments
		if err := b.event("response.function_call_arguments.done", f); err != nil {
			return err
		}
		item = b.call
	default:
		return nil
	}
	err := b.event("response.output_item.done", map[string]any{"output_index": len(b.items) - 1, "item": item})
	b.rs, b.msg, b.call = nil, nil, nil
	b.text.Reset()
	return err
}

// finish closes the output: the open item ends with status, and an output
// without a message or a call gets an empty message.
func (b *respBuilder) finish(status string) error {
	if !b.sawMessage && len(b.calls) == 0 {
		if err := b.openMessage(); err != nil {
			return err
		}
	}
	return b.closeItem(status)
}

// response is the response object with status and the items so far.
func (b *respBuilder) response(status string, d *executor.Delta) respObject {
	o := b.t.echo
	o.Status = status
	o.Output = b.items
	if o.Output == nil {
		o.Output = []any{}
	}
	if status == "incomplete" {
		o.IncompleteDetails = &respIncomplete{Reason: "max_output_tokens"}
	}
	if d != nil {
		u := &respUsage{InputTokens: d.Usage.Prompt, OutputTokens: d.Usage.Completion, TotalTokens: d.Usage.Prompt + d.Usage.Completion}
		u.InputTokensDetails.CachedTokens = d.Usage.CachedPrompt
		o.Usage = u
	}
	return o
}

// assistant is the output as the conversation's next message.
func (b *respBuilder) assistant() message {
	return message{Role: "assistant", Content: b.content.String(), Reasoning: b.reasoning.String(), ToolCalls: b.validCalls()}
}

// validCalls are the calls whose arguments are a JSON object (an output
// cut short may end inside one; a later turn could not render it).
func (b *respBuilder) validCalls() []toolCall {
	var out []toolCall
	for _, c := range b.calls {
		if _, e := parseArguments(c.Arguments, "arguments"); e == nil {
			out = append(out, c)
		}
	}
	return out
}

// respStatus is the response status of a finished output.
func respStatus(r executor.FinishReason) string {
	if r == executor.FinishLength {
		return "incomplete"
	}
	return "completed"
}

// respAnswer writes a Responses answer, streamed or whole, and stores it
// when asked.
func (s *Server) respAnswer(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream, rs *respStream) {
	t := a.j.resp
	a.id = t.id
	s.responses.begin(t.chain)
	defer s.responses.end(t.chain)
	if a.j.stream {
		s.respStreamed(ctx, w, a, streams, rs)
		return
	}
	ds, ok := s.gather(ctx, w, a, streams)
	if !ok {
		return
	}
	d := &ds[0]
	b := newRespBuilder(a.j, nil)
	_ = b.feed(d.Text, true) // no sink: nothing fails
	status := respStatus(d.FinishReason)
	_ = b.finish(status)
	o := b.response(status, d)
	body := s.storeResponse(t, b, &o)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// storeResponse encodes o, stores it when the turn asks, and returns the
// JSON.
func (s *Server) storeResponse(t *respTurn, b *respBuilder, o *respObject) []byte {
	var buf strings.Builder
	_ = jsonEncoder(&buf).Encode(o)
	body := []byte(buf.String())
	if t.store {
		msgs := append(t.msgs[:len(t.msgs):len(t.msgs)], b.assistant())
		if !s.responses.put(&storedResponse{id: t.id, chain: t.chain, msgs: msgs, body: body}) {
			s.log.Warn("a response larger than the store's byte bound was not stored", "response", t.id, "bytes", len(body))
		}
	}
	return body
}

// respStreamed answers the typed event stream.
func (s *Server) respStreamed(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream, rs *respStream) {
	sse := newSSE(w)
	b := newRespBuilder(a.j, sse)
	rs.b = b
	for _, name := range []string{"response.created", "response.in_progress"} {
		o := b.response("in_progress", nil)
		if b.event(name, map[string]any{"response": o}) != nil {
			clientGone(w)
			return
		}
	}
	final, ok := s.relay(ctx, w, a, streams, sse, func(_ int, d *executor.Delta) error {
		return b.feed(d.Text, d.FinishReason != executor.FinishNone)
	})
	if !ok {
		return
	}
	d := &final[0]
	if d.FinishReason == executor.FinishAbort {
		if rs.inStream(sse, abortedError()) != nil {
			clientGone(w)
		}
		return
	}
	status := respStatus(d.FinishReason)
	if b.finish(status) != nil {
		clientGone(w)
		return
	}
	o := b.response(status, d)
	s.storeResponse(a.j.resp, b, &o)
	name := "response.completed"
	if status == "incomplete" {
		name = "response.incomplete"
	}
	if b.event(name, map[string]any{"response": o}) != nil {
		clientGone(w)
	}
}

// respStream is the Responses errorStyle: OpenAI's error body before the
// stream begins; in a stream, an error event and then response.failed
// with the response so far.
type respStream struct {
	b *respBuilder // set once the stream began
}

func (rs *respStream) whole(w http.ResponseWriter, e *APIError) { writeError(w, e) }

func (rs *respStream) inStream(sse *sseWriter, e *APIError) error {
	b := rs.b
	if b == nil {
		b = &respBuilder{sse: sse}
	}
	f := map[string]any{"message": e.Message, "code": nil, "param": nil}
	if e.Code != "" {
		f["code"] = e.Code
	}
	if e.Param != "" {
		f["param"] = e.Param
	}
	if err := b.event("error", f); err != nil {
		return err
	}
	if b.t == nil {
		return nil
	}
	o := b.response("failed", nil)
	o.Error = &respError{Code: "server_error", Message: e.Message}
	return b.event("response.failed", map[string]any{"response": o})
}
