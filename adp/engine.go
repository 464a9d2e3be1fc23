package adp

import (
	"context"
	"slices"

	"github.com/turnstile-llm/turnstile/executor"
)

// EngineRank is a Rank backed by an executor.Engine (its own KV pool, seats
// and runner). It drives the engine with Step, never Run.
type EngineRank struct {
	e      *executor.Engine
	dummy  func() error
	chains *Chains
	// early: flush the step left in flight before the next gather (see
	// SetEarly).
	early bool
}

// NewEngineRank wraps e. dummy runs a dummy step when the engine has nothing
// to launch (on a GPU: a padding forward so collectives stay matched; on the
// simulated runner: the step's time on the rank's clock); nil runs none.
// chains, shared by the ranks of one deployment, hashes each placed prompt
// once for all of them; nil gives the rank its own.
func NewEngineRank(e *executor.Engine, dummy func() error, chains *Chains) *EngineRank {
	if chains == nil {
		chains = &Chains{}
	}
	return &EngineRank{e: e, dummy: dummy, chains: chains}
}

// Chains holds the prompt hash chains of the pending requests, so the
// ranks of one deployment hash each prompt once between them instead of
// once each. It assumes the ranks serve the same model at the same block
// size (a rank that does not only loses hits). Not safe for concurrent use:
// the deployment matches ranks one after another.
type Chains struct {
	pending []*executor.Request
	chains  []executor.PromptChain
	ready   []bool
}

// use makes pending the cached requests (keeping its chains when it already is).
func (c *Chains) use(pending []*executor.Request) {
	if slices.Equal(c.pending, pending) {
		return
	}
	c.pending = append(c.pending[:0], pending...)
	if len(c.chains) < len(pending) {
		c.chains = append(c.chains, make([]executor.PromptChain, len(pending)-len(c.chains))...)
	}
	c.ready = slices.Grow(c.ready[:0], len(pending))[:len(pending)]
	clear(c.ready)
}

// get returns the chain of pending request j, computing it with e on
// first use.
func (c *Chains) get(e *executor.Engine, j int) *executor.PromptChain {
	if !c.ready[j] {
		e.ChainPrompt(c.pending[j], &c.chains[j])
		c.ready[j] = true
	}
	return &c.chains[j]
}

// Engine is the wrapped engine.
func (r *EngineRank) Engine() *executor.Engine { return r.e }

// SetEarly makes the rank "early" (true) or "late" (false, the default).
// An early rank processes its step's results inside its lockstep iteration
// (executor.Engine.Flush after the step), so requests that finished in it
// are torn down before the next gather and are never reported retiring
// there. A late rank leaves the step in flight under overlap, as the
// in-process loop naturally does, so its finishing requests are retiring
// at the next gather: the ranks a charged gather penalises. Which ranks
// are late on a real deployment is timing; this sets it, so the number of
// late ranks can be chosen. Without overlap the two are the
// same. Call it between Steps (loop-owned).
func (r *EngineRank) SetEarly(early bool) { r.early = early }

// Early reports whether the rank flushes its step before the gather.
func (r *EngineRank) Early() bool { return r.early }

// Step implements Rank: one engine step, or a dummy step when the engine
// launched nothing; an early rank then flushes the step it launched.
func (r *EngineRank) Step() (bool, error) {
	before := r.e.Launched()
	if _, err := r.e.Step(); err != nil {
		return false, err
	}
	busy := r.e.Launched() != before
	if !busy && r.dummy != nil {
		if err := r.dummy(); err != nil {
			return false, err
		}
	}
	if r.early {
		if _, err := r.e.Flush(); err != nil {
			return false, err
		}
	}
	return busy, nil
}

// State implements Rank from the engine's RankLoad.
func (r *EngineRank) State(s *RankState) {
	l := r.e.RankLoad()
	s.Capacity = r.e.MaxBatchSize()
	s.Active, s.ActiveTokens = l.Active, l.ActiveTokens
	s.Waiting, s.WaitingTokens = l.Waiting, l.WaitingTokens
	s.Retiring, s.RetiringTokens = l.Retiring, l.RetiringTokens
}

// Match implements Rank: hits from the engine's prefix cache (PeekPrompt
// on the shared chains), residency from its per-program request counts.
func (r *EngineRank) Match(s *RankState, pending []*executor.Request, need Needs) {
	s.Hits, s.Resident = s.Hits[:0], s.Resident[:0]
	if need.Hits {
		r.chains.use(pending)
		for j := range pending {
			s.Hits = append(s.Hits, r.e.PeekPrompt(r.chains.get(r.e, j)))
		}
	}
	if need.Resident {
		for _, q := range pending {
			s.Resident = append(s.Resident, r.e.HoldsProgram(q.ProgramID))
		}
	}
}

// Submit implements Rank.
func (r *EngineRank) Submit(ctx context.Context, q *executor.Request) (Stream, error) {
	st, err := r.e.Submit(ctx, q)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Snapshot is the engine's metrics (sent to process 0 when the rank runs
// in another process).
func (r *EngineRank) Snapshot() executor.Metrics { return r.e.Snapshot() }

// ReleaseProgram ends program id on the engine.
func (r *EngineRank) ReleaseProgram(id string) (bool, error) { return r.e.ReleaseProgram(id) }
