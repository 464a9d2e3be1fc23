package workload

import (
	"testing"
	"time"
)

// BenchmarkAgentic generates seed 000's batch shape: 32 programs × 3
// turns, 8,192-token contexts at 90% sharing.
func BenchmarkAgentic(b *testing.B) {
	cfg := AgenticConfig{Seed: 700, Programs: 32, Turns: 3, Share: 0.9, ContextTokens: 8192, OutputTokens: 256,
		ToolTokens: 512, ToolWait: time.Second, Jitter: 5 * time.Millisecond, ArrivalGap: 250 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Agentic(cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyTurn reconstructs the sharing of that batch's turn 0 from
// token ids, as the driver does for every turn of every row.
func BenchmarkVerifyTurn(b *testing.B) {
	progs, err := Agentic(AgenticConfig{Seed: 700, Programs: 32, Turns: 3, Share: 0.9, ContextTokens: 8192,
		OutputTokens: 256, ToolTokens: 512})
	if err != nil {
		b.Fatal(err)
	}
	prompts := make([][]int32, len(progs))
	for i, p := range progs {
		prompts[i] = p.Prompt
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := VerifyTurn(progs, 0, prompts); err != nil {
			b.Fatal(err)
		}
	}
}
