package agentic

import (
	"context"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sim"
)

// BenchmarkSeed000Batch drives one batch of `turnstile bench agentic`'s
// seed000 preset (32 programs × 3 turns, 16,384-token contexts at 90%
// sharing, 256 output and 384 tool tokens per turn, 1 s tool waits, all at
// the origin) under arm B (reserve 256) through the engine on the simulated
// H200 (built-in Llama-3-8B-like profile, overlap, max batch 32, 468,736 KV
// tokens as in seed 000). It reports the virtual seconds the batch spans and
// its steps: the harness needs minutes of virtual traffic to run in well
// under a second of wall time.
func BenchmarkSeed000Batch(b *testing.B) {
	progs, err := workload.Agentic(workload.AgenticConfig{Seed: 700, Programs: 32, Turns: 3, Share: 0.9,
		ContextTokens: 16384, OutputTokens: 256, ToolTokens: 384, ToolWait: time.Second, Jitter: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	pc, err := Seed000Arms(32).Policy("B", "b1")
	if err != nil {
		b.Fatal(err)
	}
	var res Result
	b.ReportAllocs()
	for b.Loop() {
		vc := clock.NewVirtual(time.Unix(0, 0))
		eng, capTokens, err := rig.NewSim(rig.Config{MaxBatchSize: 32, KVBlocks: 29296, BlockSize: 16, MaxBatchTokens: 8192, Overlap: true, Seed: 3,
			Programs: pc}, rig.Sim{Cost: sim.H200Llama3_8B(true), MaxContext: 32768, Vocab: workload.DefaultTokenMax}, vc)
		if err != nil {
			b.Fatal(err)
		}
		setup := EngineSetup(eng, capTokens)
		res, err = Run(context.Background(), Batch{Engine: eng, Clock: vc, Programs: progs, SamplingSeed: 1, Deadline: 240 * time.Second,
			ProgramDone: setup.ProgramDone})
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
