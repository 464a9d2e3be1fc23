package serveload

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/testwait"
)

const ms = time.Millisecond

func TestMetricTPOTAndGoodput(t *testing.T) {
	samples := []sample{
		{ttft: 100 * ms, e2e: 1100 * ms, tokens: 11}, // TPOT (1100-100)/10 = 100ms
		{ttft: 500 * ms, e2e: 600 * ms, tokens: 2},   // TPOT 100ms: the first token's 500ms is excluded
		{ttft: 300 * ms, e2e: 300 * ms, tokens: 1},   // no TPOT
		{ttft: 50 * ms, e2e: 850 * ms, tokens: 5},    // TPOT 200ms
	}
	m := summarize(samples, SLO{})
	require.Equal(t, 4, m.ttft.N)
	require.Equal(t, 4, m.e2e.N)
	require.Equal(t, 3, m.tpot.N, "a 1-token request has no TPOT")
	require.Equal(t, Dist{N: 3, Mean: time.Duration(400 * ms / 3), Median: 100 * ms,
		Std: time.Duration(math.Round(math.Sqrt(2.0/9) * float64(100*ms))), P90: 200 * ms, P99: 200 * ms}, m.tpot)
	require.Equal(t, 4, m.met, "no SLO: every request is good")
	require.Equal(t, 237500*time.Microsecond, m.ttft.Mean)
	require.Equal(t, 100*ms, m.ttft.Median, "nearest rank: the 2nd of 4")
	require.Equal(t, 500*ms, m.ttft.P99)

	for _, tc := range []struct {
		slo  SLO
		want int
	}{
		{SLO{TTFT: 300 * ms}, 3},
		{SLO{TTFT: 299 * ms}, 2},
		{SLO{TPOT: 100 * ms}, 3}, // the 1-token request meets any TPOT bound
		{SLO{TPOT: 99 * ms}, 1},
		{SLO{E2E: 850 * ms}, 3},
		{SLO{TTFT: 300 * ms, TPOT: 100 * ms}, 2},         // all bounds at once
		{SLO{TTFT: 300 * ms, TPOT: 100 * ms, E2E: 1}, 0}, // nothing within 1ns
		{SLO{TTFT: time.Hour, TPOT: time.Hour, E2E: time.Hour}, 4},
	} {
		t.Run(tc.slo.String(), func(t *testing.T) {
			require.Equal(t, tc.want, summarize(samples, tc.slo).met)
		})
	}
	require.Equal(t, metrics{}, summarize(nil, SLO{TTFT: ms}), "no samples: zero distributions")
}

// scripted is a clock returning t0 plus each offset in turn.
func scripted(t0 time.Time, offsets ...time.Duration) func() time.Time {
	i := 0
	return func() time.Time {
		d := offsets[min(i, len(offsets)-1)]
		i++
		return t0.Add(d)
	}
}

func TestMetricReadStreamTimings(t *testing.T) {
	const usage = "data: {\"choices\":[],\"usage\":{\"completion_tokens\":3,\"prompt_tokens\":9}}\n\ndata: [DONE]\n\n"
	text := func(s, fin string) string {
		return fmt.Sprintf("data: {\"choices\":[{\"text\":%q,\"finish_reason\":%s}]}\n\n", s, fin)
	}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		in       string
		clock    []time.Duration // one reading per chunk with a choice that counts
		wantTTFT time.Duration
		wantGaps []time.Duration
	}{
		{"three tokens", text("a", "null") + text("b", "null") + text("c", `"length"`) + usage,
			[]time.Duration{10 * ms, 30 * ms, 60 * ms}, 10 * ms, []time.Duration{20 * ms, 30 * ms}},
		{"empty text chunks carry no token", text("", "null") + text("a", "null") + text("", "null") +
			text("b", `"stop"`) + usage, []time.Duration{5 * ms, 10 * ms, 40 * ms}, 10 * ms, []time.Duration{30 * ms}},
		{"no text at all", text("", `"stop"`) + usage, []time.Duration{7 * ms}, 7 * ms, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, gaps, err := readStream(bufio.NewReaderSize(strings.NewReader(tc.in), MaxLineBytes), t0,
				scripted(t0, tc.clock...), nil)
			require.NoError(t, err)
			require.Equal(t, tc.wantTTFT, st.ttft)
			require.Equal(t, tc.wantGaps, gaps)
			require.Equal(t, 3, st.tokens)
			require.Equal(t, 9, st.promptTokens)
		})
	}
}

func TestMetricITLPoolsGaps(t *testing.T) {
	r := newReservoir(MaxITLSamples, 1)
	r.add([]time.Duration{10 * ms, 20 * ms})
	r.add(nil) // a 1-chunk request has no gap
	r.add([]time.Duration{30 * ms, 40 * ms, 50 * ms})
	require.Equal(t, Dist{N: 5, Mean: 30 * ms, Median: 30 * ms,
		Std: time.Duration(math.Round(math.Sqrt(200) * float64(ms))), P90: 50 * ms, P99: 50 * ms}, r.dist())
	require.Equal(t, Dist{}, newReservoir(4, 1).dist())

	// Past its bound the reservoir keeps a sample of the bound's size, and
	// the count, mean and deviation of every gap.
	small := newReservoir(10, 2)
	var all []float64
	for i := range 1000 {
		g := time.Duration(i+1) * time.Microsecond
		small.add([]time.Duration{g})
		all = append(all, float64(g))
	}
	d := small.dist()
	require.Len(t, small.kept, 10)
	exact := distOf(all)
	require.Equal(t, 1000, d.N)
	require.Equal(t, exact.Mean, d.Mean)
	require.InDelta(t, float64(exact.Std), float64(d.Std), 1)
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(small.kept))), 10, "kept gaps are distinct draws")
}

func TestPoissonSchedule(t *testing.T) {
	for _, rate := range []float64{0.5, 10, 2000} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			draw := func(seed uint64, n int) []time.Duration {
				rng := rand.New(rand.NewPCG(seed, OpenLoopStream))
				gaps := make([]time.Duration, n)
				for i := range gaps {
					gaps[i] = poissonGap(rng, rate)
				}
				return gaps
			}
			gaps := draw(7, 100_000)
			sum := 0.0
			for _, g := range gaps {
				require.GreaterOrEqual(t, g, time.Duration(0))
				sum += g.Seconds()
			}
			mean := sum / float64(len(gaps))
			// The standard error of the mean of 100k exponential draws is
			// 0.32% of 1/rate; 2% is ~6 standard errors.
			require.InEpsilon(t, 1/rate, mean, 0.02)
			require.Equal(t, draw(7, 100), gaps[:100], "deterministic for a seed")
			require.NotEqual(t, draw(8, 100), gaps[:100])
		})
	}
}

func TestParseSLO(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    SLO
		wantErr string
	}{
		{"ttft:200ms", SLO{TTFT: 200 * ms}, ""},
		{"ttft:200ms,tpot:50ms,e2e:2s", SLO{TTFT: 200 * ms, TPOT: 50 * ms, E2E: 2 * time.Second}, ""},
		{" TPOT : 1.5ms , e2el:3s", SLO{TPOT: 1500 * time.Microsecond, E2E: 3 * time.Second}, ""},
		{"ttft:200,tpot:12.5", SLO{TTFT: 200 * ms, TPOT: 12500 * time.Microsecond}, ""}, // vLLM's bare milliseconds
		{"", SLO{}, "empty"},
		{"ttft", SLO{}, `"ttft": want metric:bound`},
		{"ttft:200ms,", SLO{}, `"": want metric:bound`},
		{"itl:5ms", SLO{}, `unknown metric "itl"`},
		{"ttft:1s,ttft:2s", SLO{}, "ttft given twice"},
		{"ttft:fast", SLO{}, `bound "fast": want a duration`},
		{"tpot:0ms", SLO{}, `bound "0ms": must be > 0`},
		{"e2e:-1s", SLO{}, `bound "-1s": must be > 0`},
		{"e2e:NaN", SLO{}, `bound "NaN"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSLO(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			back, err := ParseSLO(got.String())
			require.NoError(t, err)
			require.Equal(t, got, back, "String round-trips")
		})
	}
}

func TestPromptLen(t *testing.T) {
	for _, tc := range []struct {
		in       string
		want     PromptLen
		min, max int
		wantErr  string
	}{
		{"fixed:32", PromptLen{"fixed", 32, 32}, 32, 32, ""},
		{"fixed:1", PromptLen{"fixed", 1, 1}, 1, 1, ""},
		{"uniform:16-256", PromptLen{"uniform", 16, 256}, 16, 256, ""},
		{"uniform:3-3", PromptLen{"uniform", 3, 3}, 3, 3, ""},
		{"32", PromptLen{}, 0, 0, "want fixed:N or uniform:MIN-MAX"},
		{"normal:3", PromptLen{}, 0, 0, `distribution "normal"`},
		{"fixed:x", PromptLen{}, 0, 0, `fixed length "x"`},
		{"fixed:0", PromptLen{}, 0, 0, "length 0-0 words"},
		{"uniform:10", PromptLen{}, 0, 0, `uniform range "10": want MIN-MAX`},
		{"uniform:a-3", PromptLen{}, 0, 0, `uniform minimum "a"`},
		{"uniform:3-b", PromptLen{}, 0, 0, `uniform maximum "b"`},
		{"uniform:9-3", PromptLen{}, 0, 0, "length 9-3 words"},
		{"uniform:1-70000", PromptLen{}, 0, 0, "max <= 65536"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := ParsePromptLen(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, p)
			require.Equal(t, tc.in, p.String())
			cfg := Config{PromptLen: p}
			rng := rand.New(rand.NewPCG(3, 4))
			vocab := map[string]bool{}
			for _, w := range Words() {
				vocab[w] = true
			}
			seen := map[int]bool{}
			for range 2000 {
				prompt, n := cfg.drawPrompt(rng)
				words := strings.Split(prompt, " ")
				require.Len(t, words, n, "the length is exact in words")
				require.GreaterOrEqual(t, n, tc.min)
				require.LessOrEqual(t, n, tc.max)
				for _, w := range words {
					if !vocab[w] {
						require.Failf(t, "a word outside the vocabulary", "%q in %q", w, prompt)
					}
				}
				seen[n] = true
			}
			if tc.max > tc.min {
				require.True(t, seen[tc.min] || seen[tc.min+1], "the range's low end is drawn")
				require.True(t, seen[tc.max] || seen[tc.max-1], "the range's high end is drawn")
			}
		})
	}
}

// recorder is a fake SSE server that streams n one-token chunks per
// request and records each request body.
type recorder struct {
	n      int
	mu     sync.Mutex
	bodies []request
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.bodies = append(rc.bodies, req)
	rc.mu.Unlock()
	okStream(w, rc.n)
}

func (rc *recorder) take() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	b := rc.bodies
	rc.bodies = nil
	return b
}

// TestRunMetricsEndToEnd: closed and open loop against a fake server
// measure every metric for every request, with counts that add up.
func TestRunMetricsEndToEnd(t *testing.T) {
	const tokens, max = 5, 24
	rc := &recorder{n: tokens}
	ts := httptest.NewServer(rc)
	defer ts.Close()
	for _, tc := range []struct {
		name string
		cfg  Config
		mode string
	}{
		{"closed", Config{Clients: 3}, "closed"},
		{"open bounded", Config{RequestRate: 5000, MaxConcurrency: 2}, "open"},
		{"open unbounded", Config{RequestRate: 5000}, "open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.BaseURL, cfg.Duration, cfg.MaxRequests, cfg.MaxTokens, cfg.Seed = ts.URL, time.Hour, max, tokens, 4
			cfg.PromptLen = PromptLen{"uniform", 4, 9}
			cfg.SLO = SLO{TTFT: time.Hour, TPOT: time.Hour}
			var calls, last, lastTotal int
			cfg.Progress = func(done, total int) { calls, last, lastTotal = calls+1, done, total }
			res, err := Run(testwait.Ctx(t), cfg)
			require.NoError(t, err, "the load run, bounded by %v", testwait.Bound)
			require.Empty(t, res.FirstError)
			require.Equal(t, tc.mode, res.Mode)
			require.Equal(t, cfg.RequestRate, res.RequestRate)
			require.Equal(t, cfg.MaxConcurrency, res.MaxConcurrency)
			require.Equal(t, max, res.Requests)
			require.Equal(t, max, res.Successes)
			require.Equal(t, int64(max*tokens), res.OutputTokens)
			for _, d := range []Dist{res.TTFT, res.TPOT, res.E2E} {
				require.Equal(t, max, d.N)
				require.LessOrEqual(t, d.Median, d.P90)
				require.LessOrEqual(t, d.P90, d.P99)
			}
			require.Equal(t, max*(tokens-1), res.ITL.N, "ITL pools every request's gaps")
			require.Equal(t, res.TTFT.Median, res.TTFTP50)
			require.Equal(t, res.E2E.P99, res.LatencyP99)
			require.LessOrEqual(t, res.TTFT.Median, res.E2E.Median)
			require.Equal(t, max, res.SLOMet, "hour-long bounds: every request is good")
			require.Equal(t, &cfg.SLO, res.SLO)
			require.InDelta(t, float64(max)/res.Elapsed.Seconds(), res.Goodput, 1e-6)
			require.InDelta(t, res.RequestsPerSec, res.Goodput, 1e-6)
			require.Positive(t, res.MaxInFlight)
			switch {
			case tc.cfg.MaxConcurrency > 0:
				require.LessOrEqual(t, res.MaxInFlight, tc.cfg.MaxConcurrency)
			case tc.mode == "closed":
				require.LessOrEqual(t, res.MaxInFlight, tc.cfg.Clients)
			}
			require.Equal(t, "uniform:4-9 words", res.Prompts)
			require.GreaterOrEqual(t, res.PromptWords.Min, 4)
			require.LessOrEqual(t, res.PromptWords.Max, 9)
			require.InDelta(t, 6.5, res.PromptWords.Mean, 2.5)
			require.GreaterOrEqual(t, calls, 2, "a first and a last progress call")
			require.Equal(t, max, last)
			require.Equal(t, max, lastTotal)

			bodies := rc.take()
			require.Len(t, bodies, max)
			for _, b := range bodies {
				n := len(strings.Fields(b.Prompt))
				require.GreaterOrEqual(t, n, 4)
				require.LessOrEqual(t, n, 9)
			}
		})
	}
}

// TestRunOpenLoopIsSeeded: one slot in flight sends the seed's request
// sequence, the same for the same seed.
func TestRunOpenLoopIsSeeded(t *testing.T) {
	rc := &recorder{n: 2}
	ts := httptest.NewServer(rc)
	defer ts.Close()
	run := func(seed uint64) []request {
		res, err := Run(testwait.Ctx(t), Config{BaseURL: ts.URL, RequestRate: 10_000, MaxConcurrency: 1,
			Duration: time.Hour, MaxRequests: 10, MaxTokens: 2, Seed: seed})
		require.NoError(t, err)
		require.Zero(t, res.Errors, res.FirstError)
		require.Equal(t, 1, res.MaxInFlight)
		require.Equal(t, "8 prompts of 4-8 words", res.Prompts)
		return rc.take()
	}
	a, b, c := run(1), run(1), run(2)
	require.Len(t, a, 10)
	require.Equal(t, a, b)
	require.NotEqual(t, a, c)
}

// TestRunOpenLoopStopsAtDuration: at one arrival a second, a short run
// sends few of its budget; every one it sends finishes.
func TestRunOpenLoopStopsAtDuration(t *testing.T) {
	rc := &recorder{n: 3}
	ts := httptest.NewServer(rc)
	defer ts.Close()
	res, err := Run(testwait.Ctx(t), Config{BaseURL: ts.URL, RequestRate: 1, Duration: 30 * ms,
		MaxRequests: 1000, MaxTokens: 3})
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Requests, 1, "the first arrival is at the start")
	require.Less(t, res.Requests, 1000)
	require.Equal(t, res.Requests, res.Successes)
	require.Len(t, rc.take(), res.Requests)
	require.Nil(t, res.SLO)
	require.Zero(t, res.Goodput)
}

func TestRunOpenLoopAgainstSim(t *testing.T) {
	url := simServer(t)
	res, err := Run(testwait.Ctx(t), Config{BaseURL: url, Model: simModel, RequestRate: 500, MaxConcurrency: 4,
		Duration: time.Hour, MaxRequests: 12, MaxTokens: 8, IgnoreEOS: true, Seed: 3,
		PromptLen: PromptLen{"fixed", 6, 6}, SLO: SLO{E2E: time.Hour}})
	require.NoError(t, err, "the load run, bounded by %v", testwait.Bound)
	require.Empty(t, res.FirstError)
	require.Equal(t, 12, res.Successes)
	require.Equal(t, int64(12*8), res.OutputTokens)
	require.Positive(t, res.InputTokens, "turnstile's usage has prompt_tokens")
	require.Equal(t, 12, res.TPOT.N)
	require.Positive(t, res.TPOT.Median)
	require.Positive(t, res.ITL.N)
	require.LessOrEqual(t, res.ITL.N, 12*7, "at most one gap per token after the first")
	require.Equal(t, 12, res.SLOMet)
	require.Equal(t, WordsSummary{Min: 6, Max: 6, Mean: 6}, res.PromptWords)
}
