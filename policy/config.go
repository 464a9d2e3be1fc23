package policy

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Accounting selects how admission charges programs against the KV pool
// (see the package doc). Its names are tokens, blocks and pausing; the
// letters A, B and C, by which the experiments compare them, parse too.
type Accounting uint8

const (
	// TokenAccounting (tokens) charges each ACTIVE program its tokens × weight + Buffer.
	TokenAccounting Accounting = iota + 1
	// BlockAccounting (blocks) charges the distinct KV blocks of ACTIVE programs,
	// from kvpool's block identities, + Reserve each.
	BlockAccounting
	// PausingAccounting (pausing) is TokenAccounting with a pause threshold,
	// target and hysteresis.
	PausingAccounting
)

// String is the accounting's name: "tokens", "blocks" or "pausing".
func (a Accounting) String() string {
	switch a {
	case TokenAccounting:
		return "tokens"
	case BlockAccounting:
		return "blocks"
	case PausingAccounting:
		return "pausing"
	}
	return fmt.Sprintf("Accounting(%d)", uint8(a))
}

// ParseAccounting parses an --admission value: tokens (or A), blocks (or
// B), pausing (or C), case-insensitive.
func ParseAccounting(s string) (Accounting, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "a", "tokens":
		return TokenAccounting, nil
	case "b", "blocks":
		return BlockAccounting, nil
	case "c", "pausing":
		return PausingAccounting, nil
	}
	return 0, fmt.Errorf("policy: admission %q: want tokens, blocks or pausing (A, B or C)", s)
}

// Clock is the time source the Controller reads (clock.Virtual and
// clock.Real satisfy it).
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Config parameterizes a Controller. Start from DefaultConfig: the zero value
// of most fields is refused, not defaulted.
type Config struct {
	Accounting Accounting
	// MaxActive caps ACTIVE programs: the executor's seats (> 0).
	MaxActive int
	// Buffer is tokens charged per ACTIVE program under tokens and pausing (≥ 0).
	Buffer int
	// Reserve is tokens charged per ACTIVE program under blocks (≥ 0).
	Reserve int
	// ActingTokenWeight weighs an ACTING program's tokens under tokens and pausing, in [0, 1].
	ActingTokenWeight float64
	// PauseThreshold, PauseTarget and ResumeHysteresis are fractions of
	// capacity: pause when used > threshold, down to used ≤ target; resume
	// while used + estimate ≤ threshold − hysteresis.
	// 0 < target ≤ threshold ≤ 1 and 0 ≤ hysteresis < threshold.
	PauseThreshold   float64
	PauseTarget      float64
	ResumeHysteresis float64
	// AgingTau is τ in effective size = tokens / (1 + wait/τ); 0 disables aging.
	AgingTau time.Duration
	// ForcedResume is how long a pending turn waits before it is resumed
	// even though it does not fit (> 0).
	ForcedResume time.Duration
	// Lease ends a program that has had no turn for this long (> 0).
	Lease time.Duration
	// Clock is the time source; nil means the wall clock.
	Clock Clock
}

// DefaultConfig returns the serving defaults for accounting a with maxActive seats:
// buffer 100, reserve 512, acting weight 1, τ 60 s, forced resume 1800 s,
// lease 30 min; threshold/target/hysteresis 0.95/0.80/0.10 for pausing and
// 1.0/1.0/0 for tokens and blocks.
func DefaultConfig(a Accounting, maxActive int) Config {
	c := Config{
		Accounting:        a,
		MaxActive:         maxActive,
		Buffer:            100,
		Reserve:           512,
		ActingTokenWeight: 1,
		PauseThreshold:    1,
		PauseTarget:       1,
		ResumeHysteresis:  0,
		AgingTau:          60 * time.Second,
		ForcedResume:      1800 * time.Second,
		Lease:             30 * time.Minute,
	}
	if a == PausingAccounting {
		c.PauseThreshold, c.PauseTarget, c.ResumeHysteresis = 0.95, 0.80, 0.10
	}
	return c
}

// Validate refuses a bad configuration, naming the offending value.
func (c Config) Validate() error {
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case c.Accounting != TokenAccounting && c.Accounting != BlockAccounting && c.Accounting != PausingAccounting:
		return fmt.Errorf("policy: admission %v: want tokens, blocks or pausing", c.Accounting)
	case c.MaxActive <= 0:
		return fmt.Errorf("policy: max active programs %d: must be > 0 (the executor's seats)", c.MaxActive)
	case c.Buffer < 0:
		return fmt.Errorf("policy: buffer %d tokens: must be ≥ 0", c.Buffer)
	case c.Reserve < 0:
		return fmt.Errorf("policy: reserve %d tokens: must be ≥ 0", c.Reserve)
	case bad(c.ActingTokenWeight) || c.ActingTokenWeight < 0 || c.ActingTokenWeight > 1:
		return fmt.Errorf("policy: acting token weight %v: must be in [0, 1]", c.ActingTokenWeight)
	case bad(c.PauseThreshold) || c.PauseThreshold <= 0 || c.PauseThreshold > 1:
		return fmt.Errorf("policy: pause threshold %v: must be in (0, 1]", c.PauseThreshold)
	case bad(c.PauseTarget) || c.PauseTarget <= 0:
		return fmt.Errorf("policy: pause target %v: must be > 0", c.PauseTarget)
	case c.PauseTarget > c.PauseThreshold:
		return fmt.Errorf("policy: pause target %v exceeds pause threshold %v", c.PauseTarget, c.PauseThreshold)
	case bad(c.ResumeHysteresis) || c.ResumeHysteresis < 0:
		return fmt.Errorf("policy: resume hysteresis %v: must be ≥ 0", c.ResumeHysteresis)
	case c.ResumeHysteresis >= c.PauseThreshold:
		return fmt.Errorf("policy: resume hysteresis %v must be below pause threshold %v (nothing could ever resume)",
			c.ResumeHysteresis, c.PauseThreshold)
	case c.AgingTau < 0:
		return fmt.Errorf("policy: aging tau %v: must be ≥ 0 (0 disables aging)", c.AgingTau)
	case c.ForcedResume <= 0:
		return fmt.Errorf("policy: forced resume timeout %v: must be > 0", c.ForcedResume)
	case c.Lease <= 0:
		return fmt.Errorf("policy: program lease %v: must be > 0", c.Lease)
	}
	return nil
}
