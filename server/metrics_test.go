package server

import (
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
)

// scrape parses /metrics with the Prometheus text parser.
func scrape(t *testing.T, e *env) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.ts.URL+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain") // the text format, not protobuf
	resp, err := e.ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value is the single sample of a gauge or counter family (summed over
// label sets), or a histogram's count.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "metric %s missing", name)
	var v float64
	for _, m := range f.GetMetric() {
		switch {
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v
}

func TestMetrics(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	before := scrape(t, e)
	for name := range before {
		require.True(t, strings.HasPrefix(name, "turnstile_") || strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_"), name)
	}
	for _, name := range []string{"turnstile_requests_running", "turnstile_requests_waiting", "turnstile_requests_retiring",
		"turnstile_kv_blocks_used", "turnstile_kv_blocks_total", "turnstile_prefix_hit_tokens_total", "turnstile_preemptions_total",
		"turnstile_programs", "turnstile_time_to_first_token_seconds", "turnstile_inter_token_latency_seconds"} {
		require.Contains(t, before, name)
	}
	require.Equal(t, "0", before["turnstile_requests_running"].GetMetric()[0].GetLabel()[0].GetValue(), "rank label")
	require.Zero(t, value(t, before, "turnstile_generation_tokens_total"))

	prompt := strings.Repeat("a big red ball. ", 8)
	for i := 0; i < 2; i++ {
		resp := e.post(t, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 10}, "X-Program-Id", "prog")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp.Body.Close()
	}
	bad := e.post(t, "/v1/completions", `{"prompt":"x","max_tokens":0}`)
	bad.Body.Close()

	after := scrape(t, e)
	require.Equal(t, 20.0, value(t, after, "turnstile_generation_tokens_total"))
	require.Equal(t, 2.0, value(t, after, "turnstile_engine_requests_submitted_total"))
	require.Equal(t, 2.0, value(t, after, "turnstile_engine_requests_finished_total"))
	require.Positive(t, value(t, after, "turnstile_prefix_hit_tokens_total"), "the second request hits the first one's prefix")
	require.Equal(t, 2.0, value(t, after, "turnstile_time_to_first_token_seconds"))
	require.Equal(t, 18.0, value(t, after, "turnstile_inter_token_latency_seconds"))
	require.Equal(t, 2.0, value(t, after, "turnstile_request_generation_tokens"))
	require.Equal(t, 2.0, value(t, after, "turnstile_e2e_request_latency_seconds"))
	require.Positive(t, value(t, after, "turnstile_steps_total"))
	require.Equal(t, 1.0, value(t, after, "turnstile_programs"), "one idle program")

	codes := map[string]float64{}
	for _, m := range after["turnstile_http_requests_total"].GetMetric() {
		lbl := map[string]string{}
		for _, l := range m.GetLabel() {
			lbl[l.GetName()] = l.GetValue()
		}
		codes[lbl["endpoint"]+" "+lbl["code"]] = m.GetCounter().GetValue()
	}
	require.Equal(t, 2.0, codes["completions 200"])
	require.Equal(t, 1.0, codes["completions 400"])
}

func TestPromHistogram(t *testing.T) {
	var h executor.Histogram
	h.Buckets[0], h.Buckets[2], h.Buckets[executor.HistBuckets-1] = 1, 2, 1
	h.Count = 4
	count, _, buckets := promHistogram(&h)
	require.Equal(t, uint64(4), count)
	require.Equal(t, uint64(1), buckets[1e-6], "bucket 0 ends at 1µs")
	require.Equal(t, uint64(1), buckets[2e-6])
	require.Equal(t, uint64(3), buckets[4e-6], "bucket 2 ends at 4µs")
	require.Len(t, buckets, executor.HistBuckets-1, "the open last bucket is only in +Inf")
	for b, c := range buckets {
		if b > 4e-6 {
			require.Equal(t, uint64(3), c)
		}
	}
}

// TestMetricsKVCached: a finished request without a program leaves its full
// blocks unreferenced but findable: cached, not used.
func TestMetricsKVCached(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	require.Zero(t, value(t, scrape(t, e), "turnstile_kv_blocks_cached"))
	resp := e.post(t, "/v1/completions", map[string]any{"prompt": strings.Repeat("a big red ball. ", 8), "max_tokens": 4})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	after := scrape(t, e)
	require.Positive(t, value(t, after, "turnstile_kv_blocks_cached"))
	require.Zero(t, value(t, after, "turnstile_kv_blocks_used"))
}
