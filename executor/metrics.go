package executor

import (
	"math/bits"
	"time"

	"github.com/turnstile-llm/turnstile/policy"
)

// HistBuckets is the number of buckets of a Histogram.
const HistBuckets = 40

// Histogram counts durations in power-of-two buckets: bucket 0 holds
// [0, 1µs), bucket i ≥ 1 holds [2^(i-1) µs, 2^i µs); the last bucket is open.
// It is a value type (copying it copies the counts) and never allocates.
type Histogram struct {
	Buckets [HistBuckets]uint64
	Count   uint64
	Sum     time.Duration
	Max     time.Duration
}

// Observe adds one duration (negative durations count as 0).
func (h *Histogram) Observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := bits.Len64(uint64(d / time.Microsecond))
	if i >= HistBuckets {
		i = HistBuckets - 1
	}
	h.Buckets[i]++
	h.Count++
	h.Sum += d
	h.Max = max(h.Max, d)
}

// Mean is Sum/Count (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / time.Duration(h.Count)
}

// Quantile is the upper bound of the bucket holding quantile q in [0,1]
// (at most Max), 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(q * float64(h.Count))
	rank = min(max(rank, 1), h.Count)
	var seen uint64
	for i, c := range h.Buckets {
		seen += c
		if seen >= rank {
			return min(time.Duration(uint64(1)<<i)*time.Microsecond, h.Max)
		}
	}
	return h.Max
}

// Metrics is a snapshot of the engine for the server and bench.
type Metrics struct {
	// Running requests are admitted and schedulable; Waiting are queued
	// (incl. preempted); Retiring hold a seat until their step's teardown.
	Running, Waiting, Retiring int
	// SeatsLive and SeatsRetiring are seatpool's counts.
	SeatsLive, SeatsRetiring int
	// KVBlocksUsed are referenced blocks of KVBlocksTotal; KVUsage their ratio.
	// KVBlocksCached are unreferenced blocks still findable by prefix
	// lookup (reclaimable: counted in neither used nor KVUsage).
	KVBlocksUsed, KVBlocksTotal int
	KVBlocksCached              int
	KVUsage                     float64
	// Counters since start.
	Steps           uint64
	Submitted       uint64
	Finished        uint64 // ended with stop or length
	Aborted         uint64
	Preemptions     uint64
	PromptTokens    uint64 // at first admission
	PrefixHitTokens uint64 // served from the prefix cache at first admission
	GeneratedTokens uint64
	// Reservations counts future tokens that opened a block (overlap): the
	// block was allocated by kvpool.Pool.Reserve before the token's value was
	// known; its KV is written in place (no copy).
	Reservations uint64
	// CascadeGroups counts step groups (step.Group) over all steps;
	// CascadeSharedReads the block reads per layer their shared runs saved:
	// Σ over groups of (members − 1) × shared blocks.
	CascadeGroups, CascadeSharedReads uint64
	// RunnerBusy and RunnerIdle are the runner's time executing steps and
	// idle between consecutive steps while work was present (time the loop
	// spent blocked with no work is not idle). IdleFraction = idle/(busy+idle).
	RunnerBusy, RunnerIdle time.Duration
	// Programs is the program policy's snapshot (Config.Programs): programs
	// by state, pauses, resumes, forced resumes, used and capacity per
	// accounting, admission waits. Its Accounting is 0 without a policy.
	// PinsDropped counts programs the engine ended to free pinned KV when
	// nothing else could make progress (see the package doc).
	Programs    policy.Metrics
	PinsDropped uint64
	// GuidedMasks counts the token masks computed for constrained requests
	// (structured output), GuidedMaskTime the host time spent on them
	// (under overlap, while the runner ran the forward pass);
	// GuidedFailures the constrained requests ended because their matcher
	// failed.
	GuidedMasks    uint64
	GuidedMaskTime time.Duration
	GuidedFailures uint64
	// StepTime: per step on the runner; StepIdle: runner gap before a step;
	// TTFT: arrival to first token; ITL: between consecutive tokens.
	StepTime, StepIdle, TTFT, ITL Histogram
}

// IdleFraction is the runner's idle share between steps.
func (m *Metrics) IdleFraction() float64 {
	total := m.RunnerBusy + m.RunnerIdle
	if total == 0 {
		return 0
	}
	return float64(m.RunnerIdle) / float64(total)
}

// Merge adds o into h (same bucket bounds): counts and sums add, Max is the larger.
func (h *Histogram) Merge(o *Histogram) {
	for i := range h.Buckets {
		h.Buckets[i] += o.Buckets[i]
	}
	h.Count += o.Count
	h.Sum += o.Sum
	h.Max = max(h.Max, o.Max)
}

// Merge adds another engine's snapshot into m, as an attention-DP
// deployment reports its ranks together: gauges and counters add,
// histograms merge, KVUsage is recomputed over the summed blocks.
func (m *Metrics) Merge(o *Metrics) {
	m.Running += o.Running
	m.Waiting += o.Waiting
	m.Retiring += o.Retiring
	m.SeatsLive += o.SeatsLive
	m.SeatsRetiring += o.SeatsRetiring
	m.KVBlocksUsed += o.KVBlocksUsed
	m.KVBlocksTotal += o.KVBlocksTotal
	m.KVBlocksCached += o.KVBlocksCached
	m.KVUsage = 0
	if m.KVBlocksTotal > 0 {
		m.KVUsage = float64(m.KVBlocksUsed) / float64(m.KVBlocksTotal)
	}
	m.Steps += o.Steps
	m.Submitted += o.Submitted
	m.Finished += o.Finished
	m.Aborted += o.Aborted
	m.Preemptions += o.Preemptions
	m.PromptTokens += o.PromptTokens
	m.PrefixHitTokens += o.PrefixHitTokens
	m.GeneratedTokens += o.GeneratedTokens
	m.Reservations += o.Reservations
	m.CascadeGroups += o.CascadeGroups
	m.CascadeSharedReads += o.CascadeSharedReads
	m.RunnerBusy += o.RunnerBusy
	m.RunnerIdle += o.RunnerIdle
	m.Programs.Merge(&o.Programs)
	m.PinsDropped += o.PinsDropped
	m.GuidedMasks += o.GuidedMasks
	m.GuidedMaskTime += o.GuidedMaskTime
	m.GuidedFailures += o.GuidedFailures
	m.StepTime.Merge(&o.StepTime)
	m.StepIdle.Merge(&o.StepIdle)
	m.TTFT.Merge(&o.TTFT)
	m.ITL.Merge(&o.ITL)
}
