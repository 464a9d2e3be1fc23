package server

import (
	"github.com/turnstile-llm/turnstile/guided"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/turnstile-llm/turnstile/executor"
)

// metrics is the server's Prometheus registry (one per Server, never the
// global one). Engine state is read from Engine.Snapshot at scrape time by
// engineCollector; request-level histograms are observed by the handlers.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec   // HTTP requests by endpoint and status code
	latency   *prometheus.HistogramVec // end-to-end seconds by endpoint
	promptLen prometheus.Histogram     // tokens per engine request
	genLen    prometheus.Histogram
}

func newMetrics(eng Engine, progs *programs, grammars *guided.Cache) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnstile_http_requests_total", Help: "HTTP requests answered, by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "turnstile_e2e_request_latency_seconds", Help: "Time from a request's arrival to its last byte, seconds, by endpoint (successful requests).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}, []string{"endpoint"}),
		promptLen: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnstile_request_prompt_tokens", Help: "Prompt length of finished engine requests, tokens.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 18),
		}),
		genLen: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnstile_request_generation_tokens", Help: "Generated tokens of finished engine requests.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 18),
		}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.promptLen, m.genLen,
		newEngineCollector(eng, progs),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if grammars != nil {
		m.reg.MustRegister(newGrammarCollector(grammars))
	}
	return m
}

// grammarCollector exports the compiled-grammar cache's counters.
type grammarCollector struct {
	cache                                     *guided.Cache
	compiles, hits, failures, evicts, compSec *prometheus.Desc
	entries, bytes                            *prometheus.Desc
}

func newGrammarCollector(c *guided.Cache) *grammarCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &grammarCollector{
		cache:    c,
		compiles: d("turnstile_grammar_compiles_total", "Structured-output constraints compiled (cache misses)."),
		hits:     d("turnstile_grammar_cache_hits_total", "Structured-output constraints served from the grammar cache."),
		failures: d("turnstile_grammar_compile_failures_total", "Constraints refused by the compiler (answered 400)."),
		evicts:   d("turnstile_grammar_cache_evictions_total", "Grammars dropped from the cache (least recently used first)."),
		compSec:  d("turnstile_grammar_compile_seconds_total", "Time spent compiling constraints, seconds."),
		entries:  d("turnstile_grammar_cache_entries", "Grammars in the cache."),
		bytes:    d("turnstile_grammar_cache_bytes", "Memory the cached grammars hold (automata and token tables), bytes."),
	}
}

func (g *grammarCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.compiles, g.hits, g.failures, g.evicts, g.compSec, g.entries, g.bytes} {
		ch <- d
	}
}

func (g *grammarCollector) Collect(ch chan<- prometheus.Metric) {
	st := g.cache.Stats()
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	counter(g.compiles, float64(st.Misses))
	counter(g.hits, float64(st.Hits))
	counter(g.failures, float64(st.Failures))
	counter(g.evicts, float64(st.Evictions))
	counter(g.compSec, st.CompileTime.Seconds())
	ch <- prometheus.MustNewConstMetric(g.entries, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(g.bytes, prometheus.GaugeValue, float64(st.Bytes))
}

// engineCollector exports an Engine's Snapshot. Executor histograms
// (power-of-two microsecond buckets) become Prometheus histograms with the
// same bucket bounds, in seconds.
type engineCollector struct {
	eng   Engine
	progs *programs

	gauges   []engineMetric
	counters []engineMetric
	hists    []engineHist
	programs *prometheus.Desc
	pauses   *prometheus.Desc
	resumes  *prometheus.Desc
	// The program policy's, exported when the engine has one
	// (Metrics.Programs.Accounting set).
	policyGauges, policyCounters []engineMetric
	accounted                    *prometheus.Desc // used tokens by accounting (tokens, blocks)
}

type engineMetric struct {
	desc  *prometheus.Desc
	value func(m *executor.Metrics) float64
}

type engineHist struct {
	desc *prometheus.Desc
	hist func(m *executor.Metrics) *executor.Histogram
}

func newEngineCollector(eng Engine, progs *programs) *engineCollector {
	rank := []string{"rank"}
	g := func(name, help string, f func(m *executor.Metrics) float64) engineMetric {
		return engineMetric{prometheus.NewDesc(name, help, rank, nil), f}
	}
	c := &engineCollector{eng: eng, progs: progs}
	c.gauges = []engineMetric{
		g("turnstile_requests_running", "Requests admitted and schedulable.", func(m *executor.Metrics) float64 { return float64(m.Running) }),
		g("turnstile_requests_waiting", "Requests queued for admission (incl. preempted).", func(m *executor.Metrics) float64 { return float64(m.Waiting) }),
		g("turnstile_requests_retiring", "Requests holding a seat until their step's teardown.", func(m *executor.Metrics) float64 { return float64(m.Retiring) }),
		g("turnstile_seats_live", "Live seats (seatpool).", func(m *executor.Metrics) float64 { return float64(m.SeatsLive) }),
		g("turnstile_seats_retiring", "Retiring seats (seatpool).", func(m *executor.Metrics) float64 { return float64(m.SeatsRetiring) }),
		g("turnstile_kv_blocks_used", "KV blocks referenced by sequences.", func(m *executor.Metrics) float64 { return float64(m.KVBlocksUsed) }),
		g("turnstile_kv_blocks_cached", "KV blocks unreferenced but still findable by prefix lookup (reclaimable).", func(m *executor.Metrics) float64 { return float64(m.KVBlocksCached) }),
		g("turnstile_kv_blocks_total", "Allocatable KV blocks.", func(m *executor.Metrics) float64 { return float64(m.KVBlocksTotal) }),
		g("turnstile_kv_usage_ratio", "KV blocks used / total.", func(m *executor.Metrics) float64 { return m.KVUsage }),
	}
	cn := func(name, help string, f func(m *executor.Metrics) uint64) engineMetric {
		return g(name, help, func(m *executor.Metrics) float64 { return float64(f(m)) })
	}
	c.counters = []engineMetric{
		cn("turnstile_steps_total", "Engine steps launched.", func(m *executor.Metrics) uint64 { return m.Steps }),
		cn("turnstile_engine_requests_submitted_total", "Requests submitted to the engine.", func(m *executor.Metrics) uint64 { return m.Submitted }),
		cn("turnstile_engine_requests_finished_total", "Requests finished with stop or length.", func(m *executor.Metrics) uint64 { return m.Finished }),
		cn("turnstile_engine_requests_aborted_total", "Requests aborted (client gone, shutdown).", func(m *executor.Metrics) uint64 { return m.Aborted }),
		cn("turnstile_preemptions_total", "Preemptions by recompute.", func(m *executor.Metrics) uint64 { return m.Preemptions }),
		cn("turnstile_prompt_tokens_total", "Prompt tokens at first admission.", func(m *executor.Metrics) uint64 { return m.PromptTokens }),
		cn("turnstile_prefix_hit_tokens_total", "Prompt tokens served from the prefix cache.", func(m *executor.Metrics) uint64 { return m.PrefixHitTokens }),
		cn("turnstile_cascade_groups_total", "Groups of sequences whose shared leading KV blocks a step read once (cascade attention).", func(m *executor.Metrics) uint64 { return m.CascadeGroups }),
		cn("turnstile_cascade_shared_block_reads_total", "Block reads per layer that cascade attention's shared runs saved.", func(m *executor.Metrics) uint64 { return m.CascadeSharedReads }),
		cn("turnstile_generation_tokens_total", "Tokens generated.", func(m *executor.Metrics) uint64 { return m.GeneratedTokens }),
		g("turnstile_runner_busy_seconds_total", "Runner time executing steps, seconds.", func(m *executor.Metrics) float64 { return m.RunnerBusy.Seconds() }),
		g("turnstile_runner_idle_seconds_total", "Runner idle time between steps while work was present, seconds.", func(m *executor.Metrics) float64 { return m.RunnerIdle.Seconds() }),
		cn("turnstile_guided_masks_total", "Token masks computed for constrained requests (structured output).", func(m *executor.Metrics) uint64 { return m.GuidedMasks }),
		g("turnstile_guided_mask_seconds_total", "Host time computing token masks, seconds (under overlap, while the runner computes the step).", func(m *executor.Metrics) float64 { return m.GuidedMaskTime.Seconds() }),
		cn("turnstile_guided_failures_total", "Constrained requests ended because their matcher failed.", func(m *executor.Metrics) uint64 { return m.GuidedFailures }),
	}
	h := func(name, help string, f func(m *executor.Metrics) *executor.Histogram) engineHist {
		return engineHist{prometheus.NewDesc(name, help, rank, nil), f}
	}
	c.hists = []engineHist{
		h("turnstile_time_to_first_token_seconds", "Arrival at the engine to first token, seconds.", func(m *executor.Metrics) *executor.Histogram { return &m.TTFT }),
		h("turnstile_inter_token_latency_seconds", "Time between consecutive tokens of a request, seconds.", func(m *executor.Metrics) *executor.Histogram { return &m.ITL }),
		h("turnstile_step_duration_seconds", "Runner time per step, seconds.", func(m *executor.Metrics) *executor.Histogram { return &m.StepTime }),
		h("turnstile_step_idle_seconds", "Runner gap before a step while work was present, seconds.", func(m *executor.Metrics) *executor.Histogram { return &m.StepIdle }),
	}
	c.policyGauges = []engineMetric{
		g("turnstile_program_admission_capacity_tokens", "KV capacity the program policy admits against, tokens.",
			func(m *executor.Metrics) float64 { return float64(m.Programs.Capacity) }),
		g("turnstile_program_admission_used_tokens", "Tokens the configured arm charges its ACTIVE programs.",
			func(m *executor.Metrics) float64 { return m.Programs.Used }),
		g("turnstile_program_admission_wait_max_seconds", "Longest wait of a program turn for admission, seconds.",
			func(m *executor.Metrics) float64 { return m.Programs.AdmissionWaitMax.Seconds() }),
	}
	c.policyCounters = []engineMetric{
		cn("turnstile_program_forced_resumes_total", "Program resumes forced after the forced-resume wait.",
			func(m *executor.Metrics) uint64 { return m.Programs.ForcedResumes }),
		cn("turnstile_program_admission_waits_total", "Program turns the policy queued or admitted (new programs, paused ones' turns).",
			func(m *executor.Metrics) uint64 { return m.Programs.AdmissionWaits }),
		g("turnstile_program_admission_wait_seconds_total", "Total wait of those turns for admission, seconds.",
			func(m *executor.Metrics) float64 { return m.Programs.AdmissionWaitTotal.Seconds() }),
		cn("turnstile_program_pins_dropped_total", "Programs the engine ended to free pinned KV when nothing else could progress.",
			func(m *executor.Metrics) uint64 { return m.PinsDropped }),
	}
	c.accounted = prometheus.NewDesc("turnstile_program_admission_accounted_tokens",
		"Tokens charged to ACTIVE programs under each accounting (tokens, also pausing's: tokens × weight + buffer; blocks: distinct blocks + estimates + reserve).",
		[]string{"rank", "accounting"}, nil)
	c.programs = prometheus.NewDesc("turnstile_programs", "Agentic programs by state.", []string{"state"}, nil)
	c.pauses = prometheus.NewDesc("turnstile_program_pauses_total", "Program pauses by the admission policy.", nil, nil)
	c.resumes = prometheus.NewDesc("turnstile_program_resumes_total", "Program resumes by the admission policy.", nil, nil)
	return c
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.gauges {
		ch <- m.desc
	}
	for _, m := range c.counters {
		ch <- m.desc
	}
	for _, h := range c.hists {
		ch <- h.desc
	}
	ch <- c.programs
	if _, ok := c.eng.(ProgramStater); ok {
		ch <- c.pauses
		ch <- c.resumes
	}
	for _, m := range append(c.policyGauges, c.policyCounters...) {
		ch <- m.desc
	}
	ch <- c.accounted
}

// RankSnapshotter is implemented by engines made of attention-DP ranks:
// /metrics then reports each rank's snapshot under its own rank label
// instead of one snapshot as rank "0".
type RankSnapshotter interface {
	RankSnapshots() []executor.Metrics
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	var snap executor.Metrics
	if rs, ok := c.eng.(RankSnapshotter); ok {
		for i, s := range rs.RankSnapshots() {
			c.collectRank(ch, &s, strconv.Itoa(i))
			snap.Merge(&s)
		}
	} else {
		snap = c.eng.Snapshot()
		c.collectRank(ch, &snap, "0")
	}
	states := c.progs.states()
	if ps, ok := c.eng.(ProgramStater); ok {
		// A nil map: this engine has no program policy after all.
		if st, pauses, resumes := ps.ProgramStates(); st != nil {
			states = st
			ch <- prometheus.MustNewConstMetric(c.pauses, prometheus.CounterValue, float64(pauses))
			ch <- prometheus.MustNewConstMetric(c.resumes, prometheus.CounterValue, float64(resumes))
		}
	}
	for state, n := range states {
		ch <- prometheus.MustNewConstMetric(c.programs, prometheus.GaugeValue, float64(n), state)
	}
}

// collectRank emits one rank's engine series under rankLabel.
func (c *engineCollector) collectRank(ch chan<- prometheus.Metric, snap *executor.Metrics, rankLabel string) {
	for _, m := range c.gauges {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.value(snap), rankLabel)
	}
	for _, m := range c.counters {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, m.value(snap), rankLabel)
	}
	for _, h := range c.hists {
		count, sum, buckets := promHistogram(h.hist(snap))
		ch <- prometheus.MustNewConstHistogram(h.desc, count, sum, buckets, rankLabel)
	}
	if snap.Programs.Accounting != 0 {
		for _, m := range c.policyGauges {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.value(snap), rankLabel)
		}
		for _, m := range c.policyCounters {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, m.value(snap), rankLabel)
		}
		ch <- prometheus.MustNewConstMetric(c.accounted, prometheus.GaugeValue, snap.Programs.UsedTokens, rankLabel, "tokens")
		ch <- prometheus.MustNewConstMetric(c.accounted, prometheus.GaugeValue, float64(snap.Programs.UsedBlocks), rankLabel, "blocks")
	}
}

// promHistogram converts an executor histogram: bucket i < last has upper
// bound 2^i µs; the last, open bucket only counts toward +Inf.
func promHistogram(h *executor.Histogram) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, executor.HistBuckets-1)
	var cum uint64
	for i := 0; i < executor.HistBuckets-1; i++ {
		cum += h.Buckets[i]
		buckets[math.Ldexp(float64(time.Microsecond), i)/float64(time.Second)] = cum
	}
	return h.Count, h.Sum.Seconds(), buckets
}
