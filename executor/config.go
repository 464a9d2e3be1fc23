package executor

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/guided"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/seatpool"
)

// Ablation is the engine's experiment switches, each of which restores a
// rule whose absence an experiment measures: for experiments only, never
// for serving (the zero value). An attention-DP deployment's
// adp.Ablation.Engine is the one source of its engines' switches.
type Ablation struct {
	// ChargeRetiring charges retiring requests against admission and the
	// step budgets, as engines without the retiring rule do.
	ChargeRetiring bool
}

// Config configures an Engine. KV blocks, block size, vocab and context come
// from the Runner's Capacity.
type Config struct {
	// MaxBatchSize is the most sequences one step schedules (> 0).
	MaxBatchSize int
	// MaxNumBatchedTokens is the step's token budget; 0 means the runner's
	// Capacity.MaxBatchTokens, which it may not exceed.
	MaxNumBatchedTokens int
	// BlockSize, when set, must equal the runner's (a cross-check).
	BlockSize int
	// Overlap plans and launches step n+1 while step n runs.
	Overlap bool
	// Ablation holds the experiment switches; the zero value serves.
	Ablation Ablation
	// Clock is the time source; nil means clock.Real.
	Clock clock.Clock
	// Programs, when set, enables program admission (package policy), the
	// engine's one admission decision beyond seats, budgets and blocks, for
	// requests with a ProgramID; requests without one bypass it. New builds the Controller over the engine's KV pool with the
	// engine's clock; MaxActive 0 means MaxBatchSize (the sequences one
	// step runs), and a larger value is refused. Nil: no program policy.
	Programs *policy.Config
	// Model names the model in prefix hashes (kvpool.Keys.Model).
	Model string
	// Seed is the base of the seeds drawn for requests without one.
	Seed uint64
	// Guide is the guided decoder (structured output): one grammar matcher
	// slot per seat, a seat-indexed consumer validated with the others in
	// New, over a vocabulary of the runner's width. Nil: requests with a
	// Grammar are refused.
	Guide *guided.Decoder
	// CascadeMinBlocks is the shortest leading run of block ids, in blocks,
	// that a step's sequences must share to be grouped for cascade
	// attention (step.Group: the run is read once for the group). The
	// groups come from the block tables kvpool hands out, so sequences share
	// a run exactly when they share those KV bytes. 0: never group.
	CascadeMinBlocks int
}

// SeatSizing is what the engine of this configuration needs of the seat
// pool: MaxBatchSize sequences, with overlap headroom and deferred teardown
// exactly when Overlap is on (a retiring request keeps its seat for one
// step).
func (c Config) SeatSizing() seatpool.Sizing {
	return seatpool.Sizing{MaxBatchSize: c.MaxBatchSize, Overlap: c.Overlap, DeferredTeardown: c.Overlap}
}

// DeriveSeats is the seat count of an engine of this configuration
// (seatpool.Seats of SeatSizing), the one source of the number: New sizes
// the engine's seat pool with it, and whoever builds the engine sizes the
// runner with it (Capacity.Seats), which New checks against the pool.
func (c Config) DeriveSeats() (int, error) {
	n, err := seatpool.Seats(c.SeatSizing())
	if err != nil {
		return 0, fmt.Errorf("executor: seats for max batch %d: %w", c.MaxBatchSize, err)
	}
	return n, nil
}
