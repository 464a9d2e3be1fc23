package toolcall

import (
	"strings"
	"testing"
)

// BenchmarkParse: a long answer with a call, whole; the parser reads each
// byte once, so the time is linear in the output.
func BenchmarkParse(b *testing.B) {
	s, _ := Known("hermes")
	text := strings.Repeat("Some words of an answer, with {braces} and <tags>.\n", 2000) +
		s.Format([]Call{{Name: "f", Arguments: `{"text": "` + strings.Repeat("x ", 5000) + `"}`}})
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Parse(&s, Reasoning{}, text)
	}
}
