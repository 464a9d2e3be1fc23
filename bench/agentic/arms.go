package agentic

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/policy"
)

// Threshold is one arm-C candidate: pause when used > Pause × capacity,
// down to Target × capacity; resume while used + estimate ≤ (Pause −
// Hysteresis) × capacity.
type Threshold struct {
	Pause, Target, Hysteresis float64
}

// Arms are seed 000's admission arms and their calibration candidates:
// A (Σ tokens + Buffer per ACTIVE program; one candidate, "a"), B
// (distinct blocks + a growth reserve; candidates "b1".. one per Reserves
// entry) and C (A's accounting with pause/resume thresholds; candidates
// "c1".. one per Thresholds entry).
type Arms struct {
	// MaxActive caps ACTIVE programs (the engine's max batch).
	MaxActive int
	// Buffer is A's and C's per-program buffer in tokens (seed: 100).
	Buffer int
	// Reserves are B's candidate growth reserves in tokens per ACTIVE
	// program (seed: 256, 512, 1,024).
	Reserves []int
	// Thresholds are C's candidates (seed: 0.97/0.90/0.05,
	// 0.99/0.95/0.02, 1.00/1.00/0.00).
	Thresholds []Threshold
}

// Seed000Arms are the arms and candidates seed 000 calibrated, for an
// engine of maxActive sequences.
func Seed000Arms(maxActive int) Arms {
	return Arms{MaxActive: maxActive, Buffer: 100, Reserves: []int{256, 512, 1024},
		Thresholds: []Threshold{{0.97, 0.90, 0.05}, {0.99, 0.95, 0.02}, {1, 1, 0}}}
}

// Scaled returns the arms for a workload whose token lengths are f times
// seed 000's: Buffer and Reserves scale (rounded, at least 1 when the
// seed's value is positive); thresholds are fractions and stay.
func (a Arms) Scaled(f float64) Arms {
	sc := func(v int) int {
		if v <= 0 {
			return v
		}
		return max(1, int(float64(v)*f+0.5))
	}
	out := a
	out.Buffer = sc(a.Buffer)
	out.Reserves = make([]int, len(a.Reserves))
	for i, r := range a.Reserves {
		out.Reserves[i] = sc(r)
	}
	out.Thresholds = slices.Clone(a.Thresholds)
	return out
}

// Campaign returns the campaign arms named in names (each "A", "B" or "C",
// at most once) with their candidates; A must be among them (it is the
// reference every ratio is taken against).
func (a Arms) Campaign(names []string) ([]campaign.Arm, error) {
	var out []campaign.Arm
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return nil, fmt.Errorf("agentic: arm %q listed twice", n)
		}
		seen[n] = true
		var cands []string
		switch n {
		case "A":
			cands = []string{"a"}
		case "B":
			for i := range a.Reserves {
				cands = append(cands, "b"+strconv.Itoa(i+1))
			}
		case "C":
			for i := range a.Thresholds {
				cands = append(cands, "c"+strconv.Itoa(i+1))
			}
		default:
			return nil, fmt.Errorf("agentic: arm %q: want A, B or C", n)
		}
		if len(cands) == 0 {
			return nil, fmt.Errorf("agentic: arm %s has no candidates", n)
		}
		out = append(out, campaign.Arm{Name: n, Candidates: cands})
	}
	if !seen["A"] {
		return nil, fmt.Errorf("agentic: arms %v lack A, the reference", names)
	}
	return out, nil
}

// Policy is the program policy of arm's candidate cand (as Campaign names
// them), validated.
func (a Arms) Policy(arm, cand string) (*policy.Config, error) {
	var pc policy.Config
	switch {
	case arm == "A" && cand == "a":
		pc = policy.DefaultConfig(policy.TokenAccounting, a.MaxActive)
		pc.Buffer = a.Buffer
	case arm == "B" && strings.HasPrefix(cand, "b"):
		i, err := a.index(cand, len(a.Reserves))
		if err != nil {
			return nil, err
		}
		pc = policy.DefaultConfig(policy.BlockAccounting, a.MaxActive)
		pc.Reserve = a.Reserves[i]
	case arm == "C" && strings.HasPrefix(cand, "c"):
		i, err := a.index(cand, len(a.Thresholds))
		if err != nil {
			return nil, err
		}
		th := a.Thresholds[i]
		pc = policy.DefaultConfig(policy.PausingAccounting, a.MaxActive)
		pc.Buffer = a.Buffer
		pc.PauseThreshold, pc.PauseTarget, pc.ResumeHysteresis = th.Pause, th.Target, th.Hysteresis
	default:
		return nil, fmt.Errorf("agentic: arm %q has no candidate %q", arm, cand)
	}
	if err := pc.Validate(); err != nil {
		return nil, fmt.Errorf("agentic: arm %s candidate %s: %w", arm, cand, err)
	}
	return &pc, nil
}

// index parses the 1-based candidate number of cand ("b2" → 1).
func (a Arms) index(cand string, n int) (int, error) {
	i, err := strconv.Atoi(cand[1:])
	if err != nil || i < 1 || i > n {
		return 0, fmt.Errorf("agentic: candidate %q: want %c1..%c%d", cand, cand[0], cand[0], n)
	}
	return i - 1, nil
}

// Describe names every candidate's parameters, for reports.
func (a Arms) Describe() map[string]string {
	out := map[string]string{"a": fmt.Sprintf("A: Σ tokens + %d buffer", a.Buffer)}
	for i, r := range a.Reserves {
		out["b"+strconv.Itoa(i+1)] = fmt.Sprintf("B: distinct blocks + %d reserve", r)
	}
	for i, th := range a.Thresholds {
		out["c"+strconv.Itoa(i+1)] = fmt.Sprintf("C: threshold %.2f / target %.2f / hysteresis %.2f, buffer %d",
			th.Pause, th.Target, th.Hysteresis, a.Buffer)
	}
	return out
}
