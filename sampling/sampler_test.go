package sampling

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	negInf = float32(math.Inf(-1))
	posInf = float32(math.Inf(1))
	nan32  = float32(math.NaN())
)

func newChoice() *Choice {
	return &Choice{TopTokens: make([]int32, MaxTopLogprobs), TopLogprobs: make([]float32, MaxTopLogprobs)}
}

// sampleOnce starts nothing: it copies logits (Sample scribbles on them) and
// checks the Sampler's bookkeeping afterwards.
func sampleOnce(t testing.TB, s *Sampler, seat int32, logits []float32, c *Choice) int32 {
	t.Helper()
	row := append([]float32(nil), logits...)
	require.NoError(t, s.Sample(seat, row, c))
	require.NoError(t, s.Check())
	require.GreaterOrEqual(t, c.Token, int32(0))
	require.Less(t, int(c.Token), s.Vocab())
	return c.Token
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		seats, vocab int
		err          string
	}{
		{1, 1, ""},
		{256, 128256, ""},
		{0, 10, "seats 0"},
		{-1, 10, "seats -1"},
		{4, 0, "vocab 0"},
	} {
		s, err := New(tc.seats, tc.vocab)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.seats, s.Seats())
		require.Equal(t, tc.vocab, s.Vocab())
		require.NoError(t, s.Check())
	}
}

func TestSeatErrors(t *testing.T) {
	s, err := New(2, 4)
	require.NoError(t, err)
	p := DefaultParams()
	c := newChoice()
	row := []float32{1, 2, 3, 4}
	require.ErrorContains(t, s.Start(2, &p, nil), "seat 2")
	require.ErrorContains(t, s.Start(-1, &p, nil), "seat -1")
	require.ErrorContains(t, s.Start(0, nil, nil), "nil params")
	require.ErrorContains(t, s.Start(0, &p, []int32{1, 4}), "history[1] = 4")
	bad := p
	bad.TopP = 0
	require.ErrorContains(t, s.Start(0, &bad, nil), "top_p")
	require.ErrorContains(t, s.Sample(0, row, c), "not started")
	require.ErrorContains(t, s.End(0), "not started")
	require.NoError(t, s.Check())

	require.NoError(t, s.Start(0, &p, []int32{0, 3}))
	require.ErrorContains(t, s.Sample(0, row[:3], c), "3 logits")
	require.ErrorContains(t, s.Sample(0, row, nil), "nil choice")
	require.ErrorContains(t, s.SampleWith(0, row, c, NewScratch(5)), "scratch")
	p.TopLogprobs = 3
	require.NoError(t, s.Start(1, &p, nil))
	require.ErrorContains(t, s.Sample(1, row, &Choice{TopTokens: make([]int32, 2), TopLogprobs: make([]float32, 3)}), "top_logprobs 3")
	require.NoError(t, s.Check())
	require.NoError(t, s.End(0))
	require.NoError(t, s.End(1))
	require.NoError(t, s.Check())
}

func TestGreedy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		temp   float32
		logits []float32
		want   int32
	}{
		{"plain", 0, []float32{0.1, 3, -2, 2.9}, 1},
		{"tie takes lowest id", 0, []float32{1, 5, 2, 5, 5}, 1},
		{"first of all equal", 0, []float32{7, 7, 7}, 0},
		{"NaN is -Inf", 0, []float32{nan32, -1, -0.5}, 2},
		{"-Inf skipped", 0, []float32{negInf, negInf, -100}, 2},
		{"all -Inf", 0, []float32{negInf, negInf, negInf}, 0},
		{"all NaN", 0, []float32{nan32, nan32}, 0},
		{"+Inf wins", 0, []float32{1e38, posInf, posInf}, 1},
		{"tiny temperature is greedy", GreedyBelow / 2, []float32{0, 1, 0.999}, 1},
		{"negative only", 0, []float32{-3, -1, -2}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(1, len(tc.logits))
			require.NoError(t, err)
			p := DefaultParams()
			p.Temperature = tc.temp
			p.Logprobs = true
			require.NoError(t, s.Start(0, &p, nil))
			c := newChoice()
			for range 3 { // greedy is the same every step
				require.Equal(t, tc.want, sampleOnce(t, s, 0, tc.logits, c))
				require.False(t, math.IsNaN(float64(c.Logprob)))
				require.LessOrEqual(t, c.Logprob, float32(0))
			}
		})
	}
}

func TestSeeds(t *testing.T) {
	const vocab, draws = 50, 300
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i))) // fairly flat: many tokens likely
	}
	run := func(s *Sampler, seat int32, p Params) []int32 {
		require.NoError(t, s.Start(seat, &p, nil))
		out := make([]int32, draws)
		c := newChoice()
		for i := range out {
			out[i] = sampleOnce(t, s, seat, logits, c)
		}
		require.NoError(t, s.End(seat))
		return out
	}
	p := DefaultParams()
	p.Temperature = 1
	seeded := func(seed uint64) Params { q := p; q.Seed, q.HasSeed = seed, true; return q }

	s1, _ := New(2, vocab)
	s2, _ := New(2, vocab)
	a := run(s1, 0, seeded(42))
	require.Equal(t, a, run(s2, 1, seeded(42)), "same seed, other sampler and seat")
	require.NotEqual(t, a, run(s1, 0, seeded(43)), "different seed")

	// Unseeded requests: distinct per start, identical across fresh samplers.
	u1, u2 := run(s1, 0, p), run(s1, 0, p)
	require.NotEqual(t, u1, u2)
	f1, _ := New(1, vocab)
	f2, _ := New(1, vocab)
	require.Equal(t, run(f1, 0, p), run(f2, 0, p))
	f3, _ := New(1, vocab)
	f3.SetSeedBase(7)
	f4, _ := New(1, vocab)
	require.NotEqual(t, run(f3, 0, p), run(f4, 0, p), "seed base changes unseeded streams")
}

// refDist is the exact sampling distribution in float64, written the
// obvious way (full sort) as an independent reference.
func refDist(logits []float32, p Params) []float64 {
	n := len(logits)
	x := make([]float64, n)
	m := math.Inf(-1)
	for i, v := range logits {
		x[i] = float64(v) / float64(p.Temperature)
		m = math.Max(m, x[i])
	}
	w := make([]float64, n)
	for i := range x {
		w[i] = math.Exp(x[i] - m)
	}
	keep := make([]bool, n)
	for i := range keep {
		keep[i] = w[i] >= float64(p.MinP)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return w[order[a]] > w[order[b]] })
	if p.TopK > 0 && p.TopK < n {
		kth := w[order[p.TopK-1]]
		for i := range keep {
			keep[i] = keep[i] && w[i] >= kth
		}
	}
	var total float64
	for i := range w {
		if keep[i] {
			total += w[i]
		}
	}
	if p.TopP < 1 {
		var cum float64
		done := false
		for _, i := range order {
			if !keep[i] {
				continue
			}
			if done {
				keep[i] = false
				continue
			}
			cum += w[i]
			done = cum >= float64(p.TopP)*total
		}
		total = cum
	}
	out := make([]float64, n)
	for i := range out {
		if keep[i] {
			out[i] = w[i] / total
		}
	}
	return out
}

func TestDistribution(t *testing.T) {
	// Ties at 1.5 (ids 1, 2) exercise the tie rules of top_k/top_p.
	logits := []float32{2.0, 1.5, 1.5, 0.3, -0.7, -1.2, 0.9, -3, negInf}
	const draws = 40000
	with := func(f func(*Params)) Params {
		p := DefaultParams()
		p.Temperature = 1
		f(&p)
		return p
	}
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"temperature 1", with(func(p *Params) {})},
		{"temperature 0.5", with(func(p *Params) { p.Temperature = 0.5 })},
		{"temperature 1.7", with(func(p *Params) { p.Temperature = 1.7 })},
		{"top_k 3", with(func(p *Params) { p.TopK = 3 })},
		{"top_k 2 keeps tie", with(func(p *Params) { p.TopK = 2 })},
		{"top_k 1", with(func(p *Params) { p.TopK = 1 })},
		{"top_p 0.6", with(func(p *Params) { p.TopP = 0.6 })},
		{"top_p 0.9", with(func(p *Params) { p.TopP = 0.9 })},
		{"top_p 0.2", with(func(p *Params) { p.TopP = 0.2 })},
		{"min_p 0.2", with(func(p *Params) { p.MinP = 0.2 })},
		{"min_p 1", with(func(p *Params) { p.MinP = 1 })},
		{"all filters", with(func(p *Params) { p.Temperature = 1.3; p.MinP = 0.05; p.TopK = 6; p.TopP = 0.8 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := refDist(logits, tc.p)
			s, err := New(1, len(logits))
			require.NoError(t, err)
			p := tc.p
			p.Seed, p.HasSeed = 1234, true
			require.NoError(t, s.Start(0, &p, nil))
			counts := make([]int, len(logits))
			row := make([]float32, len(logits))
			c := newChoice()
			for range draws {
				copy(row, logits)
				require.NoError(t, s.Sample(0, row, c))
				counts[c.Token]++
			}
			require.NoError(t, s.Check())
			// Each frequency within 5 binomial standard deviations of the
			// exact probability; zero-probability tokens never drawn.
			for i, pi := range want {
				f := float64(counts[i]) / draws
				if pi == 0 {
					require.Zero(t, counts[i], "token %d outside the kept set", i)
					continue
				}
				tol := 5 * math.Sqrt(pi*(1-pi)/draws)
				require.InDelta(t, pi, f, tol, "token %d", i)
			}
		})
	}
}

// TestNucleusLargeVocab checks the bucketed top_p against the full-sort
// reference on a vocabulary big enough to spread over many buckets: every
// drawn token must be in the reference nucleus and the nucleus's mass bounds
// must hold.
func TestNucleusLargeVocab(t *testing.T) {
	const vocab = 3000
	logits := make([]float32, vocab)
	for i := range logits {
		// Deterministic spread of logits with repeats (ties).
		logits[i] = float32((i*7919)%997) / 60
	}
	for _, topP := range []float32{0.05, 0.5, 0.9, 0.99} {
		t.Run(fmt.Sprint(topP), func(t *testing.T) {
			p := DefaultParams()
			p.Temperature = 0.7
			p.TopP = topP
			want := refDist(logits, p)
			s, _ := New(1, vocab)
			p.Seed, p.HasSeed = 9, true
			require.NoError(t, s.Start(0, &p, nil))
			c := newChoice()
			for range 500 {
				tok := sampleOnce(t, s, 0, logits, c)
				require.Positive(t, want[tok], "token %d outside reference nucleus", tok)
			}
		})
	}
}

func TestPenalties(t *testing.T) {
	// Greedy leaves the penalised row in place, so the row after the last
	// Sample shows exactly what the penalties did.
	for _, tc := range []struct {
		name           string
		rep, pres, frq float32
		history        []int32
		steps          [][]float32 // rows whose argmax is forced, to fix the output tokens
		last           []float32
		want           []float32
	}{
		{
			name: "repetition on prompt and output", rep: 2,
			history: []int32{0, 0, 1},
			steps:   [][]float32{{0, 0, 0, 9, 0}}, // outputs token 3
			last:    []float32{4, -4, 1, 6, 1},
			want:    []float32{2, -8, 1, 3, 1},
		},
		{
			name: "presence and frequency on output only", pres: 0.5, frq: 0.25,
			history: []int32{4},
			steps:   [][]float32{{9, 0, 0, 0, 0}, {9, 0, 0, 0, 0}, {0, 9, 0, 0, 0}}, // outputs 0, 0, 1
			last:    []float32{1, 1, 1, 1, 1},
			// token 0: 1 - 2*0.25 - 0.5; token 1: 1 - 0.25 - 0.5; prompt token 4 untouched.
			want: []float32{0, 0.25, 1, 1, 1},
		},
		{
			name: "all three", rep: 1.25, pres: -1, frq: 1,
			history: []int32{2},
			steps:   [][]float32{{0, 0, 9, 0, 0}}, // outputs 2
			last:    []float32{1, 1, 5, 1, 1},
			// 5 / 1.25 = 4, then - 1*1 - (-1) = 4.
			want: []float32{1, 1, 4, 1, 1},
		},
		{
			name: "negative presence rewards", pres: -2,
			steps: [][]float32{{0, 9, 0, 0, 0}},
			last:  []float32{0, -1, 0, 0, 0},
			want:  []float32{0, 1, 0, 0, 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := New(1, 5)
			p := DefaultParams()
			p.RepetitionPenalty = 1
			if tc.rep != 0 {
				p.RepetitionPenalty = tc.rep
			}
			p.PresencePenalty, p.FrequencyPenalty = tc.pres, tc.frq
			require.NoError(t, s.Start(0, &p, tc.history))
			require.NoError(t, s.Check())
			c := newChoice()
			for _, row := range tc.steps {
				want := int32(0)
				for i, v := range row {
					if v == 9 {
						want = int32(i)
					}
				}
				require.Equal(t, want, sampleOnce(t, s, 0, row, c))
			}
			row := append([]float32(nil), tc.last...)
			require.NoError(t, s.Sample(0, row, c))
			require.NoError(t, s.Check())
			require.InDeltaSlice(t, tc.want, row, 1e-6)

			// Resumed after preemption: the same history and outputs given
			// at once to StartWithOutput penalise exactly the same way.
			resumed := append([]int32(nil), tc.history...)
			for _, r := range tc.steps {
				for i, v := range r {
					if v == 9 {
						resumed = append(resumed, int32(i))
					}
				}
			}
			r, _ := New(1, 5)
			require.NoError(t, r.StartWithOutput(0, &p, resumed, len(tc.steps)))
			require.NoError(t, r.Check())
			row = append(row[:0], tc.last...)
			require.NoError(t, r.Sample(0, row, c))
			require.NoError(t, r.Check())
			require.InDeltaSlice(t, tc.want, row, 1e-6)
		})
	}
}

func TestStartWithOutputErrors(t *testing.T) {
	s, _ := New(1, 5)
	p := DefaultParams()
	for _, tc := range []struct {
		history []int32
		n       int
		want    string
	}{
		{[]int32{1, 2}, 3, "3 output tokens in a history of 2"},
		{[]int32{1, 2}, -1, "-1 output tokens in a history of 2"},
		{[]int32{1, 7}, 1, "history[1] = 7"},
	} {
		require.ErrorContains(t, s.StartWithOutput(0, &p, tc.history, tc.n), tc.want)
	}
	require.NoError(t, s.StartWithOutput(0, &p, []int32{1, 2}, 2))
	require.NoError(t, s.Check())
}

func TestLogprobs(t *testing.T) {
	logits := []float32{2, 1.5, 1.5, 0.3, -0.7, negInf, 0.9, -3}
	for _, tc := range []struct {
		name string
		temp float32
		topP float32
	}{
		{"greedy", 0, 1},
		{"temperature 0.8", 0.8, 1},
		{"truncated: logprob still before truncation", 0.8, 0.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := New(1, len(logits))
			p := DefaultParams()
			p.Temperature, p.TopP = tc.temp, tc.topP
			p.TopLogprobs = len(logits)
			require.NoError(t, s.Start(0, &p, nil))
			c := newChoice()
			for range 20 {
				tok := sampleOnce(t, s, 0, logits, c)
				var sum float64
				for i := range len(logits) {
					sum += math.Exp(float64(c.TopLogprobs[i]))
					if i > 0 {
						prev, cur := c.TopLogprobs[i-1], c.TopLogprobs[i]
						require.True(t, prev > cur || (prev == cur && c.TopTokens[i-1] < c.TopTokens[i]),
							"top list order at %d", i)
					}
					if c.TopTokens[i] == tok {
						require.Equal(t, c.Logprob, c.TopLogprobs[i])
					}
				}
				require.InDelta(t, 1, sum, 1e-5)
				temp := float64(tc.temp)
				if temp == 0 {
					temp = 1
				}
				var z float64
				for _, v := range logits {
					z += math.Exp(float64(v) / temp)
				}
				require.InDelta(t, float64(logits[tok])/temp-math.Log(z), float64(c.Logprob), 1e-5)
			}
			require.Equal(t, []int32{0, 1, 2, 6, 3, 4, 7, 5}, c.TopTokens[:len(logits)])
			require.True(t, math.IsInf(float64(c.TopLogprobs[7]), -1))
		})
	}
	// Not requested: zero, and top buffers untouched.
	s, _ := New(1, 3)
	p := DefaultParams()
	require.NoError(t, s.Start(0, &p, nil))
	c := &Choice{TopTokens: []int32{-7}, TopLogprobs: []float32{-7}}
	sampleOnce(t, s, 0, []float32{1, 2, 3}, c)
	require.Zero(t, c.Logprob)
	require.Equal(t, int32(-7), c.TopTokens[0])
}

func TestTopKSelect(t *testing.T) {
	sc := NewScratch(64)
	x := make([]float32, 64)
	for i := range x {
		x[i] = float32((i * 37) % 11) // many ties
	}
	sorted := append([]float32(nil), x...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a] > sorted[b] })
	for k := 1; k < len(x); k++ {
		require.Equal(t, sorted[k-1], sc.kthLargest(x, negInf, k), "k=%d", k)
	}
	require.True(t, math.IsInf(float64(sc.kthLargest(x, negInf, 64)), -1))
	require.True(t, math.IsInf(float64(sc.kthLargest(x, 9, 20)), -1), "threshold leaves fewer than k")

	// Large rows take the sampled-threshold path; rows shaped so that the
	// strided sample misleads (sorted, constant, few distinct) still agree.
	const n = 10000
	shapes := map[string]func(i int) float32{
		"hashed":     func(i int) float32 { return float32((i*7919)%1009) / 7 },
		"ascending":  func(i int) float32 { return float32(i) },
		"descending": func(i int) float32 { return float32(n - i) },
		"constant":   func(i int) float32 { return 3 },
		"spike":      func(i int) float32 { return float32(max(0, i%97-95)) },
	}
	big := NewScratch(n)
	for name, f := range shapes {
		x := make([]float32, n)
		for i := range x {
			x[i] = f(i)
		}
		sorted := append([]float32(nil), x...)
		sort.Slice(sorted, func(a, b int) bool { return sorted[a] > sorted[b] })
		for _, k := range []int{1, 2, 5, 50, 300, n / 8, n/8 + 1, n - 1} {
			require.Equal(t, sorted[k-1], big.kthLargest(x, negInf, k), "%s k=%d", name, k)
			require.Equal(t, max(sorted[k-1], 1), max(big.kthLargest(x, 1, k), 1), "%s k=%d thr=1", name, k)
		}
	}
}

func TestPenaltyTableGrowth(t *testing.T) {
	const vocab = 5000
	s, _ := New(3, vocab)
	p := DefaultParams()
	p.RepetitionPenalty = 1.1
	p.FrequencyPenalty = 0.1
	hist := make([]int32, 3000)
	for i := range hist {
		hist[i] = int32((i * 13) % vocab)
	}
	require.NoError(t, s.Start(1, &p, hist))
	require.NoError(t, s.Check())
	row := make([]float32, vocab)
	c := newChoice()
	for i := range 200 {
		clear(row)
		row[(i*31)%vocab] = 50
		require.Equal(t, int32((i*31)%vocab), sampleOnce(t, s, 1, row, c))
	}
	// Restarting without penalties drops the tracked tokens.
	q := DefaultParams()
	require.NoError(t, s.Start(1, &q, hist))
	require.NoError(t, s.Check())
	require.Empty(t, s.seats[1].counts.ents)
	require.NoError(t, s.End(1))
	require.NoError(t, s.Check())
}

func TestConcurrentSeats(t *testing.T) {
	const seats, vocab = 4, 300
	s, _ := New(seats, vocab)
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(math.Cos(float64(i) / 3))
	}
	p := DefaultParams()
	p.Temperature, p.TopP, p.FrequencyPenalty, p.HasSeed, p.Seed = 0.9, 0.9, 0.3, true, 5
	for i := range seats {
		require.NoError(t, s.Start(int32(i), &p, []int32{1, 2, 3}))
	}
	out := make([][]int32, seats)
	errs := make([]error, seats)
	var wg sync.WaitGroup
	for i := range seats {
		wg.Go(func() {
			sc := NewScratch(vocab)
			row := make([]float32, vocab)
			c := newChoice()
			for range 100 {
				copy(row, logits)
				if err := s.SampleWith(int32(i), row, c, sc); err != nil {
					errs[i] = err
					return
				}
				out[i] = append(out[i], c.Token)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, s.Check())
	for i := 1; i < seats; i++ {
		require.Equal(t, out[0], out[i], "same seed and inputs on seat %d", i)
	}
}

func TestDegenerateRows(t *testing.T) {
	const draws = 4000
	for _, tc := range []struct {
		name   string
		logits []float32
		want   []float64 // exact distribution
	}{
		{"+Inf tokens share the mass", []float32{posInf, 0, posInf, 1e30}, []float64{0.5, 0, 0.5, 0}},
		{"all -Inf or NaN is uniform", []float32{negInf, nan32, negInf, negInf}, []float64{0.25, 0.25, 0.25, 0.25}},
		{"NaN never drawn", []float32{nan32, 0, nan32, 0}, []float64{0, 0.5, 0, 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := New(1, len(tc.logits))
			p := DefaultParams()
			p.Temperature, p.HasSeed, p.Seed = 0.5, true, 3
			p.TopLogprobs = 6 // more than the vocabulary
			require.NoError(t, s.Start(0, &p, nil))
			c := newChoice()
			counts := make([]int, len(tc.logits))
			for range draws {
				counts[sampleOnce(t, s, 0, tc.logits, c)]++
				require.Equal(t, []int32{-1, -1}, c.TopTokens[4:6])
				require.True(t, math.IsInf(float64(c.TopLogprobs[5]), -1))
			}
			for i, pi := range tc.want {
				require.InDelta(t, pi, float64(counts[i])/draws, 5*math.Sqrt(pi*(1-pi)/draws), "token %d", i)
			}
		})
	}
}

// TestSeededResume: a seeded request restarted after preemption by
// recompute (its generated tokens passed back as the tail of its history)
// continues its random stream, so it draws exactly what an uninterrupted
// run draws; top-p and top-k paths alike.
func TestSeededResume(t *testing.T) {
	const vocab, draws, cut = 50, 40, 17
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	for _, tc := range []struct {
		name string
		mod  func(*Params)
	}{
		{"plain", func(*Params) {}},
		{"top-p", func(p *Params) { p.TopP = 0.8 }},
		{"top-k", func(p *Params) { p.TopK = 10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			p.Temperature, p.Seed, p.HasSeed = 0.9, 1234, true
			tc.mod(&p)
			prompt := []int32{3, 4, 5}
			s, err := New(2, vocab)
			require.NoError(t, err)
			c := newChoice()
			require.NoError(t, s.Start(0, &p, prompt))
			whole := make([]int32, draws)
			for i := range whole {
				whole[i] = sampleOnce(t, s, 0, logits, c)
			}
			history := append(append([]int32{}, prompt...), whole[:cut]...)
			require.NoError(t, s.StartWithOutput(1, &p, history, cut))
			for i := cut; i < draws; i++ {
				require.Equal(t, whole[i], sampleOnce(t, s, 1, logits, c), "token %d after resuming at %d", i, cut)
			}
			require.NoError(t, s.Check())
		})
	}
}

// TestSampleMasked: every sampling mode draws only allowed tokens, and
// the logprobs are those of the constrained distribution.
func TestSampleMasked(t *testing.T) {
	const vocab = 130
	mask := make([]uint64, (vocab+63)/64)
	allowed := []int32{3, 64, 129}
	for _, a := range allowed {
		mask[a>>6] |= 1 << (a & 63)
	}
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"greedy", Params{Temperature: 0, TopP: 1, MinP: 0, RepetitionPenalty: 1, Logprobs: true}},
		{"temperature", Params{Temperature: 1.5, TopP: 1, RepetitionPenalty: 1, Seed: 7, HasSeed: true}},
		{"top-k top-p", Params{Temperature: 1, TopK: 2, TopP: 0.5, RepetitionPenalty: 1, Seed: 9, HasSeed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(1, vocab)
			require.NoError(t, err)
			p := tc.p
			require.NoError(t, s.Start(0, &p, nil))
			sc := NewScratch(vocab)
			for i := 0; i < 50; i++ {
				logits := make([]float32, vocab)
				for j := range logits {
					logits[j] = float32(j % 17) // token 16 is the unconstrained favourite
				}
				var c Choice
				require.NoError(t, s.SampleMasked(0, logits, mask, &c, sc))
				require.Contains(t, allowed, c.Token)
				if tc.p.Logprobs {
					// Among 3 (logit 3), 64 (logit 13), 129 (logit 10): greedy takes 64.
					require.Equal(t, int32(64), c.Token)
					want := 13 - math.Log(math.Exp(3)+math.Exp(13)+math.Exp(10))
					require.InDelta(t, want, float64(c.Logprob), 1e-4)
				}
			}
			require.NoError(t, s.Check())
		})
	}
	s, err := New(1, vocab)
	require.NoError(t, err)
	p := Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
	require.NoError(t, s.Start(0, &p, nil))
	var c Choice
	require.ErrorContains(t, s.SampleMasked(0, make([]float32, vocab), make([]uint64, 3), &c, NewScratch(vocab)), "allows no token")
	require.ErrorContains(t, s.SampleMasked(0, make([]float32, vocab), make([]uint64, 2+1+1), &c, NewScratch(vocab)), "mask has 4 words")
}
