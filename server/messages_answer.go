package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/toolcall"
)

// This file answers Anthropic's Messages API: a whole message, or the
// typed event stream (message_start, content blocks, message_delta,
// message_stop), and count_tokens.

// msgResponse is a message: the whole answer, or message_start's (empty).
type msgResponse struct {
	ID           string     `json:"id"`
	Type         string     `json:"type"`
	Role         string     `json:"role"`
	Model        string     `json:"model"`
	Content      []msgBlock `json:"content"`
	StopReason   *string    `json:"stop_reason"`
	StopSequence *string    `json:"stop_sequence"`
	Usage        msgUsage   `json:"usage"`
}

// msgUsage is Anthropic's usage: input_tokens are the prompt tokens not
// read from the prefix cache (cache_read_input_tokens); turnstile never
// reports cache creation.
type msgUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

// msgBlock is a content block: text, thinking or tool_use (pointers keep
// an empty text or thinking present).
type msgBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// msgDelta is a content_block_delta's delta.
type msgDelta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	Thinking    *string `json:"thinking,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

type msgStartEvent struct {
	Type    string      `json:"type"`
	Message msgResponse `json:"message"`
}

type blockStartEvent struct {
	Type         string   `json:"type"`
	Index        int      `json:"index"`
	ContentBlock msgBlock `json:"content_block"`
}

type blockDeltaEvent struct {
	Type  string   `json:"type"`
	Index int      `json:"index"`
	Delta msgDelta `json:"delta"`
}

type blockStopEvent struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

type msgDeltaEvent struct {
	Type  string `json:"type"`
	Delta struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage msgUsage `json:"usage"`
}

type typeOnly struct {
	Type string `json:"type"`
}

// blocks turns parsed output events into content blocks: a block starts
// with the first event of its kind and stops when another kind (or call)
// starts, or at the end. With emit set each change is sent as a stream
// event; the blocks are kept whole either way.
type blocks struct {
	sh     *shaper // names calls; nil for plain text output
	out    []msgBlock
	args   []bytes.Buffer // per block: a tool_use's arguments so far
	open   bool           // the last block is still open
	call   int            // the open tool_use block's call
	emit   func(name string, v any) error
	hasUse bool
}

func strp(s string) *string { return &s }

// add folds evs in.
func (b *blocks) add(evs []toolcall.Event) error {
	for _, e := range evs {
		if e.Text == "" && e.Kind != toolcall.CallBegin {
			continue
		}
		var err error
		switch e.Kind {
		case toolcall.Content:
			if err = b.want("text", -1, msgBlock{Type: "text", Text: strp("")}); err == nil {
				last := &b.out[len(b.out)-1]
				*last.Text += e.Text
				err = b.send("content_block_delta", blockDeltaEvent{Type: "content_block_delta", Index: len(b.out) - 1,
					Delta: msgDelta{Type: "text_delta", Text: strp(e.Text)}})
			}
		case toolcall.Thinking:
			if err = b.want("thinking", -1, msgBlock{Type: "thinking", Thinking: strp(""), Signature: strp("")}); err == nil {
				last := &b.out[len(b.out)-1]
				*last.Thinking += e.Text
				err = b.send("content_block_delta", blockDeltaEvent{Type: "content_block_delta", Index: len(b.out) - 1,
					Delta: msgDelta{Type: "thinking_delta", Thinking: strp(e.Text)}})
			}
		case toolcall.CallBegin:
			id := ""
			if b.sh != nil {
				id = b.sh.callID(e.Call)
			}
			b.hasUse = true
			err = b.want("tool_use", e.Call, msgBlock{Type: "tool_use", ID: id, Name: e.Name, Input: json.RawMessage(`{}`)})
		case toolcall.CallArgs:
			if !b.open || b.out[len(b.out)-1].Type != "tool_use" || b.call != e.Call {
				continue // arguments of a call that is not open: cannot happen
			}
			b.args[len(b.out)-1].WriteString(e.Text)
			err = b.send("content_block_delta", blockDeltaEvent{Type: "content_block_delta", Index: len(b.out) - 1,
				Delta: msgDelta{Type: "input_json_delta", PartialJSON: strp(e.Text)}})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// want makes sure the open block is of kind typ (and call, for tool_use),
// stopping the open one and starting start otherwise.
func (b *blocks) want(typ string, call int, start msgBlock) error {
	if b.open && b.out[len(b.out)-1].Type == typ && (typ != "tool_use" || b.call == call) {
		return nil
	}
	if err := b.stop(); err != nil {
		return err
	}
	b.out = append(b.out, start)
	b.args = append(b.args, bytes.Buffer{})
	b.open, b.call = true, call
	ev := start
	if ev.Text != nil {
		ev.Text = strp("")
	}
	if ev.Thinking != nil {
		ev.Thinking = strp("")
	}
	return b.send("content_block_start", blockStartEvent{Type: "content_block_start", Index: len(b.out) - 1, ContentBlock: ev})
}

// stop stops the open block.
func (b *blocks) stop() error {
	if !b.open {
		return nil
	}
	b.open = false
	return b.send("content_block_stop", blockStopEvent{Type: "content_block_stop", Index: len(b.out) - 1})
}

func (b *blocks) send(name string, v any) error {
	if b.emit == nil {
		return nil
	}
	return b.emit(name, v)
}

// whole is the blocks with each tool_use's input set to its arguments (a
// JSON object; arguments that are not one are kept as a JSON string
// rather than lost).
func (b *blocks) whole() []msgBlock {
	out := make([]msgBlock, len(b.out))
	for i, blk := range b.out {
		if blk.Type == "tool_use" {
			args := bytes.TrimSpace(b.args[i].Bytes())
			switch {
			case len(args) == 0:
				blk.Input = json.RawMessage(`{}`)
			case args[0] == '{' && json.Valid(args):
				blk.Input = json.RawMessage(bytes.Clone(args))
			default:
				q, _ := json.Marshal(string(args))
				blk.Input = q
			}
		}
		out[i] = blk
	}
	return out
}

// stopReason is Anthropic's stop_reason and stop_sequence of an output
// that finished for r (with the stop string stop) and made calls when
// calls.
func stopReason(d *executor.Delta, calls bool) (*string, *string) {
	switch {
	case d.FinishReason == executor.FinishLength:
		return strp("max_tokens"), nil
	case calls:
		return strp("tool_use"), nil
	case d.StopString != "":
		return strp("stop_sequence"), strp(d.StopString)
	default:
		return strp("end_turn"), nil
	}
}

// msgUsageOf is d's usage in Anthropic's terms.
func msgUsageOf(d *executor.Delta) msgUsage {
	return msgUsage{InputTokens: d.Usage.Prompt - d.Usage.CachedPrompt, CacheReadInputTokens: d.Usage.CachedPrompt,
		OutputTokens: d.Usage.Completion}
}

// messagesProtocol answers POST /v1/messages.
func (s *Server) messagesProtocol() protocol {
	return protocol{parse: s.parse.anthropicMessages, answer: s.messagesAnswer, errs: anthropicErrors{}, idPrefix: "msg_"}
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	s.serveJob(w, r, s.messagesProtocol())
}

// handleCountTokens answers POST /v1/messages/count_tokens: the rendered
// prompt's tokens (tools included), without the engine.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	errs := anthropicErrors{}
	if s.draining.Load() {
		errs.whole(w, &APIError{Status: http.StatusServiceUnavailable, Type: errUnavailable, Code: "shutting_down",
			Message: "the server is shutting down"})
		return
	}
	j, e := s.readJob(w, r, s.parse.countTokens)
	switch {
	case e != nil:
		errs.whole(w, e)
	case j == nil:
		clientGone(w)
	default:
		writeJSON(w, map[string]int{"input_tokens": len(j.reqs[0].PromptTokens)})
	}
}

// messagesAnswer writes the answer, whole or streamed. A Messages request
// has one choice.
func (s *Server) messagesAnswer(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream) {
	var sh *shaper
	if a.j.shape != nil {
		sh = newShaper(a.j.shape, "toolu_")
	}
	// events parses text (all of it when last).
	events := func(text string, last bool) []toolcall.Event {
		if sh == nil {
			return []toolcall.Event{{Kind: toolcall.Content, Text: text}}
		}
		evs := sh.feed(text)
		if last {
			evs = append(evs, sh.close()...)
		}
		return evs
	}
	if !a.j.stream {
		ds, ok := s.gather(ctx, w, a, streams)
		if !ok {
			return
		}
		d := &ds[0]
		b := &blocks{sh: sh}
		_ = b.add(events(d.Text, true))
		reason, seq := stopReason(d, b.hasUse)
		writeJSON(w, msgResponse{ID: a.id, Type: "message", Role: "assistant", Model: a.model, Content: b.whole(),
			StopReason: reason, StopSequence: seq, Usage: msgUsageOf(d)})
		return
	}
	sse := newSSE(w)
	b := &blocks{sh: sh, emit: sse.sendEvent}
	start := msgStartEvent{Type: "message_start", Message: msgResponse{ID: a.id, Type: "message", Role: "assistant",
		Model: a.model, Content: []msgBlock{}, Usage: msgUsage{InputTokens: len(a.j.reqs[0].PromptTokens)}}}
	if sse.sendEvent("message_start", start) != nil || sse.sendEvent("ping", typeOnly{Type: "ping"}) != nil {
		clientGone(w)
		return
	}
	final, ok := s.relay(ctx, w, a, streams, sse, func(_ int, d *executor.Delta) error {
		return b.add(events(d.Text, d.FinishReason != executor.FinishNone))
	})
	if !ok {
		return
	}
	d := &final[0]
	md := msgDeltaEvent{Type: "message_delta", Usage: msgUsageOf(d)}
	md.Delta.StopReason, md.Delta.StopSequence = stopReason(d, b.hasUse)
	if b.stop() != nil || sse.sendEvent("message_delta", md) != nil ||
		sse.sendEvent("message_stop", typeOnly{Type: "message_stop"}) != nil {
		clientGone(w)
	}
}
