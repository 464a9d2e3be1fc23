package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Error types used in the "type" field of error bodies (OpenAI's names where
// OpenAI has one).
const (
	errInvalidRequest = "invalid_request_error"
	errAuthentication = "authentication_error"
	errRateLimit      = "rate_limit_error"
	errServer         = "server_error"
	errUnavailable    = "service_unavailable"
)

// APIError is an error answered as OpenAI's error body
// {"error": {"message", "type", "param", "code"}} with HTTP status Status.
type APIError struct {
	Status  int
	Message string
	Type    string
	Param   string // the offending request field; "" when none
	Code    string // a stable machine-readable code; "" when none
	// RetryAfter, when > 0, is sent as the Retry-After header (seconds).
	RetryAfter int
}

func (e *APIError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s (%s): %s", e.Status, e.Type, e.Param, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// badRequest is a 400 invalid_request_error about param.
func badRequest(param, code, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: errInvalidRequest, Param: param, Code: code,
		Message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON shape of an error answer; null param and code are
// kept, as OpenAI sends them.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *APIError) body() errorBody {
	d := errorDetail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		d.Param = &e.Param
	}
	if e.Code != "" {
		d.Code = &e.Code
	}
	return errorBody{Error: d}
}

// writeError answers e as JSON.
func writeError(w http.ResponseWriter, e *APIError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="turnstile"`)
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e.body())
}

// errorStyle answers failures in a protocol's shape: whole, as the HTTP
// answer, or inside a stream that has begun (ending the stream).
type errorStyle interface {
	whole(w http.ResponseWriter, e *APIError)
	inStream(sse *sseWriter, e *APIError) error
}

// openAIErrors is OpenAI's: the error body, and in a stream an error event
// followed by [DONE].
type openAIErrors struct{}

func (openAIErrors) whole(w http.ResponseWriter, e *APIError) { writeError(w, e) }

func (openAIErrors) inStream(sse *sseWriter, e *APIError) error {
	if err := sse.send(e.body()); err != nil {
		return err
	}
	return sse.done()
}
