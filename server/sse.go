package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// sseWriter writes server-sent events: one "data: <json>" event per chunk,
// flushed at once, and the final "data: [DONE]". JSON never contains a raw
// newline, so each event is one data line.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
}

// newSSE sends the event-stream headers and status 200.
func newSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // proxies must not buffer the stream
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// send writes v as one event and flushes it. An error means the client is
// gone (or v does not encode).
func (s *sseWriter) send(v any) error {
	s.buf.Reset()
	s.buf.WriteString("data: ")
	enc := json.NewEncoder(&s.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode appends "\n"
		return fmt.Errorf("sse: encode: %w", err)
	}
	s.buf.WriteByte('\n')
	return s.flush()
}

// sendEvent writes v as one named event ("event: name" then its data
// line), as the Responses and Anthropic Messages streams are typed.
func (s *sseWriter) sendEvent(name string, v any) error {
	s.buf.Reset()
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: ")
	enc := json.NewEncoder(&s.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("sse: encode: %w", err)
	}
	s.buf.WriteByte('\n')
	return s.flush()
}

// done writes the terminating "data: [DONE]" event.
func (s *sseWriter) done() error {
	s.buf.Reset()
	s.buf.WriteString("data: [DONE]\n\n")
	return s.flush()
}

func (s *sseWriter) flush() error {
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return fmt.Errorf("sse: write: %w", err)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("sse: flush: %w", err)
	}
	return nil
}
