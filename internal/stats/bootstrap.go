package stats

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// Defaults of Bootstrap: 10,000 resamples of whole paired blocks, seed
// 20260919, 95% percentile intervals.
const (
	DefaultResamples = 10000
	DefaultSeed      = 20260919
	DefaultLevel     = 0.95
)

// Bootstrap is a seeded percentile bootstrap over whole paired blocks. The
// unit of resampling is the block (one paired run of every arm on one
// workload seed), never a program or a token: those inside a block share
// the block's conditions and are not independent repetitions.
//
// The zero value means 10,000 resamples, seed 0 and a 95% level; set Seed
// (DefaultSeed is the studies' seed) to reproduce a reported interval.
type Bootstrap struct {
	// Resamples is the number of bootstrap resamples; 0 means DefaultResamples.
	Resamples int
	// Seed seeds the resampling generator (PCG); the same seed and inputs
	// reproduce the interval bit for bit.
	Seed uint64
	// Level is the central coverage of the interval in (0, 1); 0 means
	// DefaultLevel.
	Level float64
}

// Estimate is a statistic with its bootstrap interval.
type Estimate struct {
	// Point is the statistic of the blocks as observed (no resampling).
	Point float64 `json:"point"`
	// Lo and Hi bound the percentile interval: the nearest-rank
	// (1-Level)/2 and (1+Level)/2 quantiles of the resampled statistics.
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
	// Level, Resamples, Seed and Blocks say how the interval was made.
	Level     float64 `json:"level"`
	Resamples int     `json:"resamples"`
	Seed      uint64  `json:"seed"`
	Blocks    int     `json:"blocks"`
}

// resolved returns b with defaults applied, or an error naming a bad field.
func (b Bootstrap) resolved() (Bootstrap, error) {
	if b.Resamples == 0 {
		b.Resamples = DefaultResamples
	}
	if b.Level == 0 {
		b.Level = DefaultLevel
	}
	if b.Resamples < 1 {
		return b, fmt.Errorf("stats: bootstrap resamples %d < 1", b.Resamples)
	}
	if !(b.Level > 0 && b.Level < 1) {
		return b, fmt.Errorf("stats: bootstrap level %v outside (0, 1)", b.Level)
	}
	return b, nil
}

// Replicates draws b.Resamples resamples of n whole blocks with replacement
// and returns stat of each, in draw order. stat receives the n chosen block
// indices in [0, n) (repeats allowed; the slice is reused between calls, so
// stat must not keep it). A NaN statistic is an error.
func (b Bootstrap) Replicates(n int, stat func(idx []int) float64) ([]float64, error) {
	b, err := b.resolved()
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("stats: bootstrap over %d blocks: %w", n, ErrEmpty)
	}
	// Two PCG words from one seed; the constant only decorrelates them.
	// Draws use PCG's specified output directly (not rand.Rand's derived
	// methods, which may change between Go releases), so a reported
	// interval reproduces bit for bit on any release.
	pcg := rand.NewPCG(b.Seed, b.Seed^0x9e3779b97f4a7c15)
	idx := make([]int, n)
	out := make([]float64, b.Resamples)
	for r := range out {
		for i := range idx {
			idx[i] = int(uniform(pcg, uint64(n)))
		}
		v := stat(idx)
		if math.IsNaN(v) {
			return nil, fmt.Errorf("stats: bootstrap statistic is NaN on resample %d (blocks %v)", r, idx)
		}
		out[r] = v
	}
	return out, nil
}

// Blocks returns stat on all n blocks as observed with its percentile
// interval over b.Resamples resamples of whole blocks (see Replicates).
func (b Bootstrap) Blocks(n int, stat func(idx []int) float64) (Estimate, error) {
	b, err := b.resolved()
	if err != nil {
		return Estimate{}, err
	}
	reps, err := b.Replicates(n, stat)
	if err != nil {
		return Estimate{}, err
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	point := stat(all)
	if math.IsNaN(point) {
		return Estimate{}, fmt.Errorf("stats: bootstrap statistic is NaN on the observed %d blocks", n)
	}
	slices.Sort(reps)
	tail := (1 - b.Level) / 2 * 100
	lo, err := nearestRankSorted(reps, tail)
	if err != nil {
		return Estimate{}, err
	}
	hi, err := nearestRankSorted(reps, 100-tail)
	if err != nil {
		return Estimate{}, err
	}
	return Estimate{Point: point, Lo: lo, Hi: hi, Level: b.Level, Resamples: b.Resamples, Seed: b.Seed, Blocks: n}, nil
}

// GeoMeanRatio is the geometric mean of the paired ratios num[i]/den[i]
// (one per block) with its bootstrap interval over whole blocks: the
// headline statistic of a paired campaign (e.g. B/A throughput, B/A P95).
func (b Bootstrap) GeoMeanRatio(num, den []float64) (Estimate, error) {
	ratios, err := PairedRatios(num, den)
	if err != nil {
		return Estimate{}, err
	}
	logs := make([]float64, len(ratios))
	for i, r := range ratios {
		logs[i] = math.Log(r)
	}
	return b.Blocks(len(logs), func(idx []int) float64 {
		s := 0.0
		for _, i := range idx {
			s += logs[i]
		}
		return math.Exp(s / float64(len(idx)))
	})
}

// uniform is uniform in [0, n), n > 0, by Lemire's multiply-and-reject.
func uniform(pcg *rand.PCG, n uint64) uint64 {
	for {
		hi, lo := bits.Mul64(pcg.Uint64(), n)
		// Reject the low words that would bias the high word: those below
		// 2⁶⁴ mod n (lo ≥ n is always fine, and skips the division).
		if lo >= n || lo >= -n%n {
			return hi
		}
	}
}
