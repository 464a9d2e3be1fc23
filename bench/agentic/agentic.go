// Package agentic drives one batch of agentic programs (workload.Program)
// through an executor.Engine on a virtual clock, as seed 000's harness
// drove its backend: each program arrives at its offset, submits turn 0,
// waits for the response, waits for its tool, submits the next turn (its
// previous context + what it actually generated + the tool output), and
// completes after its last response. The driver measures program and batch
// times on the virtual clock, reconstructs the shared-prefix ratio of every
// turn from the token ids actually sent, and audits the engine afterwards
// (everything completed, accounting invariants, no leaked seats or blocks).
//
// Everything is single-goroutine and discrete-event: the driver steps the
// engine (Engine.Step) and, when the engine is idle, moves the clock to the
// next arrival or tool completion. The same engine configuration, workload
// and seeds reproduce a batch bit for bit, overlap on or off, as long as the
// runner spends step time when the engine processes each step
// (executor.StepSpender: sim.Runner with DeferSpend, sim.Recorder with
// SpendOn for a real runner) rather than from the device stream's goroutine.
//
// The package also holds the study's side: its arms (Arms, arms.go), and
// presets (Preset) and goals (Seed000Goals) in presets.go.
package agentic

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sampling"
)

// Engine is what the driver needs of the engine (executor.Engine
// satisfies it).
type Engine = rig.Engine

// Batch is one batch to drive.
type Batch struct {
	// Engine runs the requests; it must read time from Clock and its runner
	// must spend step time on Clock, and nothing else may drive it.
	Engine Engine
	// Clock is the virtual clock shared with the engine and its runner.
	Clock *clock.Virtual
	// Programs is the workload; program i's requests carry ProgramID
	// "p<i>" and sampling seed SamplingSeed + i.
	Programs     []workload.Program
	SamplingSeed uint64
	// Deadline bounds the batch in virtual time (e.g. 240 s, as seed 000's
	// measured rows); 0 means none.
	Deadline time.Duration
	// MaxSteps bounds the engine steps, a guard against a livelock; 0 means
	// rig.DefaultMaxSteps (10,000,000).
	MaxSteps int
	// CheckEveryStep runs the engine's accounting check (Engine.Check)
	// after every step, as tests do; otherwise it runs once the batch has
	// drained. The check walks the whole KV pool, so per step it dominates
	// a large simulated batch's cost.
	CheckEveryStep bool
	// ProgramDone, when set, is called with a program's id ("p<i>") as
	// soon as its last response arrives, on the driver's goroutine between
	// steps: program-level admission (Engine.ReleaseProgram) learns there
	// that the program will send no more turns. An error stops the batch.
	ProgramDone func(programID string) error
}

// Result is what a batch measured.
type Result struct {
	// Arrival and Finish are per program, from the batch origin; Finish is
	// -1 for a program that did not complete.
	Arrival, Finish []time.Duration
	// Completed counts programs whose every turn finished with its full
	// output.
	Completed int
	// Sharing is the reconstructed shared-prefix structure of every turn.
	Sharing []workload.Sharing
	// FirstTurnCached is Σ prefix-cache hits of turn-0 prompts;
	// ComputedPrompt is Σ(prompt - cached) over every call.
	FirstTurnCached, ComputedPrompt int
	// Received counts generated tokens the driver received; EngineGenerated
	// the engine's own counter over the batch.
	Received, EngineGenerated int
	// Preemptions and Steps are the engine's counters over the batch.
	Preemptions, Steps int
	// Elapsed is the virtual time from origin to the end of the batch.
	Elapsed time.Duration
}

// Error is a batch that ran but failed its audit; Result holds what was
// measured.
type Error struct {
	Result Result
	Reason string
}

func (e *Error) Error() string { return "agentic: audit failed: " + e.Reason }

// event is a turn due for submission.
type event struct {
	at         time.Duration
	prog, turn int
}

type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].prog < h[j].prog // deterministic order at equal times
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// inFlight is a submitted turn.
type inFlight struct {
	prog, turn int
	stream     *executor.Stream
	got        []int32
}

// Run drives the batch to completion. It returns the result and nil when
// every program completed and the audit passed; an *Error (with the result
// so far) when the batch ran but failed its audit (deadline, a short or
// aborted turn, leaked seats or blocks, a sharing mismatch); any other
// error when the engine or the context failed.
func Run(ctx context.Context, b Batch) (Result, error) {
	n := len(b.Programs)
	if n == 0 {
		return Result{}, fmt.Errorf("agentic: batch has no programs")
	}
	if b.Engine == nil || b.Clock == nil {
		return Result{}, fmt.Errorf("agentic: batch needs an engine and a virtual clock")
	}
	if b.MaxSteps == 0 {
		b.MaxSteps = rig.DefaultMaxSteps
	}
	origin := b.Clock.Now()
	now := func() time.Duration { return b.Clock.Now().Sub(origin) }
	before := b.Engine.Snapshot()
	res := Result{Arrival: make([]time.Duration, n), Finish: make([]time.Duration, n)}
	turns := len(b.Programs[0].Turns)
	prompts := make([][][]int32, turns) // [turn][program]
	for t := range prompts {
		prompts[t] = make([][]int32, n)
	}
	q := &events{}
	for i, p := range b.Programs {
		if len(p.Turns) != turns {
			return res, fmt.Errorf("agentic: program %d has %d turns, program 0 has %d", i, len(p.Turns), turns)
		}
		res.Arrival[i], res.Finish[i] = p.Arrival, -1
		prompts[0][i] = p.Prompt
		heap.Push(q, event{at: p.Arrival, prog: i})
	}
	// counters closes the batch's measurements: elapsed time and the
	// engine's counters since the start.
	counters := func() executor.Metrics {
		res.Elapsed = now()
		after := b.Engine.Snapshot()
		res.EngineGenerated = int(after.GeneratedTokens - before.GeneratedTokens)
		res.Preemptions = int(after.Preemptions - before.Preemptions)
		res.Steps = int(after.Steps - before.Steps)
		return after
	}
	fail := func(format string, args ...any) (Result, error) {
		counters()
		return res, &Error{Result: res, Reason: fmt.Sprintf(format, args...)}
	}

	var active []*inFlight
	for steps := 0; ; steps++ {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("agentic: stopped at %v of virtual time: %w", now(), err)
		}
		if b.Deadline > 0 && now() > b.Deadline {
			return fail("deadline %v passed with %d of %d programs completed", b.Deadline, res.Completed, n)
		}
		if steps > b.MaxSteps {
			return fail("%d steps without completing the batch", b.MaxSteps)
		}
		for q.Len() > 0 && (*q)[0].at <= now() {
			e := heap.Pop(q).(event)
			p := &b.Programs[e.prog]
			params := sampling.DefaultParams()
			params.Seed, params.HasSeed = b.SamplingSeed+uint64(e.prog), true
			st, err := b.Engine.Submit(ctx, &executor.Request{
				PromptTokens: prompts[e.turn][e.prog], MaxTokens: p.Turns[e.turn].MaxTokens,
				Params: params, IgnoreEOS: true, ProgramID: programID(p),
			})
			if err != nil {
				return res, fmt.Errorf("agentic: submit program %d turn %d: %w", e.prog, e.turn, err)
			}
			active = append(active, &inFlight{prog: e.prog, turn: e.turn, stream: st})
		}
		progressed, err := b.Engine.Step()
		if err != nil {
			return res, fmt.Errorf("agentic: engine step at %v: %w", now(), err)
		}
		if b.CheckEveryStep {
			if err := b.Engine.Check(); err != nil {
				return fail("engine accounting after a step at %v: %v", now(), err)
			}
		}
		kept := active[:0]
		for _, f := range active {
			done, err := rig.Drain(f.stream, func(d *executor.Delta) { f.got = append(f.got, d.TokenIDs...) })
			if err != nil {
				return res, fmt.Errorf("agentic: program %d turn %d: %w", f.prog, f.turn, err)
			}
			if done == nil {
				kept = append(kept, f)
				continue
			}
			p := &b.Programs[f.prog]
			want := p.Turns[f.turn].MaxTokens
			if done.FinishReason != executor.FinishLength || len(f.got) != want || done.Usage.Completion != want {
				return fail("program %d turn %d ended %q with %d tokens (usage %d), want %d", f.prog, f.turn, done.FinishReason, len(f.got), done.Usage.Completion, want)
			}
			res.Received += len(f.got)
			res.ComputedPrompt += done.Usage.Prompt - done.Usage.CachedPrompt
			if f.turn == 0 {
				res.FirstTurnCached += done.Usage.CachedPrompt
			}
			if f.turn == turns-1 {
				res.Finish[f.prog] = now()
				res.Completed++
				if b.ProgramDone != nil {
					if err := b.ProgramDone(programID(p)); err != nil {
						return res, fmt.Errorf("agentic: program %d done: %w", f.prog, err)
					}
				}
				continue
			}
			next, err := p.NextPrompt(f.turn, prompts[f.turn][f.prog], f.got)
			if err != nil {
				return res, err
			}
			prompts[f.turn+1][f.prog] = next
			heap.Push(q, event{at: now() + p.Turns[f.turn].Wait, prog: f.prog, turn: f.turn + 1})
		}
		active = kept
		if len(active) == 0 && q.Len() == 0 {
			break
		}
		if !progressed {
			if q.Len() == 0 {
				return fail("engine idle at %v with %d turns in flight and no arrival or tool completion to come", now(), len(active))
			}
			// Idle: jump to the next arrival or tool completion (a turn
			// due now is submitted on the next pass).
			if d := (*q)[0].at - now(); d > 0 {
				if err := b.Clock.Advance(d); err != nil {
					return res, err
				}
			}
		}
	}
	end := now()
	if err := rig.Settle(b.Engine); err != nil {
		return res, fmt.Errorf("agentic: %w", err)
	}
	if err := b.Engine.Check(); err != nil {
		return fail("engine accounting after the batch: %v", err)
	}
	after := counters()
	res.Elapsed = end
	for t := range turns {
		s, err := workload.VerifyTurn(b.Programs, t, prompts[t])
		res.Sharing = append(res.Sharing, s)
		if err != nil {
			return fail("%v", err)
		}
	}
	if res.EngineGenerated != res.Received {
		return fail("engine generated %d tokens, driver received %d", res.EngineGenerated, res.Received)
	}
	if err := rig.Idle(after); err != nil {
		return fail("%v", err)
	}
	return res, nil
}

func programID(p *workload.Program) string { return fmt.Sprintf("p%d", p.ID) }
