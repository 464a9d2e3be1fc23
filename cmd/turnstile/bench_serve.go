package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/bench/progress"
	"github.com/turnstile-llm/turnstile/bench/serveload"
)

// benchServeFile is the JSON report's name inside --out, benchServeCSV the
// CSV table's (--csv).
const (
	benchServeFile = "bench-serve.json"
	benchServeCSV  = "bench-serve.csv"
)

// benchServeOptions are the flags of `turnstile bench serve`.
type benchServeOptions struct {
	// engineFlags: --model, --device, --max-batch-size, --cascade-min-blocks,
	// --kv-cache-tokens, --kv-cache-dtype, --workers and the program policy
	// (--admission and its parameters); commandFlags: --seed (prompt and
	// sampling-seed draws) and --out (the JSON report's directory). The
	// rest of the server is serve's defaults.
	engineFlags
	commandFlags
	clients     []int
	duration    time.Duration // per client level
	warmup      time.Duration // at the largest level, before the first; 0 = none
	maxRequests int           // per client level
	maxTokens   int
	ignoreEOS   bool
	timeout     time.Duration // per request
	// url, when set, is a server already running (e.g. an mpirun
	// deployment) to load instead of starting one; dp is the in-process
	// server's attention-DP ranks.
	url string
	dp  int
	// rates, when set, run open loop instead of --clients: one level per
	// Poisson arrival rate, requests/s, at most maxConcurrency in flight
	// (0: no bound). clientsSet is whether --clients was given.
	rates          []float64
	maxConcurrency int
	clientsSet     bool
	// slo is --slo (zero: no goodput); promptLen --prompt-len (zero: the
	// story prompts); csv writes DIR/bench-serve.csv next to the JSON.
	sloFlag, promptLenFlag string
	slo                    serveload.SLO
	promptLen              serveload.PromptLen
	csv                    bool
	// jsonSchemas is --json-schema: files whose schemas constrain the
	// requests (responseFormats, read by validate), each client taking
	// them in turn; ignoreEOSSet is whether --ignore-eos was given.
	jsonSchemas     []string
	responseFormats []json.RawMessage
	ignoreEOSSet    bool
	// tools is --tools: chat requests offering that many tools
	// (bench_tools.go); toolsBaseline sends none but pads the system
	// message to their prompt tokens. chatTemplate is the in-process
	// server's --chat-template; cpuProfile --cpuprofile.
	tools         int
	toolsBaseline bool
	chatTemplate  string
	cpuProfile    string
	// chat is the load's conversation, set by runBenchServe in chat mode.
	chat *serveload.Chat
	// progressOut, when set, gets a progress bar per level (RunE sets it
	// to stderr when that is a terminal).
	progressOut io.Writer
}

// The engine and command flags bench serve registers.
const (
	benchServeEngineFlags  = flagModel | flagDevice | flagMaxBatchSize | flagCascade | flagKVTokens | flagKVDtype | flagWorkers | flagPrograms
	benchServeCommandFlags = flagSeed | flagOut
)

func newBenchServeCmd() *cobra.Command {
	o := benchServeOptions{engineFlags: newServeOptions().engineFlags, commandFlags: defaultCommandFlags(), clients: []int{1, 16, 128}, duration: 30 * time.Second,
		warmup: 2 * time.Second, maxRequests: 1_000_000, maxTokens: 64, ignoreEOS: true, timeout: serveload.DefaultRequestTimeout, dp: 1}
	cmd := &cobra.Command{
		Use:   "serve [--model FILE.gguf | --url URL] [--clients 1,16,128 | --request-rate 2,8 [--max-concurrency N]] [--duration 30s] [--max-tokens 64] [--prompt-len fixed:32] [--slo ttft:200ms,tpot:50ms] [--seed N] [--out DIR [--csv]]",
		Short: "Load-test an in-process or any OpenAI-compatible server with streaming clients",
		Long: "bench serve starts the server of `turnstile serve` in-process on 127.0.0.1 (CPU runner,\n" +
			"overlap on), or loads any OpenAI-compatible server at --url (turnstile, llama-server,\n" +
			"vLLM), with streaming /v1/completions for --duration (or --max-requests) per level.\n" +
			"Closed loop (default): each --clients level runs that many clients, each sending its\n" +
			"next request when the last ends. Open loop: each --request-rate level sends requests\n" +
			"at seeded Poisson arrivals of that rate, at most --max-concurrency in flight.\n" +
			"Metrics follow vLLM's benchmark_serving: TTFT (to the first token), TPOT ((E2E - TTFT)\n" +
			"/ (output tokens - 1), requests of > 1 token), ITL (gaps between token chunks, pooled),\n" +
			"E2E latency, request and output-token throughput and, with --slo, goodput (requests/s\n" +
			"meeting every bound); mean, median, std, p90, p99 (nearest rank) of each in the JSON.\n" +
			"It prints per level: requests/s, output tokens/s, TTFT p50/p99, TPOT, ITL and E2E\n" +
			"medians, goodput, errors and (in-process) the resident memory (VmRSS) before and after.\n" +
			"--tools N sends chat requests offering N tools instead, and --tools-baseline the same\n" +
			"requests without tools at the same prompt length (a padded system message).\n" +
			"--out writes the report as JSON to DIR/" + benchServeFile + ", and --csv one row per level\n" +
			"to DIR/" + benchServeCSV + ". The exit status is non-zero if any request failed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.parsed(cmd.Flags())
			o.clientsSet = cmd.Flags().Changed("clients")
			o.ignoreEOSSet = cmd.Flags().Changed("ignore-eos")
			if errOut := cmd.ErrOrStderr(); isTerminal(errOut) {
				o.progressOut = errOut
			}
			if err := o.validate(); err != nil {
				return err
			}
			return untilSignal(cmd, func(ctx context.Context) error {
				_, err := runBenchServe(ctx, o, cmd.OutOrStdout())
				return err
			})
		},
	}
	f := cmd.Flags()
	o.engineFlags.register(f, benchServeEngineFlags)
	o.commandFlags.register(f, benchServeCommandFlags)
	f.IntSliceVar(&o.clients, "clients", o.clients, "concurrent clients, one level after another")
	f.DurationVar(&o.duration, "duration", o.duration, "how long each level sends requests")
	f.DurationVar(&o.warmup, "warmup", o.warmup, "load at the largest --clients level before the first level, so RSS before/after compares steady states (0: none)")
	f.IntVar(&o.maxRequests, "max-requests", o.maxRequests, "most requests per level (also bounds the samples kept)")
	f.IntVar(&o.maxTokens, "max-tokens", o.maxTokens, "max_tokens of each request")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", o.ignoreEOS, "generate exactly --max-tokens per request (equal work per request)")
	f.DurationVar(&o.timeout, "request-timeout", o.timeout, "longest one request may take (then it is an error)")
	f.StringVar(&o.url, "url", o.url, "load this running server (e.g. one started by `mpirun -np N turnstile serve --dp N`) instead of starting one; RSS is then not measured")
	f.IntVar(&o.dp, "dp", o.dp, "attention-DP ranks of the in-process server (ignored with --url)")
	f.Float64SliceVar(&o.rates, "request-rate", o.rates, "open loop: Poisson arrival rates, requests/s, one level after another (instead of --clients)")
	f.IntVar(&o.maxConcurrency, "max-concurrency", o.maxConcurrency, "open loop: most requests in flight; an arrival beyond it waits (0: no bound)")
	f.StringVar(&o.sloFlag, "slo", o.sloFlag, "goodput's per-request bounds, e.g. ttft:200ms,tpot:50ms,e2e:2s (durations, or bare milliseconds)")
	f.StringVar(&o.promptLenFlag, "prompt-len", o.promptLenFlag, "prompt length in words: fixed:N or uniform:MIN-MAX, from a 64-word story vocabulary (default: 8 story openings)")
	f.BoolVar(&o.csv, "csv", o.csv, "also write one row per level to DIR/"+benchServeCSV+" (needs --out)")
	f.IntVar(&o.tools, "tools", o.tools, "chat mode: streaming /v1/chat/completions with a system message and the user prompt, offering N function tools (realistic JSON Schema parameters, order drawn from --seed) with tool_choice auto; --ignore-eos is off (requests end at EOS or --max-tokens)")
	f.BoolVar(&o.toolsBaseline, "tools-baseline", o.toolsBaseline, "with --tools N: offer no tools, and pad the system message with neutral text to the prompt tokens the N tools' rendering takes (measured first), for side-by-side runs")
	f.StringVar(&o.chatTemplate, "chat-template", o.chatTemplate, chatTemplateUsage+" (in-process server)")
	f.StringVar(&o.cpuProfile, "cpuprofile", o.cpuProfile, "write a CPU profile (go tool pprof) of the levels, in-process server included, to `FILE`")
	f.StringSliceVar(&o.jsonSchemas, "json-schema", o.jsonSchemas, "constrain every request to a JSON Schema (structured output, response_format json_schema): FILE holds the schema, or a MaskBench file's {\"schema\", \"tests\"}; several files (repeated or comma-separated) are sent in turn, each client starting at its own; requests then end where their JSON does (--ignore-eos off)")
	return cmd
}

// validate checks every flag that does not need the model, and creates
// --out so that a bad directory fails before minutes of load.
func (o *benchServeOptions) validate() error {
	if err := o.engineFlags.validate("bench serve"); err != nil {
		return err
	}
	switch {
	case len(o.clients) == 0:
		return errors.New("bench serve: --clients is empty")
	case o.duration <= 0:
		return fmt.Errorf("bench serve: --duration %v: must be > 0", o.duration)
	case o.warmup < 0:
		return fmt.Errorf("bench serve: --warmup %v: must be >= 0", o.warmup)
	case o.maxRequests < 1:
		return fmt.Errorf("bench serve: --max-requests %d: must be >= 1", o.maxRequests)
	case o.maxTokens < 1:
		return fmt.Errorf("bench serve: --max-tokens %d: must be >= 1", o.maxTokens)
	case o.timeout <= 0:
		return fmt.Errorf("bench serve: --request-timeout %v: must be > 0", o.timeout)
	case o.url != "" && !strings.HasPrefix(o.url, "http://") && !strings.HasPrefix(o.url, "https://"):
		return fmt.Errorf("bench serve: --url %q: must start with http:// or https://", o.url)
	case o.url != "" && o.chatTemplate != "":
		return errors.New("bench serve: --chat-template is the in-process server's: not with --url")
	}
	if err := o.validateTools(); err != nil {
		return err
	}
	for _, c := range o.clients {
		if c < 1 || c > maxBenchClients {
			return fmt.Errorf("bench serve: --clients %d: must be in [1, %d]", c, maxBenchClients)
		}
	}
	if err := o.validateLoad(); err != nil {
		return err
	}
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return fmt.Errorf("bench serve: --out %q: %w", o.out, err)
		}
	}
	return nil
}

// validateLoad checks the open-loop, prompt, SLO and CSV flags.
func (o *benchServeOptions) validateLoad() error {
	switch {
	case len(o.rates) > 0 && o.clientsSet:
		return errors.New("bench serve: --clients and --request-rate exclude each other: closed loop or open loop")
	case o.maxConcurrency != 0 && len(o.rates) == 0:
		return fmt.Errorf("bench serve: --max-concurrency %d: only with --request-rate (closed loop's concurrency is --clients)", o.maxConcurrency)
	case o.maxConcurrency < 0 || o.maxConcurrency > maxBenchClients:
		return fmt.Errorf("bench serve: --max-concurrency %d: must be in [0, %d]", o.maxConcurrency, maxBenchClients)
	case o.csv && o.out == "":
		return errors.New("bench serve: --csv needs --out DIR (the CSV goes next to the JSON report)")
	}
	for _, r := range o.rates {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("bench serve: --request-rate %v: must be a finite number > 0", r)
		}
	}
	if o.sloFlag != "" {
		slo, err := serveload.ParseSLO(o.sloFlag)
		if err != nil {
			return fmt.Errorf("bench serve: --slo %q: %w", o.sloFlag, err)
		}
		o.slo = slo
	}
	if o.promptLenFlag != "" {
		p, err := serveload.ParsePromptLen(o.promptLenFlag)
		if err != nil {
			return fmt.Errorf("bench serve: --prompt-len %q: %w", o.promptLenFlag, err)
		}
		o.promptLen = p
	}
	return o.readSchemas()
}

// validateTools checks --tools and --tools-baseline. A request with tools
// ends at EOS or at a call's end, so --ignore-eos, on by default, is off
// with them (and off in the baseline, for equal conditions).
func (o *benchServeOptions) validateTools() error {
	switch {
	case o.tools < 0 || o.tools > maxBenchTools:
		return fmt.Errorf("bench serve: --tools %d: must be in [0, %d]", o.tools, maxBenchTools)
	case o.toolsBaseline && o.tools == 0:
		return errors.New("bench serve: --tools-baseline needs --tools N (the tools whose prompt length it matches)")
	case o.tools == 0:
		return nil
	case len(o.jsonSchemas) > 0:
		return errors.New("bench serve: --tools and --json-schema exclude each other")
	case o.ignoreEOSSet && o.ignoreEOS:
		return errors.New("bench serve: --ignore-eos with --tools: the server refuses ignore_eos with the tools' grammar (the baseline runs without it too)")
	}
	o.ignoreEOS = false
	return nil
}

// readSchemas reads --json-schema's files into response_format objects.
// A constrained request ends where its JSON does, so --ignore-eos, on by
// default, is off with them, and an explicit --ignore-eos is an error.
func (o *benchServeOptions) readSchemas() error {
	if len(o.jsonSchemas) == 0 {
		return nil
	}
	if o.ignoreEOSSet && o.ignoreEOS {
		return errors.New("bench serve: --ignore-eos with --json-schema: a constrained request ends where its JSON does")
	}
	o.ignoreEOS = false
	o.responseFormats = o.responseFormats[:0]
	for i, file := range o.jsonSchemas {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("bench serve: --json-schema %s: %w", file, err)
		}
		schema, err := benchSchema(data)
		if err != nil {
			return fmt.Errorf("bench serve: --json-schema %s: %w", file, err)
		}
		rf, err := json.Marshal(map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": fmt.Sprintf("bench_%d", i), "schema": schema}})
		if err != nil {
			return fmt.Errorf("bench serve: --json-schema %s: %w", file, err)
		}
		o.responseFormats = append(o.responseFormats, rf)
	}
	return nil
}

// benchSchema is a --json-schema file's schema: the whole file, or the
// "schema" member of a MaskBench file (an object with "schema" and
// "tests").
func benchSchema(data []byte) (json.RawMessage, error) {
	var top any
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	switch t := top.(type) {
	case bool:
		return data, nil
	case map[string]any:
		if _, ok := t["tests"]; ok {
			var mb struct {
				Schema json.RawMessage `json:"schema"`
			}
			if err := json.Unmarshal(data, &mb); err != nil || len(mb.Schema) == 0 {
				return nil, errors.New(`a MaskBench file without "schema"`)
			}
			return mb.Schema, nil
		}
		return data, nil
	}
	return nil, fmt.Errorf("a schema is a JSON object or boolean, not %T", top)
}

// level is one row of the run: closed-loop clients, or an open-loop rate.
type level struct {
	clients int
	rate    float64
}

func (l level) String() string {
	if l.rate > 0 {
		return "--request-rate " + strconv.FormatFloat(l.rate, 'g', -1, 64)
	}
	return "--clients " + strconv.Itoa(l.clients)
}

// levels are the run's levels in order.
func (o *benchServeOptions) levels() []level {
	var ls []level
	if len(o.rates) > 0 {
		for _, r := range o.rates {
			ls = append(ls, level{rate: r})
		}
		return ls
	}
	for _, c := range o.clients {
		ls = append(ls, level{clients: c})
	}
	return ls
}

// peakLevel is the warm-up's level: the largest of the run.
func (o *benchServeOptions) peakLevel() level {
	if len(o.rates) > 0 {
		return level{rate: slices.Max(o.rates)}
	}
	return level{clients: slicesMax(o.clients)}
}

// concurrencyBound is the most requests the run may have in flight (an
// unbounded open loop counts maxBenchClients), which the in-process
// server's queue and connection bounds admit.
func (o *benchServeOptions) concurrencyBound() int {
	switch {
	case len(o.rates) == 0:
		return slicesMax(o.clients)
	case o.maxConcurrency > 0:
		return o.maxConcurrency
	}
	return maxBenchClients
}

// maxBenchClients bounds --clients: each client is a goroutine and a
// connection, and the server's queue bound is raised to the largest level.
const maxBenchClients = 4096

// serveOptions is the in-process server: serve's defaults (newServeOptions)
// with this command's engine flags, on a free loopback port, with quiet
// logs, a shorter drain and queue and connection bounds that admit every
// client (a 429 would be counted as an error).
func (o *benchServeOptions) serveOptions() (serveOptions, error) {
	so := newServeOptions()
	so.engineFlags = o.engineFlags
	so.autoSize = true // the in-process server sizes itself as serve does
	seats, _, err := engineSeats(so.maxBatchSize, !so.noOverlap)
	if err != nil {
		return serveOptions{}, fmt.Errorf("bench serve: %w", err)
	}
	so.port, so.maxQueue, so.drain, so.logLevel = 0, max(4*seats, o.concurrencyBound()), 10*time.Second, "warn"
	so.maxConnections = max(so.maxConnections, o.concurrencyBound()) // every client's connection is served
	so.dp = o.dp
	so.chatTemplate = o.chatTemplate
	if err := so.validate(); err != nil {
		return serveOptions{}, fmt.Errorf("bench %w", err)
	}
	return so, nil
}

func slicesMax(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// benchServeReport is the JSON report: the run's settings, the machine's
// load, and one row per client level.
type benchServeReport struct {
	Model        string `json:"model"`
	URL          string `json:"url,omitempty"` // --url: a server not started here (RSS not measured)
	Duration     string `json:"duration_per_level"`
	MaxRequests  int    `json:"max_requests_per_level"`
	MaxTokens    int    `json:"max_tokens"`
	IgnoreEOS    bool   `json:"ignore_eos"`
	Seed         uint64 `json:"seed"`
	MaxBatchSize int    `json:"max_batch_size"`
	KVTokens     int    `json:"kv_cache_tokens"` // 0: serve's default
	GOMAXPROCS   int    `json:"gomaxprocs"`
	// Prompts is --prompt-len ("" for the story prompts), SLO --slo ("":
	// none) and MaxConcurrency the open loop's bound (0: none).
	Prompts        string `json:"prompt_len,omitempty"`
	SLO            string `json:"slo,omitempty"`
	MaxConcurrency int    `json:"max_concurrency,omitempty"`
	// JSONSchemas is --json-schema's files.
	JSONSchemas []string `json:"json_schemas,omitempty"`
	// Tools is --tools' prompt measurement (nil without --tools);
	// ChatTemplate the in-process server's --chat-template.
	Tools        *benchToolsInfo `json:"tools,omitempty"`
	ChatTemplate string          `json:"chat_template,omitempty"`
	LoadBefore   float64         `json:"loadavg1_before"`
	LoadAfter    float64         `json:"loadavg1_after"`
	// Warmup is the warm-up run (nil when --warmup 0); its errors fail the
	// run like any level's.
	Warmup *serveload.Result `json:"warmup,omitempty"`
	Levels []benchServeLevel `json:"levels"`
}

// benchServeLevel is one client level's result and the resident memory
// around it, MiB.
type benchServeLevel struct {
	serveload.Result
	RSSBeforeMiB float64 `json:"rss_before_mib"`
	RSSAfterMiB  float64 `json:"rss_after_mib"`
}

// runBenchServe starts the server, runs every client level, prints the
// table to out and writes the JSON report. The error is non-nil when any
// request failed (the report is complete then) or the run could not start.
func runBenchServe(ctx context.Context, o benchServeOptions, out io.Writer) (benchServeReport, error) {
	so, err := o.serveOptions()
	if err != nil {
		return benchServeReport{}, err
	}
	rep := benchServeReport{Model: o.model, Duration: o.duration.String(), MaxRequests: o.maxRequests,
		MaxTokens: o.maxTokens, IgnoreEOS: o.ignoreEOS, Seed: o.seed, MaxBatchSize: o.maxBatchSize,
		KVTokens: o.kvTokens, GOMAXPROCS: runtime.GOMAXPROCS(0), Prompts: o.promptLenFlag, SLO: o.slo.String(),
		MaxConcurrency: o.maxConcurrency, JSONSchemas: o.jsonSchemas, ChatTemplate: o.chatTemplate}

	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	served := make(chan error, 1)
	url := strings.TrimRight(o.url, "/")
	if url == "" {
		addrc := make(chan string, 1)
		go func() { served <- runServe(srvCtx, so, out, io.Discard, func(a string) { addrc <- a }) }()
		select {
		case a := <-addrc:
			url = "http://" + a
		case err := <-served:
			return rep, fmt.Errorf("bench %w", err)
		}
	} else {
		rep.Model, rep.URL = url, url
		served <- nil // nothing to stop: the server is not ours
	}

	if o.tools > 0 {
		chat, info, err := o.toolsChat(ctx, url)
		if err != nil {
			stopServer()
			return rep, errors.Join(err, <-served)
		}
		o.chat, rep.Tools = chat, &info
	}

	rep.LoadBefore, _ = serveload.LoadAverage() // 0 where /proc is absent
	var runErr error
	if o.warmup > 0 {
		// The first load touches the KV cache, grows goroutine stacks and
		// opens connections; warming at the largest level keeps that out of
		// every level's RSS before/after.
		res, err := serveload.Run(ctx, o.loadConfig(url, o.peakLevel(), o.warmup, "warm-up"))
		rep.Warmup = &res
		o.endBar()
		if err != nil {
			runErr = fmt.Errorf("bench serve: warm-up: %w", err)
		}
	}
	stopProfile := func() {}
	if o.cpuProfile != "" && runErr == nil {
		if stop, err := startCPUProfile(o.cpuProfile); err != nil {
			runErr = err
		} else {
			stopProfile = stop
		}
	}
	for _, n := range o.levels() {
		if runErr != nil {
			break
		}
		var before, after int64
		var rerr error
		if o.url == "" {
			if before, err = serveload.ResidentBytes(); err != nil {
				runErr = err
				break
			}
		}
		res, err := serveload.Run(ctx, o.loadConfig(url, n, o.duration, n.String()))
		o.endBar()
		if o.url == "" {
			after, rerr = serveload.ResidentBytes()
		}
		rep.Levels = append(rep.Levels, benchServeLevel{Result: res, RSSBeforeMiB: mib(before), RSSAfterMiB: mib(after)})
		if err = errors.Join(err, rerr); err != nil {
			runErr = fmt.Errorf("bench serve: %v: %w", n, err)
			break
		}
	}
	stopProfile()
	rep.LoadAfter, _ = serveload.LoadAverage()
	stopServer()
	// runServe also checks the engine's accounting after shutdown.
	if err := <-served; err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("bench %w", err))
	}

	if err := rep.print(out); err != nil {
		return rep, err
	}
	if o.out != "" {
		if err := rep.write(filepath.Join(o.out, benchServeFile)); err != nil {
			return rep, errors.Join(runErr, err)
		}
		if o.csv {
			if err := rep.writeCSV(filepath.Join(o.out, benchServeCSV)); err != nil {
				return rep, errors.Join(runErr, err)
			}
		}
	}
	if runErr != nil {
		return rep, runErr
	}
	var failed []string
	if w := rep.Warmup; w != nil && w.Errors > 0 {
		failed = append(failed, fmt.Sprintf("%d of %d warm-up requests failed (first: %s)", w.Errors, w.Requests, w.FirstError))
	}
	for _, l := range rep.Levels {
		if l.Errors > 0 {
			failed = append(failed, fmt.Sprintf("%d of %d requests failed at %v (first: %s)",
				l.Errors, l.Requests, l.level(), l.FirstError))
		}
	}
	if len(failed) > 0 {
		return rep, fmt.Errorf("bench serve: %s", strings.Join(failed, "; "))
	}
	return rep, nil
}

// loadConfig is one level's load for d; label names it on the progress bar.
func (o *benchServeOptions) loadConfig(url string, l level, d time.Duration, label string) serveload.Config {
	c := serveload.Config{BaseURL: url, Clients: l.clients, Duration: d, MaxRequests: o.maxRequests,
		MaxTokens: o.maxTokens, IgnoreEOS: o.ignoreEOS, Seed: o.seed, RequestTimeout: o.timeout,
		PromptLen: o.promptLen, SLO: o.slo, ResponseFormats: o.responseFormats, Chat: o.chat}
	if l.rate > 0 {
		c.RequestRate, c.MaxConcurrency = l.rate, o.maxConcurrency
	}
	if o.progressOut != nil {
		c.Progress = progressBar(o.progressOut, label, d, time.Now)
	}
	return c
}

// barUnits is the resolution of a level's progress bar.
const barUnits = 1000

// progressBar draws one level's bar on w (bench/progress, the bar every
// bench command shows): the larger of the requests finished of the budget
// and the time passed of d, redrawn in place (the caller ends the line when
// the level ends).
func progressBar(w io.Writer, label string, d time.Duration, now func() time.Time) func(done, total int) {
	bar, err := progress.New(w, barUnits, now)
	if err != nil { // barUnits ≥ 1: cannot happen
		return func(int, int) {}
	}
	start := now()
	return func(done, total int) {
		frac := min(1, max(float64(done)/float64(max(total, 1)), now().Sub(start).Seconds()/d.Seconds()))
		_ = bar.Update(int(frac*barUnits), fmt.Sprintf("%s: %d requests", label, done))
	}
}

// endBar ends a level's progress bar line.
func (o *benchServeOptions) endBar() {
	if o.progressOut != nil {
		io.WriteString(o.progressOut, "\n")
	}
}

// level is l's load level.
func (l benchServeLevel) level() level { return level{clients: l.Clients, rate: l.RequestRate} }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64)
}

// print writes the result table.
func (r benchServeReport) print(out io.Writer) error {
	if _, err := fmt.Fprintf(out, "\nbench serve: %s, %s per level, max_tokens %d (ignore_eos %v), GOMAXPROCS %d, load average %.2f -> %.2f\n",
		filepath.Base(r.Model), r.Duration, r.MaxTokens, r.IgnoreEOS, r.GOMAXPROCS, r.LoadBefore, r.LoadAfter); err != nil {
		return err
	}
	if w := r.Warmup; w != nil {
		load := fmt.Sprintf("%d clients", w.Clients)
		if w.Mode == "open" {
			load = strconv.FormatFloat(w.RequestRate, 'g', -1, 64) + " req/s"
		}
		if _, err := fmt.Fprintf(out, "warm-up: %s, %d requests, %d errors\n", load, w.Requests, w.Errors); err != nil {
			return err
		}
	}
	if t := r.Tools; t != nil {
		arm := fmt.Sprintf("%d tools offered (tool_choice auto)", t.Tools)
		if t.Baseline {
			arm = fmt.Sprintf("baseline: no tools, system message padded with %d words to %d prompt tokens", t.PadWords, t.PromptPadded)
		}
		if _, err := fmt.Fprintf(out, "chat: %s; one request's prompt: %d tokens without tools, %d with %d tools; "+
			"first request with them %.1f ms, second %.1f ms (max_tokens 1); grammar compiles %d, %.1f ms\n",
			arm, t.PromptNoTools, t.PromptTools, t.Tools, t.FirstToolsMS, t.SecondToolsMS, t.GrammarCompiles, t.GrammarCompileMS); err != nil {
			return err
		}
	}
	if r.Prompts != "" || r.SLO != "" || r.MaxConcurrency > 0 {
		if _, err := fmt.Fprintf(out, "prompts %s, SLO %s, max concurrency %s\n", orNone(r.Prompts, "story openings"),
			orNone(r.SLO, "none"), orNone(strconv.Itoa(r.MaxConcurrency), "none")); err != nil {
			return err
		}
	}
	open := len(r.Levels) > 0 && r.Levels[0].Mode == "open"
	goodput := r.SLO != ""
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "clients"
	if open {
		head = "rate req/s"
	}
	head += "\trequests\treq/s\tout tok/s\tTTFT p50 ms\tTTFT p99 ms\tTPOT p50 ms\tITL p50 ms\tE2E p50 ms\t"
	if goodput {
		head += "goodput req/s\t"
	}
	fmt.Fprintln(tw, head+"errors\tRSS before MiB\tRSS after MiB\t")
	for _, l := range r.Levels {
		first := strconv.Itoa(l.Clients)
		if open {
			first = strconv.FormatFloat(l.RequestRate, 'g', -1, 64)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t%s\t", first, l.Requests, l.RequestsPerSec,
			l.OutputTokensPerSec, ms(l.TTFTP50), ms(l.TTFTP99), ms(l.TPOT.Median), ms(l.ITL.Median), ms(l.E2E.Median))
		if goodput {
			fmt.Fprintf(tw, "%.1f\t", l.Goodput)
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t\n", l.Errors, l.RSSBeforeMiB, l.RSSAfterMiB)
	}
	return tw.Flush()
}

func orNone(s, none string) string {
	if s == "" || s == "0" {
		return none
	}
	return s
}

// benchServeCSVHeader is the CSV table's header: one row per level,
// durations in milliseconds (full precision).
var benchServeCSVHeader = func() []string {
	h := []string{"mode", "clients", "request_rate", "max_concurrency", "prompts", "requests", "successes", "errors",
		"elapsed_s", "input_tokens", "output_tokens", "requests_per_sec", "output_tokens_per_sec"}
	for _, m := range []string{"ttft", "tpot", "itl", "e2e"} {
		h = append(h, m+"_mean_ms", m+"_median_ms", m+"_std_ms", m+"_p90_ms", m+"_p99_ms")
	}
	return append(h, "slo", "slo_met", "goodput_per_sec", "rss_before_mib", "rss_after_mib", "first_error")
}()

// writeCSV saves one row per level at path.
func (r benchServeReport) writeCSV(path string) error {
	var b strings.Builder
	cw := csv.NewWriter(&b)
	cw.Write(benchServeCSVHeader)
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	for _, l := range r.Levels {
		row := []string{l.Mode, strconv.Itoa(l.Clients), f(l.RequestRate), strconv.Itoa(l.MaxConcurrency), l.Prompts,
			strconv.Itoa(l.Requests), strconv.Itoa(l.Successes), strconv.Itoa(l.Errors), f(l.Elapsed.Seconds()),
			strconv.FormatInt(l.InputTokens, 10), strconv.FormatInt(l.OutputTokens, 10), f(l.RequestsPerSec), f(l.OutputTokensPerSec)}
		for _, d := range []serveload.Dist{l.TTFT, l.TPOT, l.ITL, l.E2E} {
			for _, v := range []time.Duration{d.Mean, d.Median, d.Std, d.P90, d.P99} {
				row = append(row, f(float64(v)/float64(time.Millisecond)))
			}
		}
		row = append(row, r.SLO, strconv.Itoa(l.SLOMet), f(l.Goodput), f(l.RSSBeforeMiB), f(l.RSSAfterMiB), l.FirstError)
		cw.Write(row)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("bench serve: encoding the CSV: %w", err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("bench serve: --csv: %w", err)
	}
	return nil
}

// write saves the report as indented JSON at path.
func (r benchServeReport) write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench serve: encoding the report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench serve: --out: %w", err)
	}
	return nil
}
