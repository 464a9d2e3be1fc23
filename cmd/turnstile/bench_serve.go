package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/bench/serveload"
)

// benchServeFile is the JSON report's name inside --out.
const benchServeFile = "bench-serve.json"

// benchServeOptions are the flags of `turnstile bench serve`.
type benchServeOptions struct {
	// engineFlags: --model, --device, --max-batch-size, --kv-cache-tokens,
	// --workers, --seed (prompt and sampling-seed draws) and --out (the
	// JSON report's directory); the rest of the server is serve's defaults.
	engineFlags
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
}

// benchServeEngineFlags are the engine flags bench serve registers.
const benchServeEngineFlags = flagModel | flagDevice | flagMaxBatchSize | flagKVTokens | flagWorkers | flagSeed | flagOut

func newBenchServeCmd() *cobra.Command {
	o := benchServeOptions{engineFlags: newServeOptions().engineFlags, clients: []int{1, 16, 128}, duration: 30 * time.Second,
		warmup: 2 * time.Second, maxRequests: 1_000_000, maxTokens: 64, ignoreEOS: true, timeout: serveload.DefaultRequestTimeout, dp: 1}
	cmd := &cobra.Command{
		Use:   "serve [--model FILE.gguf] [--clients 1,16,128] [--duration 30s] [--max-tokens 64] [--seed N] [--out DIR]",
		Short: "Load-test an in-process server with concurrent streaming clients",
		Long: "bench serve starts the server of `turnstile serve` in-process on 127.0.0.1 (CPU runner,\n" +
			"overlap on) and, for each --clients level in turn, runs that many closed-loop clients\n" +
			"sending streaming /v1/completions for --duration (or --max-requests). It prints, per\n" +
			"level: requests/s, output tokens/s, time to first token p50/p99 (nearest rank), errors\n" +
			"and the process's resident memory (VmRSS) before and after. --out writes the same as\n" +
			"JSON to DIR/" + benchServeFile + ". The exit status is non-zero if any request failed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.parsed(cmd.Flags())
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
	o.register(f, benchServeEngineFlags)
	f.IntSliceVar(&o.clients, "clients", o.clients, "concurrent clients, one level after another")
	f.DurationVar(&o.duration, "duration", o.duration, "how long each level sends requests")
	f.DurationVar(&o.warmup, "warmup", o.warmup, "load at the largest --clients level before the first level, so RSS before/after compares steady states (0: none)")
	f.IntVar(&o.maxRequests, "max-requests", o.maxRequests, "most requests per level (also bounds the samples kept)")
	f.IntVar(&o.maxTokens, "max-tokens", o.maxTokens, "max_tokens of each request")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", o.ignoreEOS, "generate exactly --max-tokens per request (equal work per request)")
	f.DurationVar(&o.timeout, "request-timeout", o.timeout, "longest one request may take (then it is an error)")
	f.StringVar(&o.url, "url", o.url, "load this running server (e.g. one started by `mpirun -np N turnstile serve --dp N`) instead of starting one; RSS is then not measured")
	f.IntVar(&o.dp, "dp", o.dp, "attention-DP ranks of the in-process server (ignored with --url)")
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
	}
	for _, c := range o.clients {
		if c < 1 || c > maxBenchClients {
			return fmt.Errorf("bench serve: --clients %d: must be in [1, %d]", c, maxBenchClients)
		}
	}
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return fmt.Errorf("bench serve: --out %q: %w", o.out, err)
		}
	}
	return nil
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
	so.out = "" // bench serve's report directory, not the server's
	seats, _, err := engineSeats(so.maxBatchSize, !so.noOverlap)
	if err != nil {
		return serveOptions{}, fmt.Errorf("bench serve: %w", err)
	}
	so.port, so.maxQueue, so.drain, so.logLevel = 0, max(4*seats, slicesMax(o.clients)), 10*time.Second, "warn"
	so.maxConnections = max(so.maxConnections, slicesMax(o.clients)) // every client's connection is served
	so.dp = o.dp
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
	Model        string  `json:"model"`
	URL          string  `json:"url,omitempty"` // --url: a server not started here (RSS not measured)
	Duration     string  `json:"duration_per_level"`
	MaxRequests  int     `json:"max_requests_per_level"`
	MaxTokens    int     `json:"max_tokens"`
	IgnoreEOS    bool    `json:"ignore_eos"`
	Seed         uint64  `json:"seed"`
	MaxBatchSize int     `json:"max_batch_size"`
	KVTokens     int     `json:"kv_cache_tokens"` // 0: serve's default
	GOMAXPROCS   int     `json:"gomaxprocs"`
	LoadBefore   float64 `json:"loadavg1_before"`
	LoadAfter    float64 `json:"loadavg1_after"`
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
		KVTokens: o.kvTokens, GOMAXPROCS: runtime.GOMAXPROCS(0)}

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

	rep.LoadBefore, _ = serveload.LoadAverage() // 0 where /proc is absent
	var runErr error
	if o.warmup > 0 {
		// The first load touches the KV cache, grows goroutine stacks and
		// opens connections; warming at the largest level keeps that out of
		// every level's RSS before/after.
		res, err := serveload.Run(ctx, o.loadConfig(url, slicesMax(o.clients), o.warmup))
		rep.Warmup = &res
		if err != nil {
			runErr = fmt.Errorf("bench serve: warm-up: %w", err)
		}
	}
	for _, n := range o.clients {
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
		res, err := serveload.Run(ctx, o.loadConfig(url, n, o.duration))
		if o.url == "" {
			after, rerr = serveload.ResidentBytes()
		}
		rep.Levels = append(rep.Levels, benchServeLevel{Result: res, RSSBeforeMiB: mib(before), RSSAfterMiB: mib(after)})
		if err = errors.Join(err, rerr); err != nil {
			runErr = fmt.Errorf("bench serve: --clients %d: %w", n, err)
			break
		}
	}
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
			failed = append(failed, fmt.Sprintf("%d of %d requests failed at --clients %d (first: %s)",
				l.Errors, l.Requests, l.Clients, l.FirstError))
		}
	}
	if len(failed) > 0 {
		return rep, fmt.Errorf("bench serve: %s", strings.Join(failed, "; "))
	}
	return rep, nil
}

// loadConfig is one level's load: n clients for d.
func (o *benchServeOptions) loadConfig(url string, n int, d time.Duration) serveload.Config {
	return serveload.Config{BaseURL: url, Clients: n, Duration: d, MaxRequests: o.maxRequests,
		MaxTokens: o.maxTokens, IgnoreEOS: o.ignoreEOS, Seed: o.seed, RequestTimeout: o.timeout}
}

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
		if _, err := fmt.Fprintf(out, "warm-up: %d clients, %d requests, %d errors\n", w.Clients, w.Requests, w.Errors); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\trequests\treq/s\tout tok/s\tTTFT p50 ms\tTTFT p99 ms\terrors\tRSS before MiB\tRSS after MiB\t")
	for _, l := range r.Levels {
		fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.0f\t%s\t%s\t%d\t%.1f\t%.1f\t\n", l.Clients, l.Requests, l.RequestsPerSec,
			l.OutputTokensPerSec, ms(l.TTFTP50), ms(l.TTFTP99), l.Errors, l.RSSBeforeMiB, l.RSSAfterMiB)
	}
	return tw.Flush()
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
