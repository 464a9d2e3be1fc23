// Package adprun runs seed 004's rows: attention-DP context ranks on the
// simulated device, one lockstep deployment per row, in one of three arms:
//
//   - BASE: overlap on, retiring requests charged against admission, in
//     the gather and in each engine (adp.Ablation.Engine.ChargeRetiring,
//     the engines' switches' one source): the bug.
//   - FIX: overlap on, retiring requests not charged.
//   - OVLOFF: overlap off (nothing is ever retiring).
//
// A row builds dp engines (rig.NewSim: seats from seatpool, a sim.Runner that
// spends a step's time when the engine processes it) on sim.Lockstep rank
// clocks, an adp.Deployment over them with the default LoadBalanced router,
// submits the row seed's context-heavy requests (workload.ContextHeavy:
// long inputs, one output token, all at the origin so the queue saturates)
// and steps the deployment, closing the lockstep iteration after every
// step, until it is idle. Then it audits: every request completed with its
// full output, the deployment's and every engine's accounting (Check)
// clean, and every engine idle with no seat or KV block left.
//
// Which ranks are late (their step's results processed after the next
// gather, so their finishing requests are retiring there: seed 004's
// penalised ranks under BASE) is the row's Config.Late: k ranks, the last k
// by default (rank 0 healthy) or the first k (rank 0 late). In this
// in-process loop every overlapping rank is naturally late (AllLate, k =
// dp); the seed's runs had k = 1. The ladder then predicts rank 0's share of
// routed requests (Rung) and BASE's throughput, 1 − k/(2dp) of FIX's
// (PredictedGain).
package adprun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/adp"
	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/sim"
)

// Arm names.
const (
	BASE   = "BASE"
	FIX    = "FIX"
	OVLOFF = "OVLOFF"
)

// Arms lists the arms in their default run order (a fresh slice: no
// package-level state to mutate).
func Arms() []string { return []string{BASE, FIX, OVLOFF} }

// AllLate as Config.Late makes every rank late (k = dp).
const AllLate = -1

// Defaults of DefaultConfig: the seed's binding context role (max batch 2),
// 8K-token inputs ± 10%, one output token, 100 requests per rank.
const (
	DefaultMaxBatchSize    = 2
	DefaultRequestsPerRank = 100
	DefaultInputTokens     = 8192
	DefaultInputSpread     = 0.1
	DefaultOutputTokens    = 1
	DefaultLate            = 1
)

// Simulated device layout: KV block size in tokens and the vocabulary
// (workload's default token range [3, 512) fits it).
const (
	blockSize = 16
	vocab     = 512
)

// Config describes the rows of one dp.
type Config struct {
	// DP is the number of attention-DP ranks (≥ 1).
	DP int
	// Cost returns the step cost model for an arm's overlap setting; nil
	// means sim.H200Llama3_8B.
	Cost func(overlap bool) sim.CostModel
	// MaxBatchSize is every engine's batch (≥ 1).
	MaxBatchSize int
	// RequestsPerRank × DP requests are offered per row (≥ 1).
	RequestsPerRank int
	// InputTokens ± InputSpread (a fraction in [0, 1)) is each request's
	// input length; OutputTokens its output length (≥ 1).
	InputTokens  int
	InputSpread  float64
	OutputTokens int
	// Late is k, how many ranks are late, in [0, DP], or AllLate.
	Late int
	// RankZeroLate makes the first k ranks late (rank 0 among them)
	// instead of the last k (rank 0 healthy).
	RankZeroLate bool
	// CheckEveryIteration runs the deployment's and every engine's Check
	// after every lockstep iteration (always once at the end).
	CheckEveryIteration bool
	// MaxIterations guards against a livelock; 0 means 100 per request.
	MaxIterations int
}

// DefaultConfig is the default row configuration for dp ranks.
func DefaultConfig(dp int) Config {
	return Config{DP: dp, MaxBatchSize: DefaultMaxBatchSize, RequestsPerRank: DefaultRequestsPerRank,
		InputTokens: DefaultInputTokens, InputSpread: DefaultInputSpread, OutputTokens: DefaultOutputTokens,
		Late: DefaultLate, CheckEveryIteration: true}
}

// Validate reports the first invalid field, naming its value.
func (c Config) Validate() error {
	switch {
	case c.DP < 1:
		return fmt.Errorf("adprun: dp %d: must be >= 1", c.DP)
	case c.MaxBatchSize < 1:
		return fmt.Errorf("adprun: max batch size %d: must be >= 1", c.MaxBatchSize)
	case c.RequestsPerRank < 1:
		return fmt.Errorf("adprun: requests per rank %d: must be >= 1", c.RequestsPerRank)
	case c.InputTokens < 1:
		return fmt.Errorf("adprun: input tokens %d: must be >= 1", c.InputTokens)
	case !(c.InputSpread >= 0 && c.InputSpread < 1):
		return fmt.Errorf("adprun: input spread %v: must be in [0, 1)", c.InputSpread)
	case c.OutputTokens < 1:
		return fmt.Errorf("adprun: output tokens %d: must be >= 1", c.OutputTokens)
	case c.Late != AllLate && (c.Late < 0 || c.Late > c.DP):
		return fmt.Errorf("adprun: late ranks %d: must be in [0, dp=%d] (or all)", c.Late, c.DP)
	case c.MaxIterations < 0:
		return fmt.Errorf("adprun: max iterations %d: must be >= 0", c.MaxIterations)
	}
	return nil
}

// K is the number of late ranks.
func (c Config) K() int {
	if c.Late == AllLate {
		return c.DP
	}
	return c.Late
}

// LateRank reports whether rank i is late.
func (c Config) LateRank(i int) bool {
	if c.RankZeroLate {
		return i < c.K()
	}
	return i >= c.DP-c.K()
}

// Requests is the number of requests a row offers.
func (c Config) Requests() int { return c.DP * c.RequestsPerRank }

// Workload returns the requests of workload seed seed.
func (c Config) Workload(seed uint64) ([]workload.Request, error) {
	return workload.ContextHeavy(workload.ContextHeavyConfig{Seed: seed, Requests: c.Requests(),
		InputTokens: c.InputTokens, InputSpread: c.InputSpread, OutputTokens: c.OutputTokens})
}

// armSettings maps an arm to its overlap and charging settings.
func armSettings(arm string) (overlap, charge bool, err error) {
	switch arm {
	case BASE:
		return true, true, nil
	case FIX:
		return true, false, nil
	case OVLOFF:
		return false, false, nil
	}
	return false, false, fmt.Errorf("adprun: unknown arm %q (want BASE, FIX or OVLOFF)", arm)
}

// Runner runs the rows of one Config; it satisfies campaign.Runner (the
// spec's Candidate and Share are ignored: seed 004's arms have one setting
// each and its traffic no sharing level).
type Runner struct {
	Config Config
}

// row is one row being run.
type row struct {
	c       Config
	reqs    []workload.Request
	shared  *clock.Virtual
	ls      *sim.Lockstep
	engines []*executor.Engine
	d       *adp.Deployment
	// clocks are the ranks' lockstep clocks; lag[i] is 1 when rank i
	// processes its step in the next iteration (late, overlap on), else 0.
	clocks []*spendClock
	lag    []int
}

// Run runs one row. A run that fails its audit is a FAIL row with the
// reason and no error; a setup or engine error is an error.
func (r Runner) Run(ctx context.Context, s campaign.Spec) (out report.Row, err error) {
	c := r.Config
	if err := c.Validate(); err != nil {
		return report.Row{}, err
	}
	overlap, charge, err := armSettings(s.Arm)
	if err != nil {
		return report.Row{}, err
	}
	reqs, err := c.Workload(s.Seed)
	if err != nil {
		return report.Row{}, fmt.Errorf("adprun: workload seed %d: %w", s.Seed, err)
	}
	w := &row{c: c, reqs: reqs, shared: clock.NewVirtual(time.Unix(0, 0))}
	if w.ls, err = sim.NewLockstep(w.shared, c.DP); err != nil {
		return report.Row{}, fmt.Errorf("adprun: %w", err)
	}
	defer func() {
		if cerr := w.close(); cerr != nil && err == nil {
			out, err = report.Row{}, cerr
		}
	}()
	capTokens, err := w.build(overlap, charge, s.Seed)
	if err != nil {
		return report.Row{}, err
	}
	out = report.Row{Programs: len(reqs), DP: c.DP, CapacityTokens: capTokens,
		Workload: workload.RequestsDigest(reqs), Audit: report.Pass}
	res, err := w.drive(ctx)
	var aerr *auditError
	switch {
	case errors.As(err, &aerr):
		out.Audit, out.AuditDetail = report.Fail, aerr.reason
		out.Completed = res.completed
		return out, nil
	case err != nil:
		return report.Row{}, err
	}
	out.Completed = res.completed
	m, err := report.BatchMetrics(res.arrival, res.finish)
	if err != nil {
		return report.Row{}, fmt.Errorf("adprun: row %s: %w", s.RowID, err)
	}
	m.SchedulerPauses, m.SchedulerResumes, m.ForcedResumes, m.PeakActivePrograms = -1, -1, -1, -1
	m.RecomputedTokens = -1
	m.ComputedPromptTokens = res.prompt - res.cached
	m.Preemptions, m.GeneratedTokens = res.preemptions, res.generated
	m.GenerationCounterMatches = res.generated == res.engineGenerated
	m.Steps = res.rank0Steps
	m.RankRouted = res.routed
	total := 0
	for _, n := range res.routed {
		total += n
	}
	if total > 0 {
		m.Rank0Share = float64(res.routed[0]) / float64(total)
	}
	out.M = &m
	return out, err
}

// build makes the row's engines and deployment and returns one rank's KV
// capacity in tokens. KV is sized for the overlap arm's seats in every arm,
// so the arms differ only in what they are meant to.
func (w *row) build(overlap, charge bool, seed uint64) (int, error) {
	c := w.c
	longest := 0
	for _, q := range w.reqs {
		longest = max(longest, len(q.Prompt))
	}
	seats, err := executor.Config{MaxBatchSize: c.MaxBatchSize, Overlap: true}.DeriveSeats()
	if err != nil {
		return 0, fmt.Errorf("adprun: %w", err)
	}
	maxContext := longest + c.OutputTokens + 1
	perSeq := (maxContext + blockSize - 1) / blockSize
	var cost sim.CostModel = sim.H200Llama3_8B(overlap)
	if c.Cost != nil {
		cost = c.Cost(overlap)
	}
	abl := adp.Ablation{Engine: executor.Ablation{ChargeRetiring: charge}}
	rc := rig.Config{MaxBatchSize: c.MaxBatchSize, KVBlocks: seats*perSeq + 1, BlockSize: blockSize,
		// A full batch of the longest prompts fits one step: admission by
		// seats binds, not the token budget (seed 004's binding cases).
		MaxBatchTokens: c.MaxBatchSize * maxContext, Overlap: overlap, Ablation: abl.Engine, Seed: seed}
	dev := rig.Sim{Cost: cost, MaxContext: maxContext, Vocab: vocab}
	ranks := make([]adp.Rank, c.DP)
	chains := &adp.Chains{}
	capacity := 0
	for i := range ranks {
		inner, err := w.ls.Rank(i)
		if err != nil {
			return 0, fmt.Errorf("adprun: %w", err)
		}
		clk := &spendClock{Clock: inner}
		w.clocks = append(w.clocks, clk)
		w.lag = append(w.lag, b2i(overlap && c.LateRank(i)))
		e, capTokens, err := rig.NewSim(rc, dev, clk)
		if err != nil {
			return 0, fmt.Errorf("adprun: rank %d: %w", i, err)
		}
		w.engines = append(w.engines, e)
		// No dummy step: on the lockstep a rank without work spends
		// nothing and waits for the slowest, as a collective does.
		er := adp.NewEngineRank(e, nil, chains)
		er.SetEarly(!c.LateRank(i))
		ranks[i] = er
		capacity = capTokens
	}
	w.d, err = adp.New(adp.Config{Ablation: abl}, ranks)
	if err != nil {
		return 0, fmt.Errorf("adprun: deployment: %w", err)
	}
	return capacity, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// close closes the deployment, then the engines (the deployment does not
// own them); it returns the first error.
func (w *row) close() error {
	var first error
	if w.d != nil {
		if err := w.d.Close(); err != nil {
			first = fmt.Errorf("adprun: close deployment: %w", err)
		}
	}
	for i, e := range w.engines {
		if err := e.Close(); err != nil && first == nil {
			first = fmt.Errorf("adprun: close rank %d: %w", i, err)
		}
	}
	return first
}

// result is what a row measured.
type result struct {
	arrival, finish []time.Duration // completed requests only, aligned
	completed       int
	// Σ over completed requests of prompt, cached prompt and generated
	// tokens; the engines' own generated count.
	prompt, cached, generated, engineGenerated int
	preemptions, rank0Steps                    int
	routed                                     []int
}

// auditError is a row that ran but failed its audit.
type auditError struct{ reason string }

func (e *auditError) Error() string { return "adprun: audit failed: " + e.reason }

func failf(format string, args ...any) error {
	return &auditError{reason: fmt.Sprintf(format, args...)}
}

// pending is a submitted request not finished yet.
type pending struct {
	id     int
	h      *adp.Handle
	stream *executor.Stream
}

// spendClock is a rank's lockstep clock that also totals what the rank
// spends, so each iteration's charge per rank is known.
type spendClock struct {
	clock.Clock
	mu    sync.Mutex
	spent time.Duration
}

func (c *spendClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := c.Clock.Sleep(ctx, d); err != nil {
		return err
	}
	c.mu.Lock()
	c.spent += max(d, 0)
	c.mu.Unlock()
	return nil
}

func (c *spendClock) total() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spent
}

// drive submits every request at the origin (the workload saturates) and
// steps the deployment until it is idle, then audits.
//
// Timing. A step's simulated cost is spent when its engine processes it
// (deterministic under overlap): in the iteration that launched it on an
// early rank (or without overlap), in the next one on a late rank. Ending
// the lockstep after every iteration therefore pairs a late rank's step
// n−1 with an early rank's step n when both kinds are present, and adds a
// trailing iteration for the late ranks' last step: a timing artifact, not
// work, that the real devices (which run step n together) do not have. So
// the row's times come from the device timeline: iteration n lasts the
// longest cost among the steps launched in n (each rank's charge moved back
// to its launch iteration), and a request finishes when the iteration that
// launched its last step ends. With only early or only late ranks this is
// the lockstep's own clock.
func (w *row) drive(ctx context.Context) (result, error) {
	var res result
	n := len(w.reqs)
	maxIt := w.c.MaxIterations
	if maxIt == 0 {
		maxIt = 100 * n
	}
	active := make([]*pending, 0, n)
	for id := range w.reqs {
		q := &w.reqs[id]
		if q.Arrival != 0 {
			return res, fmt.Errorf("adprun: request %d arrives at %v; rows submit everything at the origin", id, q.Arrival)
		}
		params := sampling.DefaultParams()
		params.Seed, params.HasSeed = uint64(id), true
		h, err := w.d.Submit(ctx, &executor.Request{PromptTokens: q.Prompt, MaxTokens: q.MaxTokens, Params: params, IgnoreEOS: true})
		if err != nil {
			return res, fmt.Errorf("adprun: submit request %d: %w", id, err)
		}
		active = append(active, &pending{id: id, h: h})
	}
	charged := make([][]time.Duration, len(w.clocks)) // [rank][iteration]
	before := make([]time.Duration, len(w.clocks))
	type seen struct{ id, rank, it int }
	var finished []seen
	for it := 0; ; it++ {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("adprun: stopped at iteration %d: %w", it, err)
		}
		if it > maxIt {
			return res, failf("%d lockstep iterations without draining (%d of %d requests completed)", maxIt, res.completed, n)
		}
		idle, err := w.d.Step()
		if err != nil {
			return res, fmt.Errorf("adprun: iteration %d: %w", it, err)
		}
		if idle {
			break
		}
		// The iteration ends when its slowest rank has: the collective.
		if _, err := w.ls.End(); err != nil {
			return res, fmt.Errorf("adprun: iteration %d: %w", it, err)
		}
		for r, c := range w.clocks {
			t := c.total()
			charged[r] = append(charged[r], t-before[r])
			before[r] = t
		}
		if w.c.CheckEveryIteration {
			if err := w.check(); err != nil {
				return res, failf("after iteration %d: %v", it, err)
			}
		}
		kept := active[:0]
		for _, p := range active {
			done, err := w.poll(p)
			if err != nil {
				return res, failf("request %d: %v", p.id, err)
			}
			if done == nil {
				kept = append(kept, p)
				continue
			}
			want := w.reqs[p.id].MaxTokens
			if done.FinishReason != executor.FinishLength || done.Usage.Completion != want {
				return res, failf("request %d ended %q with %d tokens, want %d", p.id, done.FinishReason, done.Usage.Completion, want)
			}
			res.completed++
			finished = append(finished, seen{id: p.id, rank: p.h.Rank(), it: it})
			res.prompt += done.Usage.Prompt
			res.cached += done.Usage.CachedPrompt
			res.generated += done.Usage.Completion
		}
		clear(active[len(kept):])
		active = kept
	}
	// The device timeline: ends[n] is when iteration n's steps are done.
	iters := 0
	if len(charged) > 0 {
		iters = len(charged[0])
	}
	ends := make([]time.Duration, iters)
	var t time.Duration
	for it := range ends {
		var longest time.Duration
		for r := range charged {
			at := it + w.lag[r]
			if at < iters {
				longest = max(longest, charged[r][at])
			}
		}
		t += longest
		ends[it] = t
	}
	for _, f := range finished {
		at := max(f.it-w.lag[f.rank], 0)
		res.arrival = append(res.arrival, w.reqs[f.id].Arrival)
		res.finish = append(res.finish, ends[at])
	}
	return res, w.audit(&res, len(active))
}

// poll takes what p's stream has produced without blocking; the final
// delta when the request finished, else nil.
func (w *row) poll(p *pending) (*executor.Delta, error) {
	if p.stream == nil {
		if p.h.Rank() < 0 {
			return nil, nil // not routed yet
		}
		s, err := p.h.Wait(context.Background()) // routed: returns at once
		if err != nil {
			return nil, err
		}
		st, ok := s.(*executor.Stream)
		if !ok {
			return nil, fmt.Errorf("stream %T is not an engine stream", s)
		}
		p.stream = st
	}
	return rig.Drain(p.stream, func(*executor.Delta) {})
}

// check runs the deployment's and every engine's accounting checks.
func (w *row) check() error {
	if err := w.d.Check(); err != nil {
		return err
	}
	for i, e := range w.engines {
		if err := e.Check(); err != nil {
			return fmt.Errorf("rank %d: %w", i, err)
		}
	}
	return nil
}

// audit checks the drained row: every request completed, accounting clean,
// every engine idle with no seat or block held; it fills the counters.
func (w *row) audit(res *result, unfinished int) error {
	n := len(w.reqs)
	if res.completed != n || unfinished != 0 {
		return failf("deployment idle with %d of %d requests completed, %d unfinished", res.completed, n, unfinished)
	}
	if err := w.check(); err != nil {
		return failf("accounting after the run: %v", err)
	}
	m := w.d.Snapshot()
	if m.Routed != uint64(n) || m.Refused != 0 || m.Cancelled != 0 || m.Queued != 0 {
		return failf("deployment routed %d, refused %d, cancelled %d, queued %d of %d requests", m.Routed, m.Refused, m.Cancelled, m.Queued, n)
	}
	for i, r := range m.Ranks {
		res.routed = append(res.routed, int(r.Routed))
		em := w.engines[i].Snapshot()
		switch {
		case em.Running+em.Waiting+em.Retiring != 0:
			return failf("rank %d still holds %d running, %d waiting, %d retiring requests", i, em.Running, em.Waiting, em.Retiring)
		case em.SeatsLive+em.SeatsRetiring != 0:
			return failf("rank %d leaked seats: %d live, %d retiring", i, em.SeatsLive, em.SeatsRetiring)
		case em.KVBlocksUsed != 0:
			return failf("rank %d leaked KV blocks: %d still referenced", i, em.KVBlocksUsed)
		case em.Finished != r.Routed:
			return failf("rank %d finished %d of the %d requests routed to it", i, em.Finished, r.Routed)
		}
		res.engineGenerated += int(em.GeneratedTokens)
		res.preemptions += int(em.Preemptions)
		if i == 0 {
			res.rank0Steps = int(em.Steps)
		}
	}
	return nil
}
