package executor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

// noopRunner does no work: it answers every sampled sequence with a fixed
// printable token, so a benchmark measures the engine's host time alone.
type noopRunner struct{ capy step.Capacity }

func (r *noopRunner) Capacity() step.Capacity { return r.capy }
func (r *noopRunner) Execute(b *step.Batch, out *step.Output) error {
	for i := range b.Seqs {
		if b.Seqs[i].Sample {
			out.Tokens[i] = 'a' + int32(i%7)
		} else {
			out.Tokens[i] = -1
		}
	}
	return nil
}

// BenchmarkStepHost: host time of one step (planning, launch, result
// processing, stop checks, stream output) at 256 running sequences with a
// runner that does nothing. Requests live 1,024 tokens and are replaced
// (outside the timer) as they finish, so admissions and finishes are part
// of the steady state.
//
// With waiting=64, 64 more requests with 2,048-token prompts sharing a
// 2,000-token prefix (an agentic program's context) queue behind the
// tests' running cap (Engine.testRunningCap) of 256: the head of the queue
// is looked up in the prefix cache at every step it stays refused.
//
// With programs=B, every request is a turn of its own agentic program under
// the program policy's arm B (Tick, Admit, Started, Grew per append,
// TurnEnded with a pin, the next turn replacing it).
func BenchmarkStepHost(b *testing.B) {
	const running, life = 256, 1024
	shared := strings.Repeat("the shared context of one agentic program. ", 50)[:2000]
	for _, bc := range []struct {
		ovl      bool
		waiting  int
		programs bool
	}{{false, 0, false}, {true, 0, false}, {false, 64, false}, {true, 64, false}, {false, 0, true}, {true, 0, true}} {
		name := fmt.Sprintf("overlap=%v/waiting=%d", bc.ovl, bc.waiting)
		var pc *policy.Config
		if bc.programs {
			c := policy.DefaultConfig(policy.BlockAccounting, 0)
			pc, name = &c, name+"/programs=B"
		}
		b.Run(name, func(b *testing.B) {
			ovl, total := bc.ovl, running+bc.waiting
			seats := testSeats(b, total, ovl)
			r := &noopRunner{capy: step.Capacity{Seats: seats, KVBlocks: 2 * total * (life + 2048 + 64) / 16,
				BlockSize: 16, MaxContext: 4096, MaxBatchTokens: 4096, Vocab: testVocab}}
			eng, err := New(Config{MaxBatchSize: total, Overlap: ovl, Clock: clock.Real{},
				Programs: pc}, r, newByteTokenizer())
			require.NoError(b, err)
			eng.testRunningCap = running
			defer eng.Close()
			streams := make([]*Stream, total)
			submit := func(i, maxTokens int) {
				prompt := fmt.Sprintf("request %4d: a prompt", i)
				if i >= running {
					prompt = fmt.Sprintf("%s request %4d: %s", shared, i, prompt)
				}
				req := &Request{Prompt: prompt, MaxTokens: maxTokens, IgnoreEOS: true, Params: greedy()}
				if pc != nil {
					req.ProgramID = fmt.Sprint("program ", i)
				}
				st, err := eng.Submit(context.Background(), req)
				require.NoError(b, err)
				streams[i] = st
			}
			for i := range streams {
				submit(i, 1+i*life/total) // staggered, so finishes spread out
			}
			refill := func() {
				for i, st := range streams {
					for {
						_, ok, err := st.TryRecv()
						if err != nil { // finished: replace it
							submit(i, life)
							break
						}
						if !ok {
							break
						}
					}
				}
			}
			for range 2 * life { // warm up into the steady state
				_, err := eng.Step()
				require.NoError(b, err)
				refill()
			}
			b.ReportAllocs()
			b.ResetTimer()
			steps := 0
			for b.Loop() {
				if _, err := eng.Step(); err != nil {
					b.Fatal(err)
				}
				if steps++; steps%32 == 0 {
					b.StopTimer()
					refill()
					b.StartTimer()
				}
			}
			b.StopTimer()
			m := eng.Snapshot()
			b.ReportMetric(float64(m.Running), "running")
			b.ReportMetric(float64(m.Waiting), "waiting")
			if pc != nil {
				b.ReportMetric(float64(m.Programs.Active), "active_programs")
			}
		})
	}
}

// BenchmarkRunnerIdle: the runner's idle fraction between steps, overlap on
// vs off, with a simulated runner that spends 2 ms of wall time per step and
// 256 decoding sequences. One op is one step. Run with -benchtime=300x.
func BenchmarkRunnerIdle(b *testing.B) {
	const running = 256
	for _, ovl := range []bool{false, true} {
		b.Run(fmt.Sprintf("overlap=%v", ovl), func(b *testing.B) {
			seats := testSeats(b, running, ovl)
			r, err := sim.New(sim.Config{
				Capacity: step.Capacity{Seats: seats, KVBlocks: running * 2048 / 16, BlockSize: 16,
					MaxContext: 2048, MaxBatchTokens: 8192, Vocab: testVocab},
				Cost: sim.Fixed(2 * time.Millisecond), Clock: clock.Real{}, EOS: testEOS, TokenMin: 'a', TokenMax: 'z',
			})
			require.NoError(b, err)
			eng, err := New(Config{MaxBatchSize: running, Overlap: ovl, Clock: clock.Real{}}, r, newByteTokenizer())
			require.NoError(b, err)
			defer eng.Close()
			for i := range running {
				_, err := eng.Submit(context.Background(), &Request{
					Prompt: fmt.Sprintf("request %4d", i), IgnoreEOS: true, Params: greedy()})
				require.NoError(b, err)
			}
			for range 4 { // admit everything
				_, err := eng.Step()
				require.NoError(b, err)
			}
			before := eng.Snapshot()
			for b.Loop() {
				if _, err := eng.Step(); err != nil {
					b.Fatal(err)
				}
			}
			after := eng.Snapshot()
			busy, idle := after.RunnerBusy-before.RunnerBusy, after.RunnerIdle-before.RunnerIdle
			b.ReportMetric(100*float64(idle)/float64(busy+idle), "idle%")
			b.ReportMetric(float64(after.Running), "running")
		})
	}
}
