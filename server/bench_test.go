package server

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// BenchmarkCompletionRoundTrip is one non-streamed completion (16 tokens)
// over HTTP on loopback: parse, submit, 16 engine steps on the simulated
// runner (zero step cost), collect, encode. It measures the server's and the
// engine's host overhead per request, not a model.
func BenchmarkCompletionRoundTrip(b *testing.B) {
	e := newSimEnv(b, simOpts{})
	body := []byte(`{"prompt":"Once upon a time","max_tokens":16,"temperature":0}`)
	client := e.ts.Client()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(e.ts.URL+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
