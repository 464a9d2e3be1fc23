// Package traffic drives independent requests (workload.Request: chat or
// context-heavy traffic) through one executor engine on a virtual clock:
// each request is submitted at its arrival offset, the engine is stepped,
// and when it is idle the clock jumps to the next arrival. It measures, on
// the virtual clock, each request's time to first token and completion
// time, and the run's request and token throughput, then audits the engine
// (every request finished with its full output, counters agree, no leaked
// seats or blocks).
//
// Single-goroutine and discrete-event like bench/agentic: without overlap
// the same engine, workload and seeds reproduce a run bit for bit.
package traffic

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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

// Run is one traffic run.
type Run struct {
	// Engine and Clock as in bench/agentic: the engine and its runner read
	// and spend Clock, and nothing else drives the engine.
	Engine Engine
	Clock  *clock.Virtual
	// Requests are submitted at their Arrival offsets (ascending or not).
	Requests []workload.Request
	// SamplingSeed + request ID seeds each request's sampling.
	SamplingSeed uint64
	// Deadline bounds the run in virtual time; 0 means none.
	Deadline time.Duration
	// MaxSteps guards against a livelock; 0 means
	// rig.DefaultMaxSteps (10,000,000).
	MaxSteps int
	// CheckEveryStep runs Engine.Check after every step (tests); otherwise
	// once, after the run has drained.
	CheckEveryStep bool
	// StopAtEOS lets requests end at EOS (the device decides when) instead
	// of generating exactly MaxTokens: a finish the engine learns only when
	// it processes the step, which is what leaves a request retiring under
	// overlap (seed 004). A request then completes with "stop" after 1 to
	// MaxTokens tokens, or "length" after MaxTokens.
	StopAtEOS bool
}

// Result is what a run measured. Times are offsets from the origin.
type Result struct {
	// FirstToken and Finish are per request (-1 if not reached).
	FirstToken, Finish []time.Duration
	// Completed counts requests that finished with their full output.
	Completed int
	// PromptTokens, CachedTokens and Generated (Usage.Completion: a final
	// stop token included) sum over completed requests.
	PromptTokens, CachedTokens, Generated int
	// Steps and Preemptions are the engine's counters over the run.
	Steps, Preemptions int
	// Elapsed is the virtual time from origin to the last finish.
	Elapsed time.Duration
}

// RequestsPerSecond and TokensPerSecond (prompt + generated) are the run's
// throughput over Elapsed; 0 when nothing elapsed.
func (r Result) RequestsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Completed) / r.Elapsed.Seconds()
}

// TokensPerSecond is (prompt + generated tokens) per virtual second.
func (r Result) TokensPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.PromptTokens+r.Generated) / r.Elapsed.Seconds()
}

// Error is a run that failed its audit; Result holds what was measured.
type Error struct {
	Result Result
	Reason string
}

func (e *Error) Error() string { return "traffic: audit failed: " + e.Reason }

type inFlight struct {
	id     int
	stream *executor.Stream
	got    int
}

// Drive runs r to completion (see the package doc for what it audits). It
// returns an *Error when the run completed its steps but failed the audit,
// another error when the engine or ctx failed.
func Drive(ctx context.Context, r Run) (Result, error) {
	n := len(r.Requests)
	if n == 0 {
		return Result{}, fmt.Errorf("traffic: no requests")
	}
	if r.Engine == nil || r.Clock == nil {
		return Result{}, fmt.Errorf("traffic: run needs an engine and a virtual clock")
	}
	if r.MaxSteps == 0 {
		r.MaxSteps = rig.DefaultMaxSteps
	}
	origin := r.Clock.Now()
	now := func() time.Duration { return r.Clock.Now().Sub(origin) }
	before := r.Engine.Snapshot()
	res := Result{FirstToken: make([]time.Duration, n), Finish: make([]time.Duration, n)}
	// Submission order: by arrival, then index (stable, deterministic).
	order := make([]int, n)
	for i := range order {
		order[i] = i
		res.FirstToken[i], res.Finish[i] = -1, -1
		if r.Requests[i].Arrival < 0 {
			return res, fmt.Errorf("traffic: request %d arrives at %v", i, r.Requests[i].Arrival)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(r.Requests[a].Arrival, r.Requests[b].Arrival) })
	counters := func() {
		after := r.Engine.Snapshot()
		res.Steps = int(after.Steps - before.Steps)
		res.Preemptions = int(after.Preemptions - before.Preemptions)
	}
	fail := func(format string, args ...any) (Result, error) {
		counters()
		return res, &Error{Result: res, Reason: fmt.Sprintf(format, args...)}
	}
	next := 0
	var active []*inFlight
	for steps := 0; ; steps++ {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("traffic: stopped at %v of virtual time: %w", now(), err)
		}
		if r.Deadline > 0 && now() > r.Deadline {
			return fail("deadline %v passed with %d of %d requests completed", r.Deadline, res.Completed, n)
		}
		if steps > r.MaxSteps {
			return fail("%d steps without completing the run", r.MaxSteps)
		}
		for next < n && r.Requests[order[next]].Arrival <= now() {
			id := order[next]
			req := &r.Requests[id]
			params := sampling.DefaultParams()
			params.Seed, params.HasSeed = r.SamplingSeed+uint64(id), true
			st, err := r.Engine.Submit(ctx, &executor.Request{PromptTokens: req.Prompt, MaxTokens: req.MaxTokens, Params: params, IgnoreEOS: !r.StopAtEOS})
			if err != nil {
				return res, fmt.Errorf("traffic: submit request %d: %w", id, err)
			}
			active = append(active, &inFlight{id: id, stream: st})
			next++
		}
		progressed, err := r.Engine.Step()
		if err != nil {
			return res, fmt.Errorf("traffic: engine step at %v: %w", now(), err)
		}
		if r.CheckEveryStep {
			if err := r.Engine.Check(); err != nil {
				return fail("engine accounting after a step at %v: %v", now(), err)
			}
		}
		kept := active[:0]
		for _, f := range active {
			at := now()
			done, err := rig.Drain(f.stream, func(d *executor.Delta) {
				if f.got == 0 && len(d.TokenIDs) > 0 {
					res.FirstToken[f.id] = at
				}
				f.got += len(d.TokenIDs)
			})
			if err != nil {
				return res, fmt.Errorf("traffic: request %d: %w", f.id, err)
			}
			if done == nil {
				kept = append(kept, f)
				continue
			}
			want := r.Requests[f.id].MaxTokens
			stopped := r.StopAtEOS && done.FinishReason == executor.FinishStop && done.Usage.Completion >= 1 && done.Usage.Completion <= want
			full := done.FinishReason == executor.FinishLength && done.Usage.Completion == want
			if !stopped && !full {
				return fail("request %d ended %q with %d tokens (usage %d), want %d", f.id, done.FinishReason, f.got, done.Usage.Completion, want)
			}
			res.Finish[f.id] = now()
			res.Completed++
			res.PromptTokens += done.Usage.Prompt
			res.CachedTokens += done.Usage.CachedPrompt
			res.Generated += done.Usage.Completion
		}
		active = kept
		if len(active) == 0 && next == n {
			break
		}
		if !progressed {
			if next == n {
				return fail("engine idle at %v with %d requests in flight and no arrival to come", now(), len(active))
			}
			if d := r.Requests[order[next]].Arrival - now(); d > 0 {
				if err := r.Clock.Advance(d); err != nil {
					return res, err
				}
			}
		}
	}
	res.Elapsed = now()
	if err := rig.Settle(r.Engine); err != nil {
		return res, fmt.Errorf("traffic: %w", err)
	}
	counters()
	if err := r.Engine.Check(); err != nil {
		return fail("engine accounting after the run: %v", err)
	}
	after := r.Engine.Snapshot()
	if int(after.GeneratedTokens-before.GeneratedTokens) != res.Generated {
		return fail("engine generated %d tokens, requests report %d", after.GeneratedTokens-before.GeneratedTokens, res.Generated)
	}
	if err := rig.Idle(after); err != nil {
		return fail("%v", err)
	}
	return res, nil
}
