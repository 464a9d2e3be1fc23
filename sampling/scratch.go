package sampling

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// Scratch is the O(vocab) working memory of one Sample call: per-token
// weights, a copy of logits for top-k selection and nucleus candidates
// (about 12 bytes × vocab). One Scratch serves one call at a time.
type Scratch struct {
	w    []float32 // exp(x - max), 0 for truncated tokens
	vals []float32 // logits copied for top-k selection
	cand []int32   // top-p candidates: certain ones from the front, the boundary bucket from the back
	// mass[e] sums the weights whose float32 exponent field is e; weights
	// are in (0, 1], so e <= 127.
	mass [128]float64
	// sample holds kthLargest's strided sample.
	sample [kSample]float32
}

// NewScratch makes working memory for SampleWith at vocabulary size vocab.
func NewScratch(vocab int) *Scratch {
	return &Scratch{w: make([]float32, vocab), vals: make([]float32, vocab), cand: make([]int32, vocab)}
}

// draw samples from x (already penalised, scaled and sanitised, maximum m)
// after min_p, top_k and top_p truncation. It returns the token and
// Σ exp(x - m) over the whole row (for log-probabilities).
func (sc *Scratch) draw(x []float32, m float32, p *Params, rng *rand.PCG) (int32, float64) {
	// Truncation keeps exactly the tokens with x >= thr (min_p, top_k), then
	// top_p keeps a most-likely prefix of those.
	thr := float32(math.Inf(-1))
	if p.MinP > 0 {
		// p_i >= min_p × p_max  ⟺  x_i >= m + ln(min_p).
		thr = m + float32(math.Log(float64(p.MinP)))
	}
	if p.TopK > 0 && p.TopK < len(x) {
		thr = max(thr, sc.kthLargest(x, thr, p.TopK))
	}
	if p.TopP < 1 {
		return sc.drawNucleus(x, m, thr, float64(p.TopP), rng)
	}
	w := sc.w
	var z, kept float64
	for i, v := range x {
		e := expNeg(v - m)
		z += float64(e)
		if v >= thr {
			w[i] = e
			kept += float64(e)
		} else {
			w[i] = 0
		}
	}
	target := uniform(rng) * kept
	var acc float64
	last := int32(-1)
	for i, e := range w {
		if e == 0 {
			continue
		}
		acc += float64(e)
		last = int32(i)
		if acc > target {
			return last, z
		}
	}
	return last, z // rounding: target reached the total
}

// drawNucleus is draw's top_p path. Rather than sorting the row it buckets
// weights by binary exponent in the weight pass, finds the bucket where the
// cumulative mass (most likely first) crosses topP × kept mass, and sorts
// only that bucket's members: every token in a higher bucket is in the
// nucleus whatever their order.
func (sc *Scratch) drawNucleus(x []float32, m, thr float32, topP float64, rng *rand.PCG) (int32, float64) {
	w := sc.w
	clear(sc.mass[:])
	var z float64
	for i, v := range x {
		e := expNeg(v - m)
		z += float64(e)
		if v >= thr {
			w[i] = e
			sc.mass[math.Float32bits(e)>>23] += float64(e)
		} else {
			w[i] = 0
		}
	}
	var kept float64
	for b := len(sc.mass) - 1; b >= 0; b-- {
		kept += sc.mass[b]
	}
	target := topP * kept
	// Find the boundary bucket: mass above it is short of target, with it not.
	var above float64
	edge := uint32(1)
	for b := len(sc.mass) - 1; b >= 1; b-- {
		if above+sc.mass[b] >= target {
			edge = uint32(b)
			break
		}
		above += sc.mass[b]
	}
	na, nb := 0, 0 // certain candidates at cand[:na], boundary at cand[len-nb:]
	cand := sc.cand
	for i, e := range w {
		b := math.Float32bits(e) >> 23
		switch {
		case b > edge:
			cand[na] = int32(i)
			na++
		case b == edge && e != 0:
			nb++
			cand[len(cand)-nb] = int32(i)
		}
	}
	bucket := cand[len(cand)-nb:]
	slices.SortFunc(bucket, func(a, b int32) int {
		if c := cmp.Compare(w[b], w[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	mass := above
	keep := 0
	for _, t := range bucket {
		mass += float64(w[t])
		keep++
		if mass >= target {
			break
		}
	}
	bucket = bucket[:keep]

	u := uniform(rng) * mass
	var acc float64
	last := int32(-1)
	for _, list := range [2][]int32{cand[:na], bucket} {
		for _, t := range list {
			acc += float64(w[t])
			last = t
			if acc > u {
				return t, z
			}
		}
	}
	return last, z // rounding: u reached the total
}

// kthLargest returns the k-th largest (1-based) of the entries of x that are
// >= thr, or -Inf when there are at most k of them. Quickselect with a
// three-way partition (ties are common in quantised logits), O(len(x)).
func (sc *Scratch) kthLargest(x []float32, thr float32, k int) float32 {
	// For k much smaller than the row, raise the threshold first to a value
	// estimated from a strided sample to have a few times k entries above
	// it; the selection then runs on that short list. If the estimate keeps
	// fewer than k the full list is used, so the answer is the same.
	if n := len(x); k*8 <= n && n >= 4*kSample {
		sample := sc.sample[:kSample]
		for i := range sample {
			sample[i] = x[i*(n/kSample)]
		}
		slices.Sort(sample)
		// Expected entries above sample[kSample-1-j] is about (j+1)·n/kSample.
		j := min(kSample-1, 2*k*kSample/n+8)
		if est := sample[kSample-1-j]; est > thr {
			if vals := sc.collect(x, est); len(vals) >= k {
				return selectDesc(vals, k)
			}
		}
	}
	vals := sc.collect(x, thr)
	if len(vals) <= k {
		return float32(math.Inf(-1))
	}
	return selectDesc(vals, k)
}

// kSample is the strided sample size kthLargest estimates a threshold from.
const kSample = 256

// collect copies the entries of x that are >= thr into sc.vals.
func (sc *Scratch) collect(x []float32, thr float32) []float32 {
	vals := sc.vals[:0]
	for _, v := range x {
		if v >= thr {
			vals = append(vals, v)
		}
	}
	return vals
}

// selectDesc returns the k-th largest entry of vals (len(vals) >= k),
// reordering vals.
func selectDesc(vals []float32, k int) float32 {
	target := k - 1 // index in descending order
	lo, hi := 0, len(vals)
	for range 64 {
		a, b, c := vals[lo], vals[lo+(hi-lo)/2], vals[hi-1]
		pivot := max(min(a, b), min(max(a, b), c)) // median of three
		// Partition vals[lo:hi] into > pivot [lo,lt), == pivot [lt,gt), < pivot [gt,hi).
		lt, i, gt := lo, lo, hi
		for i < gt {
			switch v := vals[i]; {
			case v > pivot:
				vals[lt], vals[i] = vals[i], vals[lt]
				lt++
				i++
			case v < pivot:
				gt--
				vals[gt], vals[i] = vals[i], vals[gt]
			default:
				i++
			}
		}
		switch {
		case target < lt:
			hi = lt
		case target < gt:
			return pivot
		default:
			lo = gt
		}
	}
	// Adversarial input defeated the pivot rule: sort what is left.
	rest := vals[lo:hi]
	slices.Sort(rest)
	return rest[len(rest)-1-(target-lo)]
}
