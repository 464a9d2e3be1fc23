package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/adp"
	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/dist/launch"
	"github.com/turnstile-llm/turnstile/dist/mpi"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/server"
)

// serveOptions are the flags of `turnstile serve`: the engine configuration
// and the server's own.
type serveOptions struct {
	engineFlags
	// autoSize applies the CPU serving rule (servingDefaults) to the batch
	// flags the command line did not give: set by the commands, never by
	// callers that fill the options themselves (tests).
	autoSize     bool
	modelName    string // served id; "" = the file's base name
	chatTemplate string // a Jinja file overriding the GGUF's template
	host         string
	port         int
	dp           int
	selection    cuda.Selection // --device parsed by validate
	// ablation is the experiment switches (the zero value serves), the one
	// source of every engine's and the deployment's.
	ablation   adp.Ablation
	apiKeys    []string // --api-key; validate adds --api-key-file's and TURNSTILE_API_KEY
	apiKeyFile string
	maxQueue   int // 0: 4 × seats
	// maxProgramQueue bounds program turns in flight apart from maxQueue
	// (0: maxQueue).
	maxProgramQueue int
	// The server's client bounds (server.Config; 0 takes its defaults).
	readTimeout, writeTimeout, idleTimeout time.Duration
	maxConnections                         int
	// The /v1/responses store's bounds (server.Config.ResponsesMax,
	// ResponsesMaxBytes and ResponsesTTL).
	responsesMax      int
	responsesMaxBytes int64
	responsesTTL      time.Duration
	drain             time.Duration
	logFormat         string
	logLevel          string
	// getenv reads the launcher's environment (os.Getenv; tests fake it);
	// launch is what it said (checkLaunch).
	getenv func(string) string
	launch launch.Launch
	// dpWatchdog bounds one lockstep iteration across processes (0: off);
	// verifyPlacement hashes and compares every placement (debug).
	dpWatchdog      time.Duration
	verifyPlacement bool
	// shardMLP makes the MLP tensor-parallel across the ranks under mpirun
	// (CPU runner).
	shardMLP bool
}

// newServeOptions is serve's configuration before any flag: the engine's
// defaults and the server's, stated once (bench serve starts from it too).
func newServeOptions() serveOptions {
	return serveOptions{engineFlags: defaultEngineFlags(), host: "127.0.0.1", port: 8080, dp: 1, drain: 30 * time.Second,
		logFormat: "text", logLevel: "info", getenv: os.Getenv, dpWatchdog: time.Minute, shardMLP: true, readTimeout: server.DefaultReadTimeout, writeTimeout: server.DefaultWriteTimeout,
		idleTimeout: server.DefaultIdleTimeout, maxConnections: server.DefaultMaxConnections,
		responsesMax: server.DefaultResponsesMax, responsesMaxBytes: server.DefaultResponsesMaxBytes, responsesTTL: server.DefaultResponsesTTL}
}

// serveEngineFlags are the engine flags serve registers.
const serveEngineFlags = flagModel | flagDevice | flagGPUFraction | flagMaxBatchSize | flagMaxBatched | flagBlockSize | flagCascade |
	flagKVTokens | flagKVDtype | flagWorkers | flagNoOverlap | flagPrograms

func newServeCmd() *cobra.Command {
	o := newServeOptions()
	cmd := &cobra.Command{
		Use:   "serve [--model FILE.gguf] [--host 127.0.0.1] [--port 8080]",
		Short: "Serve a model over the OpenAI-compatible HTTP API",
		Long: "serve loads a llama GGUF model (stories260K by default) on the CPU or CUDA runner\n" +
			"(--device), prints the resolved device and sizes (seats, KV blocks and tokens, batch\n" +
			"budgets; on CUDA the GPU memory plan) after validating them, and\n" +
			"serves /v1/completions, /v1/chat/completions, /v1/responses, /v1/models, /health and /metrics until\n" +
			"SIGINT or SIGTERM; then it stops accepting, lets requests in flight finish for up to\n" +
			"--drain-timeout, aborts the rest and exits 0.\n\n" +
			"Sizing on the CPU, unless given: --max-batch-size is 8 sequences per core (--workers, else\n" +
			"GOMAXPROCS), at least 8 and at most 64, so that as many clients as batch rows decode\n" +
			"together instead of waiting a whole generation for a row; --max-num-batched-tokens is at\n" +
			"least --max-batch-size (every row's decode token fits a step); the KV cache holds\n" +
			"--max-batch-size full contexts (a finished request's blocks are freed the step after its\n" +
			"last token, so the overlap headroom's seats need no context of their own).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.parsed(cmd.Flags())
			o.autoSize = true
			if err := o.validate(); err != nil {
				return err
			}
			if err := o.addAPIKeys(); err != nil {
				return err
			}
			return untilSignal(cmd, func(ctx context.Context) error { return runServe(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr(), nil) })
		},
	}
	f := cmd.Flags()
	o.register(f, serveEngineFlags)
	f.StringVar(&o.modelName, "served-model-name", o.modelName, "model id clients send (default: the file's base name)")
	f.StringVar(&o.chatTemplate, "chat-template", o.chatTemplate, chatTemplateUsage)
	f.StringVar(&o.host, "host", o.host, "address to bind")
	f.IntVar(&o.port, "port", o.port, "TCP port (0: any free port)")
	f.IntVar(&o.dp, "dp", o.dp, "attention data-parallel ranks, each its own engine, KV cache and seats, routed at one gather point; under mpirun one rank per process, and --dp must equal -np")
	f.DurationVar(&o.dpWatchdog, "dp-watchdog", o.dpWatchdog, "under mpirun: end the job (naming the rank and collective) when one lockstep iteration takes longer than this; 0 disables")
	f.BoolVar(&o.shardMLP, "shard-mlp", o.shardMLP, "under mpirun on the CPU: run the MLP tensor-parallel across the ranks (each process holds 1/N of the MLP weights; every rank steps in lockstep)")
	f.BoolVar(&o.verifyPlacement, "verify-placement", o.verifyPlacement, "debug: every process hashes each iteration's placements and the job stops if any differs")
	f.BoolVar(&o.ablation.Engine.ChargeRetiring, "charge-retiring", o.ablation.Engine.ChargeRetiring, "experiments only: charge retiring requests against admission and step budgets (what engines without the retiring rule do)")
	f.StringArrayVar(&o.apiKeys, "api-key", o.apiKeys, "require 'Authorization: Bearer KEY' (repeatable; each key is its own cache tenant; visible in ps: prefer --api-key-file or "+apiKeyEnv+")")
	f.StringVar(&o.apiKeyFile, "api-key-file", o.apiKeyFile, "read API keys from this file, one per line (blank lines and lines starting with # are skipped); adds to --api-key and "+apiKeyEnv)
	f.IntVar(&o.maxQueue, "max-queue", o.maxQueue, "most requests in flight before 429 (default: 4 × seats)")
	f.IntVar(&o.maxProgramQueue, "max-program-queue", o.maxProgramQueue, "most program turns (requests with a program id) in flight before 429, a bound apart from --max-queue, so turns waiting for admission never refuse other requests (default: --max-queue)")
	f.DurationVar(&o.readTimeout, "read-timeout", o.readTimeout, "longest a client may take to send a request's headers, and again its body (408 beyond)")
	f.DurationVar(&o.writeTimeout, "write-timeout", o.writeTimeout, "longest one write of an answer may wait on the client (every event of a stream): a client that reads nothing for this long is dropped and its requests aborted")
	f.DurationVar(&o.idleTimeout, "idle-timeout", o.idleTimeout, "longest a keep-alive connection waits for its next request")
	f.IntVar(&o.maxConnections, "max-connections", o.maxConnections, "most client connections open at once; more wait in the listen backlog")
	f.IntVar(&o.responsesMax, "responses-max", o.responsesMax, "most stored /v1/responses answers (store: true) kept for GET and previous_response_id; the least recently used are evicted first")
	f.Int64Var(&o.responsesMaxBytes, "responses-max-bytes", o.responsesMaxBytes, "most bytes the stored /v1/responses answers take (each charged its JSON and whole conversation); the least recently used are evicted first")
	f.DurationVar(&o.responsesTTL, "responses-ttl", o.responsesTTL, "a stored /v1/responses answer unused (neither read nor continued) this long expires")
	f.DurationVar(&o.drain, "drain-timeout", o.drain, "on SIGINT/SIGTERM, how long requests in flight may finish")
	f.StringVar(&o.logFormat, "log-format", o.logFormat, "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", o.logLevel, "log level: debug, info, warn or error")
	return cmd
}

// chatTemplateUsage describes --chat-template (serve and bench serve).
const chatTemplateUsage = "Jinja chat template file (default: the model's own, GGUF tokenizer.chat_template or tokenizer_config.json chat_template, else the plain fallback)"

// validate checks every flag that does not need the model.
func (o *serveOptions) validate() error {
	if err := o.engineFlags.validate("serve"); err != nil {
		return err
	}
	switch {
	case o.port < 0 || o.port > 65535:
		return fmt.Errorf("serve: --port %d: must be in [0, 65535]", o.port)
	case o.dp < 1 || o.dp > adp.MaxRanks:
		return fmt.Errorf("serve: --dp %d: must be in [1, %d]", o.dp, adp.MaxRanks)
	case o.maxQueue < 0:
		return fmt.Errorf("serve: --max-queue %d: must be >= 0", o.maxQueue)
	case o.maxProgramQueue < 0:
		return fmt.Errorf("serve: --max-program-queue %d: must be >= 0", o.maxProgramQueue)
	case o.readTimeout <= 0:
		return fmt.Errorf("serve: --read-timeout %v: must be > 0", o.readTimeout)
	case o.writeTimeout <= 0:
		return fmt.Errorf("serve: --write-timeout %v: must be > 0", o.writeTimeout)
	case o.idleTimeout <= 0:
		return fmt.Errorf("serve: --idle-timeout %v: must be > 0", o.idleTimeout)
	case o.maxConnections < 1:
		return fmt.Errorf("serve: --max-connections %d: must be >= 1", o.maxConnections)
	case o.responsesMax < 1 || o.responsesMaxBytes < 1 || o.responsesTTL <= 0:
		return fmt.Errorf("serve: --responses-max %d, --responses-max-bytes %d and --responses-ttl %v: must be > 0",
			o.responsesMax, o.responsesMaxBytes, o.responsesTTL)
	case o.drain < 0:
		return fmt.Errorf("serve: --drain-timeout %v: must be >= 0", o.drain)
	case o.dpWatchdog < 0:
		return fmt.Errorf("serve: --dp-watchdog %v: must be >= 0", o.dpWatchdog)
	case o.logFormat != "text" && o.logFormat != "json":
		return fmt.Errorf("serve: --log-format %q: must be text or json", o.logFormat)
	}
	if err := o.checkLaunch(); err != nil {
		return err
	}
	sel, err := o.selectDevice("serve")
	if err != nil {
		return err
	}
	o.selection = sel
	for i, k := range o.apiKeys {
		if err := checkAPIKey(k, fmt.Sprintf("--api-key #%d", i+1)); err != nil {
			return err
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("serve: --log-level %q: %w", o.logLevel, err)
	}
	return nil
}

// apiKeyEnv names the environment variable holding an API key (vLLM reads
// VLLM_API_KEY the same way): unlike --api-key, it is not shown by ps.
const apiKeyEnv = "TURNSTILE_API_KEY"

func checkAPIKey(k, where string) error {
	if k == "" || strings.ContainsAny(k, " \t\r\n") {
		return fmt.Errorf("serve: %s: an API key must be non-empty without whitespace", where)
	}
	return nil
}

// addAPIKeys adds the keys of --api-key-file and TURNSTILE_API_KEY to
// --api-key's (serve runs it once, after validate); an error names the
// source of the bad key.
func (o *serveOptions) addAPIKeys() error {
	if o.apiKeyFile != "" {
		b, err := os.ReadFile(o.apiKeyFile)
		if err != nil {
			return fmt.Errorf("serve: --api-key-file: %w", err)
		}
		n := 0
		for i, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if err := checkAPIKey(line, fmt.Sprintf("--api-key-file %s line %d", o.apiKeyFile, i+1)); err != nil {
				return err
			}
			o.apiKeys = append(o.apiKeys, line)
			n++
		}
		if n == 0 {
			return fmt.Errorf("serve: --api-key-file %s: no keys in it", o.apiKeyFile)
		}
	}
	if k := strings.TrimSpace(o.getenv(apiKeyEnv)); k != "" {
		if err := checkAPIKey(k, apiKeyEnv); err != nil {
			return err
		}
		o.apiKeys = append(o.apiKeys, k)
	}
	return nil
}

func (o *serveOptions) logger(w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(o.logLevel)) // validated
	ho := &slog.HandlerOptions{Level: lvl}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// sizes are serve's resolved sizes, printed before serving.
type sizes struct {
	seats, headroom       int
	blocks, kvTokens      int
	context, vocab        int
	batchSeqs, batchToks  int
	maxQueue, maxPrograms int // in-flight bounds: requests, program turns
	overlap               bool
	admission, chatSource string
	programs              *policy.Config
	device                cuda.Selection
	gpu                   *model.CUDAMemory // the CUDA runner's plan; nil on the CPU
	kvDtype               string            // the KV cache's element type (f32, f16, bf16)
	kvBytes               int64             // one engine's KV cache, bytes (K and V, every layer)
}

// engineSeats is the seat count of one engine of maxBatchSize under
// overlap and its teardown headroom (executor.Config.DeriveSeats): the one
// place the CLI derives it.
func engineSeats(maxBatchSize int, overlap bool) (seats, headroom int, err error) {
	cfg := executor.Config{MaxBatchSize: maxBatchSize, Overlap: overlap}
	seats, err = cfg.DeriveSeats()
	return seats, cfg.SeatSizing().Headroom(), err
}

// servingDefaults applies the CPU serving rule (see cpuSeqsPerCore) to the
// batch flags not given on the command line.
func (o *serveOptions) servingDefaults(device cuda.Selection) {
	if !o.autoSize {
		return
	}
	if device.Backend != cuda.BackendCUDA && !o.set["max-batch-size"] {
		cores := o.workers
		if cores == 0 {
			cores = runtime.GOMAXPROCS(0)
		}
		o.maxBatchSize = min(max(cpuSeqsPerCore*cores, defaultMaxBatchSize), cpuMaxDefaultBatch)
	}
	if !o.set["max-num-batched-tokens"] {
		o.maxBatched = max(o.maxBatched, o.maxBatchSize)
	}
}

// resolve derives the sizes from the flags and the model and checks that
// they agree, naming both numbers when they do not. On device CUDA without
// --kv-cache-tokens the KV size is left to the runner (blocks 0; see
// sizes.setKV).
func (o *serveOptions) resolve(ctxLen, vocab int, device cuda.Selection) (sizes, error) {
	overlap := !o.noOverlap
	seats, headroom, err := engineSeats(o.maxBatchSize, overlap)
	if err != nil {
		return sizes{}, fmt.Errorf("serve: %w", err)
	}
	s := sizes{seats: seats, headroom: headroom, context: ctxLen, vocab: vocab,
		batchSeqs: o.maxBatchSize, batchToks: o.maxBatched, overlap: overlap, admission: o.admission, device: device}
	if s.programs, err = o.programPolicy(); err != nil {
		return s, fmt.Errorf("serve: %w", err)
	}
	kv := o.kvTokens
	if kv == 0 && device.Backend != cuda.BackendCUDA {
		kv = o.maxBatchSize * ctxLen
	}
	if kv > 0 {
		if err := s.setKV((kv+o.blockSize-1)/o.blockSize, o.blockSize, 0); err != nil {
			return s, err
		}
	}
	s.maxQueue = o.maxQueue
	if s.maxQueue == 0 {
		s.maxQueue = 4 * seats
	}
	if s.maxQueue < o.maxBatchSize {
		return s, fmt.Errorf("serve: --max-queue %d is less than --max-batch-size %d: batches could never fill", s.maxQueue, o.maxBatchSize)
	}
	s.maxPrograms = o.maxProgramQueue
	if s.maxPrograms == 0 {
		s.maxPrograms = s.maxQueue
	}
	return s, nil
}

// setKV records a KV cache of blocks × blockSize tokens and checks that it
// holds a full-context request. fraction is the --gpu-memory-fraction the
// CUDA runner sized it from, 0 when --kv-cache-tokens (or its default) did.
func (s *sizes) setKV(blocks, blockSize int, fraction float64) error {
	s.blocks, s.kvTokens = blocks, blocks*blockSize
	if s.kvTokens >= s.context {
		return nil
	}
	if fraction != 0 {
		return fmt.Errorf("serve: --gpu-memory-fraction %g leaves a KV cache of %d tokens, less than the model context of %d tokens: a full-length request could never run",
			fraction, s.kvTokens, s.context)
	}
	return fmt.Errorf("serve: --kv-cache-tokens %d is less than the model context of %d tokens: a full-length request could never run",
		s.kvTokens, s.context)
}

// setRunners records what the deployment's runners say of the KV cache:
// its element type and bytes, and on CUDA the memory plan, whose KV size
// is the cache's when --gpu-memory-fraction sized it.
func (s *sizes) setRunners(d *deployment, fraction float64) error {
	s.kvDtype, s.kvBytes, s.gpu = d.kvDtype, d.kvBytes, d.gpu
	if d.gpu != nil && s.blocks == 0 {
		return s.setKV(d.gpu.KVBlocks, d.gpu.BlockSize, fraction)
	}
	return nil
}

func (s sizes) print(w io.Writer, name, path string) error {
	adm := "none (seats and blocks only)"
	if c := s.programs; c != nil {
		charge := fmt.Sprintf("tokens × acting weight %g + buffer %d", c.ActingTokenWeight, c.Buffer)
		if c.Accounting == policy.BlockAccounting {
			charge = fmt.Sprintf("distinct blocks + reserve %d", c.Reserve)
		}
		adm = fmt.Sprintf("%v for requests with a program id: %s per program, of %d tokens; at most %d ACTIVE programs;\n"+
			"               pause above %g down to %g, resume below %g; aging tau %v, forced resume %v, lease %v",
			c.Accounting, charge, s.kvTokens, c.MaxActive, c.PauseThreshold, c.PauseTarget, c.PauseThreshold-c.ResumeHysteresis,
			c.AgingTau, c.ForcedResume, c.Lease)
	}
	kvLine := ""
	if s.kvDtype != "" {
		kvLine = fmt.Sprintf(", %s, %.1f MiB", s.kvDtype, float64(s.kvBytes)/(1<<20))
	}
	dev := s.device.String()
	if s.gpu != nil {
		dev += "\n  GPU memory   " + s.gpu.String()
	}
	_, err := fmt.Fprintf(w, "turnstile serve: model %s (%s): context %d tokens, vocab %d\n"+
		"  device       %s\n"+
		"  seats        %d = max-batch-size %d + overlap headroom %d (overlap %v)\n"+
		"  KV cache     %d blocks × %d tokens = %d tokens%s\n"+
		"  step budget  %d sequences, %d tokens\n"+
		"  queue bound  %d requests in flight (429 beyond); program turns: %d of their own\n"+
		"  admission    %s\n"+
		"  chat         %s\n",
		name, path, s.context, s.vocab, dev, s.seats, s.batchSeqs, s.headroom, s.overlap,
		s.blocks, s.kvTokens/max(s.blocks, 1), s.kvTokens, kvLine, s.batchSeqs, s.batchToks, s.maxQueue, s.maxPrograms, adm, s.chatSource)
	return err
}

// readChatTemplate is the --chat-template file, else the model's own
// (GGUF tokenizer.chat_template or tokenizer_config.json's chat_template),
// else "" (the fallback); source says which.
func (o *serveOptions) readChatTemplate(m *model.Llama) (tmpl, source string, err error) {
	if o.chatTemplate != "" {
		b, err := os.ReadFile(o.chatTemplate)
		if err != nil {
			return "", "", fmt.Errorf("serve: --chat-template: %w", err)
		}
		return string(b), "template from " + o.chatTemplate, nil
	}
	if t := m.ChatTemplate(); t != "" {
		return t, "the model's chat template", nil
	}
	return "", "fallback format (the model has no chat template)", nil
}

// runServe loads the model, builds the deployment (buildDeployment) and
// the server, and serves until ctx ends. ready, when set, is called with
// the bound address once the server accepts connections.
func runServe(ctx context.Context, o serveOptions, out, logOut io.Writer, ready func(addr string)) (err error) {
	log := o.logger(logOut)
	device, overlapNote, err := o.resolveDevice(log)
	if err != nil {
		return err
	}
	m, err := o.loadModel(device, logOut)
	if err != nil {
		return err
	}
	defer m.Close()
	o.servingDefaults(device)
	sz, err := o.resolve(m.MaxContext(), m.Config().Vocab, device)
	if err != nil {
		return err
	}
	tmpl, src, err := o.readChatTemplate(m)
	if err != nil {
		return err
	}
	sz.chatSource = src
	name := o.modelName
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(o.model), filepath.Ext(o.model))
	}
	spec, err := o.deploymentSpec(m, device, sz, name, log)
	if err != nil {
		return err
	}
	d, err := buildDeployment(spec)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := sz.setRunners(d, o.dev.gpuFraction); err != nil {
		return err
	}
	if d.world != nil {
		// Under mpirun only process 0 serves HTTP; the others step their
		// rank with it.
		host, _ := os.Hostname()
		line := fmt.Sprintf("host %s, pid %d, device %s, %d kernel workers, KV %d blocks × %d tokens, %d seats, %s",
			host, os.Getpid(), device, max(spec.runner.workers, 1), sz.blocks, o.blockSize, sz.seats, d.mlp)
		if d.proc != 0 {
			if err := printWorld(d.world, io.Discard, line, ""); err != nil {
				return err
			}
			return serveRank(d.front, d.world, log)
		}
		defer func() {
			if err != nil { // a peer may wait in a collective for this process
				d.world.Abort(1)
			}
		}()
		if err := sz.print(out, name, o.model); err != nil {
			return err
		}
		if err := printWorld(d.world, out, line, overlapNote); err != nil {
			return err
		}
	} else if err := sz.print(out, name, o.model); err != nil {
		return err
	}
	if d.grammarOff != nil {
		log.Warn("structured output off", slog.String("reason", d.grammarOff.Error()))
	}
	scfg := server.Config{Model: name, MaxContext: m.MaxContext(), Tokenizer: m.Tokenizer(), ChatTemplate: tmpl, StopTokenIDs: m.StopIDs(),
		APIKeys: o.apiKeys, MaxInFlight: sz.maxQueue, MaxProgramInFlight: sz.maxPrograms,
		ReadTimeout: o.readTimeout, WriteTimeout: o.writeTimeout, IdleTimeout: o.idleTimeout, MaxConnections: o.maxConnections,
		ProgramIdleTTL: o.programs.lease, Logger: log, Grammars: d.grammars, GrammarsOff: d.grammarOff,
		ResponsesMax: o.responsesMax, ResponsesMaxBytes: o.responsesMaxBytes, ResponsesTTL: o.responsesTTL}
	srv, err := server.New(scfg, d.front)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := o.printServing(out, srv, d.world == nil, spec.runner.workers); err != nil {
		return err
	}
	return o.serveUntil(ctx, srv, d.front, name, log, ready)
}

// resolveDevice resolves --device before the model loads, so an unusable
// --device cuda fails fast; when auto chose, one log line says which and
// why. Under mpirun the device is this process's rank's. On the CPU a
// sharded MLP turns overlap off; overlapNote says so in the world listing.
func (o *serveOptions) resolveDevice(log *slog.Logger) (device cuda.Selection, overlapNote string, err error) {
	device, note, err := o.dev.resolve("serve", o.selection)
	if err != nil {
		return device, "", err
	}
	if note != "" { // auto chose: one line says which device and why
		if device.Backend == cuda.BackendCPU {
			log.Warn("device", slog.String("device", device.String()), slog.String("reason", note))
		} else {
			log.Info("device", slog.String("device", device.String()), slog.String("reason", note))
		}
	}
	// On the CPU a sharded MLP's collectives run on the cores the loop's
	// gather spins on: overlapping the two (the gather of step n+1 while
	// step n's layers exchange rows) oversubscribes them and costs each
	// exchange a scheduler time slice (measured: ~100× slower decode with
	// two ranks on two cores). The ranks step without overlap instead.
	if o.acrossProcesses() && o.shardMLP && device.Backend != cuda.BackendCUDA && !o.noOverlap {
		o.noOverlap = true
		overlapNote = " (overlap off: on the CPU the sharded MLP's collectives share the cores the gather waits on; --shard-mlp=false keeps overlap)"
	}
	if o.acrossProcesses() {
		device = o.rankDevice(device)
	}
	return device, overlapNote, nil
}

// loadModel loads --model for device, first reading the file once with a
// progress bar when logOut is a terminal.
func (o *serveOptions) loadModel(device cuda.Selection, logOut io.Writer) (*model.Llama, error) {
	if isTerminal(logOut) {
		if err := warmFile(o.model, logOut); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	lopts := o.llamaOptions(device.Backend)
	if o.acrossProcesses() && o.shardMLP {
		// Each process then streams 1/N of the MLP: copying the whole
		// model into its own memory would undo the shard's saving, so the
		// weights stay in the file mapping, which the processes of a host
		// share.
		lopts.Mmap = true
	}
	m, err := model.LoadLlama(o.model, lopts)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return m, nil
}

// deploymentSpec is serve's deployment: --dp ranks of the engine the flags
// and sizes describe, each with its own runner, KV cache and seats; under
// mpirun one rank per process.
func (o *serveOptions) deploymentSpec(m *model.Llama, device cuda.Selection, sz sizes, name string, log *slog.Logger) (deploymentSpec, error) {
	kvType, err := o.kvType(device.Backend)
	if err != nil {
		return deploymentSpec{}, fmt.Errorf("serve: %w", err)
	}
	cfg := o.executorConfig()
	cfg.Model, cfg.Programs = name, sz.programs
	s := deploymentSpec{command: "serve", model: m, device: device, engine: cfg,
		runner: runnerSizes{kvBlocks: sz.blocks, fraction: o.dev.gpuFraction, workers: o.rankWorkers(), kvType: kvType},
		dp:     o.dp, shardMLP: o.shardMLP, ablation: o.ablation, verifyPlacement: o.verifyPlacement, watchdog: o.dpWatchdog, log: log}
	if o.acrossProcesses() {
		s.world = o.openWorld
	}
	return s, nil
}

// printServing ends the start-up report: the client bounds, the ranks of
// an attention-DP deployment in one process (local), and the experiment
// switch when set.
func (o *serveOptions) printServing(out io.Writer, srv *server.Server, local bool, workers int) error {
	if _, err := fmt.Fprintf(out, "  clients      read timeout %v, write timeout %v, idle timeout %v; at most %d connections, %d requests read and parsed at once\n",
		o.readTimeout, o.writeTimeout, o.idleTimeout, o.maxConnections, srv.MaxParsing()); err != nil {
		return err
	}
	if o.dp > 1 && local {
		if _, err := fmt.Fprintf(out, "  ranks        %d attention-DP ranks (each: the seats, KV cache and step budget above; %d kernel workers)\n", o.dp, workers); err != nil {
			return err
		}
	}
	if o.ablation.Engine.ChargeRetiring {
		if _, err := fmt.Fprintln(out, "  retiring     CHARGED against admission and budgets (--charge-retiring: for experiments)"); err != nil {
			return err
		}
	}
	return nil
}

// serveUntil runs eng's loop and serves srv on --host:--port until ctx
// ends or the engine fails, then drains, stops the engine and checks its
// accounting.
func (o *serveOptions) serveUntil(ctx context.Context, srv *server.Server, eng frontEnd, name string, log *slog.Logger, ready func(addr string)) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	engCtx, stopEngine := context.WithCancel(context.Background())
	defer stopEngine()
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(engCtx) }()
	// The engine failing (a rank's error, a peer gone) ends serving now:
	// the server stops, requests in flight see their streams end.
	srvCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	var engErr error
	engFailed := make(chan struct{})
	go func() {
		engErr = <-engDone
		if engErr != nil {
			log.Error("engine failed: stopping the server", slog.String("err", engErr.Error()))
		}
		close(engFailed)
		stopServing()
	}()
	addr := ln.Addr().String()
	log.Info("serving", slog.String("addr", "http://"+addr), slog.String("model", name), slog.Bool("auth", len(o.apiKeys) > 0))
	if ready != nil {
		ready(addr)
	}
	serveErr := srv.Serve(srvCtx, ln, o.drain)
	stopEngine() // aborts whatever is left and releases every seat and block
	<-engFailed
	if err := errors.Join(serveErr, engErr); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := eng.Check(); err != nil {
		return fmt.Errorf("serve: after shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// serveRank runs a process other than 0 of a deployment across processes:
// its rank steps with the others until process 0 stops the deployment (its
// own signals are left to process 0, which drains first); a failure ends
// the whole job, since the peers may be waiting in a collective for it.
func serveRank(eng frontEnd, world *mpi.World, log *slog.Logger) error {
	log.Debug("rank serving", slog.Int("rank", world.Rank()))
	err := eng.Run(context.Background())
	if err == nil {
		err = eng.Check()
	}
	if err != nil {
		log.Error("rank failed: ending the job", slog.Int("rank", world.Rank()), slog.String("err", err.Error()))
		world.Abort(1)
		return fmt.Errorf("serve: rank %d: %w", world.Rank(), err)
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// warmFile reads the model file once with a progress bar on w, so the
// memory map LoadLlama makes finds the weights in the page cache.
func warmFile(path string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	total := st.Size()
	buf := make([]byte, 4<<20)
	var done int64
	bar := func() {
		const width = 30
		frac := 1.0
		if total > 0 {
			frac = float64(done) / float64(total)
		}
		n := int(frac * width)
		fmt.Fprintf(w, "\rloading weights [%s%s] %3.0f%% %.1f/%.1f MiB", strings.Repeat("#", n), strings.Repeat(" ", width-n),
			100*frac, float64(done)/(1<<20), float64(total)/(1<<20))
	}
	for {
		n, err := f.Read(buf)
		done += int64(n)
		if n > 0 {
			bar()
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
	}
	fmt.Fprintln(w)
	return nil
}
