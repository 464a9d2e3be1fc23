package agentic

import (
	"context"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/bench/simrig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sim"
)

// BenchmarkSeed000Batch drives one seed-000-shaped batch (32 programs × 3
// turns, 8,192-token contexts at 90% sharing, 256 output and 512 tool
// tokens per turn, 1 s tool waits, 0.25 s arrival phase) through the
// engine on the simulated H200 (built-in Llama-3-8B-like profile, max batch
// 32, 468,736 KV tokens as in seed 000). It reports the virtual seconds the
// batch spans and its steps: the harness needs minutes of virtual traffic
// to run in well under a second of wall time.
func BenchmarkSeed000Batch(b *testing.B) {
	progs, err := workload.Agentic(workload.AgenticConfig{Seed: 700, Programs: 32, Turns: 3, Share: 0.9,
		ContextTokens: 8192, OutputTokens: 256, ToolTokens: 512, ToolWait: time.Second,
		Jitter: 5 * time.Millisecond, ArrivalGap: 250 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	var res Result
	b.ReportAllocs()
	for b.Loop() {
		vc := clock.NewVirtual(time.Unix(0, 0))
		eng, _, err := simrig.New(simrig.Config{Cost: sim.H200Llama3_8B(false), MaxBatchSize: 32, KVBlocks: 29296,
			BlockSize: 16, MaxContext: 16384, MaxBatchTokens: 8192, Vocab: workload.DefaultTokenMax, Seed: 3}, vc)
		if err != nil {
			b.Fatal(err)
		}
		res, err = Run(context.Background(), Batch{Engine: eng, Clock: vc, Programs: progs, SamplingSeed: 1, Deadline: 240 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if err := eng.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res.Elapsed.Seconds(), "virtual-s/batch")
	b.ReportMetric(float64(res.Steps), "steps/batch")
}
