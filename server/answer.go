package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/toolcall"
)

// answer shapes one job's engine output as OpenAI responses.
type answer struct {
	j       *job
	id      string
	created int64
	model   string
	tok     Tokenizer
	offsets []int // per choice: text bytes sent so far (completions' text_offset)
	// places frees a choice's in-flight place as soon as its last delta
	// is read, before the client can see it.
	places *hold
	// errs answers failures in the protocol's shape.
	errs errorStyle
}

func (s *Server) newAnswer(j *job, places *hold, pr protocol) *answer {
	prefix := "cmpl-"
	if j.chat {
		prefix = "chatcmpl-"
	}
	if pr.idPrefix != "" {
		prefix = pr.idPrefix
	}
	return &answer{j: j, id: newID(prefix), created: time.Now().Unix(), model: s.cfg.Model,
		tok: s.cfg.Tokenizer, offsets: make([]int, len(j.reqs)), places: places, errs: pr.errs}
}

func jsonEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// finishString is the OpenAI finish_reason of r; nil while unfinished.
func finishString(r executor.FinishReason) *string {
	if r == executor.FinishNone {
		return nil
	}
	s := string(r)
	return &s
}

// usageOf sums the choices' usage: prompt tokens once per prompt,
// completion tokens over every choice.
func (a *answer) usageOf(ds []executor.Delta) *usage {
	u := &usage{PromptTokensDetails: &promptDetail{}}
	for i, d := range ds {
		if i%a.j.n == 0 {
			u.PromptTokens += d.Usage.Prompt
			u.PromptTokensDetails.CachedTokens += d.Usage.CachedPrompt
		}
		u.CompletionTokens += d.Usage.Completion
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// completionLogprobs renders d's tokens for choice i; nil unless asked.
func (a *answer) completionLogprobs(i int, d *executor.Delta) *completionLogprobs {
	if !a.j.logprobs {
		return nil
	}
	lp := &completionLogprobs{Tokens: make([]string, len(d.TokenIDs)), TokenLogprobs: make([]float32, len(d.TokenIDs)),
		TextOffset: make([]int, len(d.TokenIDs))}
	if a.j.topLogprobs > 0 {
		lp.TopLogprobs = make([]map[string]float32, len(d.TokenIDs))
	}
	for k, id := range d.TokenIDs {
		piece := a.tok.Piece(id)
		lp.Tokens[k] = string(piece)
		if k < len(d.Logprobs) {
			lp.TokenLogprobs[k] = d.Logprobs[k]
		}
		lp.TextOffset[k] = a.offsets[i]
		a.offsets[i] += len(piece)
		if lp.TopLogprobs != nil {
			lp.TopLogprobs[k] = a.topMap(id, lp.TokenLogprobs[k], d, k)
		}
	}
	return lp
}

// topMap is the completions top_logprobs entry of d's k-th token: its
// alternatives and the chosen token (id, lp) by piece. Two ids with the
// same piece keep the more likely one's value.
func (a *answer) topMap(id int32, lp float32, d *executor.Delta, k int) map[string]float32 {
	var alts []executor.TokenLogprob
	if k < len(d.TopLogprobs) {
		alts = d.TopLogprobs[k]
	}
	m := make(map[string]float32, len(alts)+1)
	for _, alt := range alts { // most likely first
		if p := string(a.tok.Piece(alt.Token)); !hasKey(m, p) {
			m[p] = alt.Logprob
		}
	}
	if p := string(a.tok.Piece(id)); !hasKey(m, p) {
		m[p] = lp
	}
	return m
}

func hasKey(m map[string]float32, k string) bool {
	_, ok := m[k]
	return ok
}

// pieceBytes is piece as OpenAI's bytes field: one int per byte.
func pieceBytes(piece []byte) []int {
	b := make([]int, len(piece))
	for x, c := range piece {
		b[x] = int(c)
	}
	return b
}

// chatLogprobs renders d's tokens; nil unless asked.
func (a *answer) chatLogprobs(d *executor.Delta) *chatLogprobs {
	if !a.j.logprobs {
		return nil
	}
	out := &chatLogprobs{Content: make([]chatTokenLogprob, len(d.TokenIDs))}
	for k, id := range d.TokenIDs {
		piece := a.tok.Piece(id)
		t := chatTokenLogprob{Token: string(piece), Bytes: pieceBytes(piece), TopLogprobs: []chatTopLogprob{}}
		if k < len(d.Logprobs) {
			t.Logprob = d.Logprobs[k]
		}
		if k < len(d.TopLogprobs) {
			t.TopLogprobs = make([]chatTopLogprob, len(d.TopLogprobs[k]))
			for x, alt := range d.TopLogprobs[k] {
				p := a.tok.Piece(alt.Token)
				t.TopLogprobs[x] = chatTopLogprob{Token: string(p), Logprob: alt.Logprob, Bytes: pieceBytes(p)}
			}
		}
		out.Content[k] = t
	}
	return out
}

// abortedError answers requests the engine aborted while the client was
// still there: the server is shutting down.
func abortedError() *APIError {
	return &APIError{Status: http.StatusServiceUnavailable, Type: errUnavailable, Code: "aborted",
		Message: "the request was aborted: the server is shutting down"}
}

// clientLeft reports whether ctx ended because the client went away (and
// not because the drain deadline aborted it).
func clientLeft(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), errShutdownAbort)
}

// gather reads every choice whole. On a failure it answers the error
// (or notes that the client left) and returns ok false.
func (s *Server) gather(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream) ([]executor.Delta, bool) {
	ds := make([]executor.Delta, len(streams))
	for i, st := range streams {
		d, err := st.ReadAll(ctx)
		if clientLeft(ctx) {
			clientGone(w) // nobody reads an answer
			return nil, false
		}
		if err == nil && d.Err != nil {
			a.errs.whole(w, guidedError(d.Err))
			return nil, false
		}
		if err != nil || d.FinishReason == executor.FinishAbort {
			a.errs.whole(w, abortedError())
			return nil, false
		}
		a.places.free(i)
		ds[i] = d
		s.observe(&d)
	}
	return ds, true
}

// whole collects every choice and answers one OpenAI JSON response.
func (s *Server) whole(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream) {
	ds, ok := s.gather(ctx, w, a, streams)
	if !ok {
		return
	}
	u := a.usageOf(ds)
	if a.j.chat {
		resp := chatResponse{ID: a.id, Object: "chat.completion", Created: a.created, Model: a.model, Usage: u,
			Choices: make([]chatChoice, len(ds))}
		for i := range ds {
			resp.Choices[i] = chatChoice{Index: i, Logprobs: a.chatLogprobs(&ds[i])}
			text := ds[i].Text
			if a.j.shape == nil {
				resp.Choices[i].Message = &chatMessageOut{Role: "assistant", Content: &text}
				resp.Choices[i].FinishReason = finishString(ds[i].FinishReason)
				continue
			}
			sh, r := shapedWhole(a.j.shape, "call_", text)
			msg := &chatMessageOut{Role: "assistant"}
			if r.Content != "" || len(r.Calls) == 0 {
				msg.Content = &r.Content
			}
			if r.Reasoning != "" {
				msg.ReasoningContent = &r.Reasoning
			}
			for _, c := range sh.calls(r) {
				msg.ToolCalls = append(msg.ToolCalls, chatToolCall{ID: c.ID, Type: "function",
					Function: chatFunctionCall{Name: c.Name, Arguments: c.Arguments}})
			}
			resp.Choices[i].Message = msg
			resp.Choices[i].FinishReason = finishWith(ds[i].FinishReason, len(r.Calls))
		}
		writeJSON(w, resp)
		return
	}
	resp := completionResponse{ID: a.id, Object: "text_completion", Created: a.created, Model: a.model, Usage: u,
		Choices: make([]completionChoice, len(ds))}
	for i := range ds {
		resp.Choices[i] = completionChoice{Index: i, Text: ds[i].Text, Logprobs: a.completionLogprobs(i, &ds[i]),
			FinishReason: finishString(ds[i].FinishReason)}
	}
	writeJSON(w, resp)
}

// observe records a finished engine request's lengths.
func (s *Server) observe(d *executor.Delta) {
	s.metrics.promptLen.Observe(float64(d.Usage.Prompt))
	s.metrics.genLen.Observe(float64(d.Usage.Completion))
}

// event is one choice's delta (or its stream's error) for the SSE loop.
type event struct {
	i   int
	d   executor.Delta
	err error
}

// relay runs a stream: it calls on for each delta of any choice as it
// comes (the last one of a choice has its FinishReason set) and returns
// every choice's last delta once all finished. On a failure it ends the
// stream in the protocol's way (or notes that the client left) and returns
// ok false; an error from on means the client is gone.
func (s *Server) relay(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream, sse *sseWriter,
	on func(i int, d *executor.Delta) error) ([]executor.Delta, bool) {
	events := make(chan event, len(streams))
	for i, st := range streams {
		go forward(ctx, i, st, events)
	}
	final := make([]executor.Delta, len(streams))
	for left := len(streams); left > 0; {
		var ev event
		select {
		case ev = <-events:
		case <-ctx.Done():
			s.cut(ctx, w, a, sse)
			return nil, false
		}
		if ev.err != nil {
			s.cut(ctx, w, a, sse) // ctx ended: the client is gone or the drain deadline passed
			return nil, false
		}
		d := &ev.d
		if d.Err != nil {
			// The engine ended this choice (its matcher failed): an error
			// event, as for any failure mid-stream.
			if a.errs.inStream(sse, guidedError(d.Err)) != nil {
				clientGone(w)
			}
			return nil, false
		}
		if d.FinishReason != executor.FinishNone {
			a.places.free(ev.i)
			final[ev.i] = *d
			s.observe(d)
			left--
		}
		if d.Text == "" && len(d.TokenIDs) == 0 && d.FinishReason == executor.FinishNone {
			continue
		}
		if on(ev.i, d) != nil {
			clientGone(w)
			return nil, false
		}
	}
	return final, true
}

// stream answers OpenAI server-sent events: a chunk per delta of any
// choice as it comes, a final usage chunk when asked, then [DONE]. It
// returns when every choice finished, or the client is gone (ctx ends; the
// engine aborts the rest).
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream) {
	sse := newSSE(w)
	var shapers []*shaper
	if a.j.chat {
		for i := range streams { // the role comes first, as OpenAI sends it
			empty := ""
			if sse.send(chatResponse{ID: a.id, Object: "chat.completion.chunk", Created: a.created, Model: a.model,
				Choices: []chatChoice{{Index: i, Delta: &chatOut{Role: "assistant", Content: &empty}}}}) != nil {
				clientGone(w)
				return
			}
		}
		if a.j.shape != nil {
			shapers = make([]*shaper, len(streams))
			for i := range shapers {
				shapers[i] = newShaper(a.j.shape, "call_")
			}
		}
	}
	final, ok := s.relay(ctx, w, a, streams, sse, func(i int, d *executor.Delta) error {
		var chunk any
		switch {
		case shapers != nil:
			sh := shapers[i]
			evs := sh.feed(d.Text)
			finish := finishString(d.FinishReason)
			if d.FinishReason != executor.FinishNone {
				evs = append(evs, sh.close()...)
				finish = finishWith(d.FinishReason, len(sh.ids))
			}
			delta := chatDelta(sh, evs)
			if delta == nil && finish == nil && !a.j.logprobs {
				return nil // everything held back (a marker may be starting)
			}
			if delta == nil {
				delta = &chatOut{}
			}
			chunk = chatResponse{ID: a.id, Object: "chat.completion.chunk", Created: a.created, Model: a.model,
				Choices: []chatChoice{{Index: i, Delta: delta, Logprobs: a.chatLogprobs(d), FinishReason: finish}}}
		case a.j.chat:
			var delta chatOut
			if d.Text != "" {
				delta.Content = &d.Text
			}
			chunk = chatResponse{ID: a.id, Object: "chat.completion.chunk", Created: a.created, Model: a.model,
				Choices: []chatChoice{{Index: i, Delta: &delta, Logprobs: a.chatLogprobs(d), FinishReason: finishString(d.FinishReason)}}}
		default:
			chunk = completionResponse{ID: a.id, Object: "text_completion", Created: a.created, Model: a.model,
				Choices: []completionChoice{{Index: i, Text: d.Text, Logprobs: a.completionLogprobs(i, d),
					FinishReason: finishString(d.FinishReason)}}}
		}
		return sse.send(chunk)
	})
	if !ok {
		return
	}
	if a.j.includeUsage {
		u := a.usageOf(final)
		var chunk any = completionResponse{ID: a.id, Object: "text_completion", Created: a.created, Model: a.model,
			Choices: []completionChoice{}, Usage: u}
		if a.j.chat {
			chunk = chatResponse{ID: a.id, Object: "chat.completion.chunk", Created: a.created, Model: a.model,
				Choices: []chatChoice{}, Usage: u}
		}
		if sse.send(chunk) != nil {
			clientGone(w)
			return
		}
	}
	if sse.done() != nil {
		clientGone(w)
	}
}

// chatDelta folds parsed events into one chunk's delta: content and
// reasoning concatenated, and one tool_calls element per call touched (the
// call's first element carries its id, type and name). nil: nothing.
func chatDelta(sh *shaper, evs []toolcall.Event) *chatOut {
	if len(evs) == 0 {
		return nil
	}
	var content, reasoning strings.Builder
	var calls []chatToolCall
	at := map[int]int{} // call index → element of calls
	for _, e := range evs {
		switch e.Kind {
		case toolcall.Content:
			content.WriteString(e.Text)
		case toolcall.Thinking:
			reasoning.WriteString(e.Text)
		case toolcall.CallBegin, toolcall.CallArgs:
			k, ok := at[e.Call]
			if !ok {
				idx := e.Call
				calls = append(calls, chatToolCall{Index: &idx})
				k = len(calls) - 1
				at[e.Call] = k
			}
			if e.Kind == toolcall.CallBegin {
				calls[k].ID, calls[k].Type, calls[k].Function.Name = sh.callID(e.Call), "function", e.Name
			} else {
				calls[k].Function.Arguments += e.Text
			}
		}
	}
	d := &chatOut{ToolCalls: calls}
	if content.Len() > 0 {
		c := content.String()
		d.Content = &c
	}
	if reasoning.Len() > 0 {
		r := reasoning.String()
		d.ReasoningContent = &r
	}
	if d.Content == nil && d.ReasoningContent == nil && len(calls) == 0 {
		return nil
	}
	return d
}

// cut ends a stream whose context ended: a client that went away is
// recorded as such; a stream the drain deadline aborted gets an error
// event and [DONE], so its client knows it was cut.
func (s *Server) cut(ctx context.Context, w http.ResponseWriter, a *answer, sse *sseWriter) {
	if clientLeft(ctx) {
		clientGone(w)
		return
	}
	if a.errs.inStream(sse, abortedError()) != nil {
		clientGone(w)
	}
}

// forward sends st's deltas to events until its last one or an error; it
// gives up when ctx ends, so it never outlives the handler.
func forward(ctx context.Context, i int, st *executor.Stream, events chan<- event) {
	for {
		d, err := st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return
		}
		select {
		case events <- event{i: i, d: d, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil || d.FinishReason != executor.FinishNone {
			return
		}
	}
}
