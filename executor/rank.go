package executor

import "github.com/turnstile-llm/turnstile/kvpool"

// This file is what attention-DP (package adp) reads of an engine at its
// gather point. Every method is loop-owned: call it between Steps, from the
// goroutine that drives the engine (or one synchronised with it), never
// during Run.

// RankLoad is the engine's load in requests and context tokens (prompt plus
// generated so far).
type RankLoad struct {
	// Active requests are running and will be scheduled again.
	Active, ActiveTokens int
	// Waiting requests are queued (submitted but not yet admitted,
	// preempted ones included).
	Waiting, WaitingTokens int
	// Retiring requests will never be scheduled again but still hold a
	// seat: those awaiting their step's teardown, and running requests
	// whose last token is already in flight (a finish known in advance,
	// never planned into the next step).
	Retiring, RetiringTokens int
}

// RankLoad returns the engine's load as of the last step boundary.
func (e *Engine) RankLoad() RankLoad {
	var l RankLoad
	for _, s := range e.running {
		if s.inflight > 0 && e.finishKnown(s) {
			l.Retiring++
			l.RetiringTokens += len(s.tokens)
			continue
		}
		l.Active++
		l.ActiveTokens += len(s.tokens)
	}
	for _, s := range e.waiting {
		l.Waiting++
		l.WaitingTokens += len(s.tokens)
	}
	for i := range e.steps {
		for _, r := range e.steps[i].teardown {
			l.Retiring++
			if r.hasKV {
				l.RetiringTokens += e.kv.Tokens(r.kv)
			}
		}
	}
	e.mu.Lock()
	for _, s := range e.submitQ {
		l.Waiting++
		l.WaitingTokens += len(s.tokens)
	}
	e.mu.Unlock()
	return l
}

// PromptChain is the prefix-hash chain of a request's prompt, computed once
// (one SHA-256 per full block) and then looked up on any engine serving the
// same model at the same block size, without hashing again. The zero value
// is empty (it hits nothing).
type PromptChain struct {
	c  kvpool.Chain
	ok bool
}

// ChainPrompt resets pc to the chain of r's prompt under this engine's
// model and block size. A request without a usable prompt gets an empty
// chain.
func (e *Engine) ChainPrompt(r *Request, pc *PromptChain) {
	pc.ok = false
	if r == nil {
		return
	}
	prompt := r.PromptTokens
	if len(prompt) == 0 && r.Prompt != "" {
		prompt = e.tok.Encode(r.Prompt, true)
	}
	if len(prompt) == 0 {
		return
	}
	pc.ok = pc.c.Reset(kvpool.Keys{Model: e.cfg.Model, Salt: r.CacheSalt}, e.kv.BlockSize(), prompt) == nil
}

// PeekPrompt returns how many prompt tokens of pc's request this engine's
// prefix cache would serve (0 for a chain built for another model or block
// size: a mismatch loses hits, it never invents them).
func (e *Engine) PeekPrompt(pc *PromptChain) int {
	if !pc.ok {
		return 0
	}
	return e.kv.PeekChain(&pc.c)
}

// HoldsProgram reports whether the engine holds a request (waiting,
// running or not yet drained) of program id: O(1), for program-aware routing.
// It is request residency, with or without a program policy, not program
// state: a program between turns that the policy keeps pinned holds no
// request here (the policy's view is ReleaseProgram's and
// ProgramStates').
func (e *Engine) HoldsProgram(id string) bool {
	if id == "" {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.progReqs[id] > 0
}

// MaxBatchSize is the most sequences one step schedules.
func (e *Engine) MaxBatchSize() int { return e.cfg.MaxBatchSize }

// Ablation is the experiment switches the engine was built with.
func (e *Engine) Ablation() Ablation { return e.cfg.Ablation }

// Launched is the number of steps launched on the runner so far; a Step
// that leaves it unchanged ran nothing on the device.
func (e *Engine) Launched() uint64 { return e.launched }
