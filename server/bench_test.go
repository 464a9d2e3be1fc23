package server

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"
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

// BenchmarkStreamRoundTrip is streamed completions of 64 tokens from 16
// concurrent clients over HTTP on loopback, the shape `turnstile bench
// serve` loads: a sim step of 100µs keeps the events apart (one per token),
// so ns/op is dominated by the server's per-event cost (encode, write,
// flush) and per-request cost on a busy CPU.
func BenchmarkStreamRoundTrip(b *testing.B) {
	e := newSimEnv(b, simOpts{maxContext: 512, mbs: 16, maxInFlight: 64, step: 100 * time.Microsecond})
	body := []byte(`{"prompt":"Once upon a time","max_tokens":64,"ignore_eos":true,"stream":true}`)
	client := e.ts.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(e.ts.URL+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				b.Error(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
