package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/turnstile-llm/turnstile/adp"
	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/dist/mpi"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/grammar"
	"github.com/turnstile-llm/turnstile/guided"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/server"
)

// deploymentSpec is what buildDeployment builds from: a loaded model, the
// device, the configuration every rank's engine and runner get, and how
// the attention-DP ranks are spread over processes.
type deploymentSpec struct {
	command string         // prefixes errors
	model   *model.Llama   // the caller's: loaded before (its sizes decide the spec) and closed after
	device  cuda.Selection // resolved (cpu or cuda:N): this process's ranks' device
	// engine is every rank's engine configuration; the builder sets its
	// Ablation (ablation.Engine, the one source) and Guide.
	engine executor.Config
	// runner holds the runner's own sizes (KV, workers, KV type); the
	// builder sets the seats (engine.DeriveSeats), the block size and token
	// budget (the engine's) and the sharded MLP's communicator.
	runner runnerSizes
	dp     int // attention-DP ranks in all; more than one runs behind an adp.Frontend
	// world, when set, joins this process to the MPI world of a deployment
	// across processes (one rank per process); nil: every rank runs here.
	world func() (*mpi.World, error)
	// shardMLP makes the MLP tensor-parallel across the processes' ranks
	// (the CPU runner, across processes only).
	shardMLP bool
	ablation adp.Ablation // the experiment switches; zero serves
	// Across processes: verifyPlacement hashes every placement (debug) and
	// watchdog bounds one iteration (0: off). log gets the deployment's
	// diagnostics and the watchdog's last word (required when dp > 1).
	verifyPlacement bool
	watchdog        time.Duration
	log             *slog.Logger
}

// frontEnd is what runs a deployment and what the server submits to: the
// one engine, or the attention-DP deployment of them (adp.Frontend).
type frontEnd interface {
	server.Engine
	Run(context.Context) error
	Check() error
}

// deployment is what buildDeployment built: the MPI world (across
// processes), the sharded MLP's communicator, one runner and engine per
// rank of this process, structured output's vocabulary, decoders and
// grammar cache, and the front end. Close releases it.
type deployment struct {
	world   *mpi.World // nil: one process
	proc    int        // this process in the world (0 in one process)
	seats   int        // every engine's
	engines []*executor.Engine
	front   frontEnd
	// grammars is the server's compiled-grammar cache (server.Config.Grammars);
	// nil when structured output is off (grammarOff says why).
	grammars   *guided.Cache
	grammarOff error
	// What the start-up report states of the runners: the KV cache's
	// element type and bytes, the CUDA runner's memory plan (nil on the
	// CPU) and the MLP this process holds.
	kvDtype string
	kvBytes int64
	gpu     *model.CUDAMemory
	mlp     string
	closers []func() error // in the order opened
}

// buildDeployment builds the deployment s describes; on error, what it
// opened is closed.
func buildDeployment(s deploymentSpec) (d *deployment, err error) {
	if s.dp > 1 && s.world == nil && s.device.Backend == cuda.BackendCUDA {
		return nil, fmt.Errorf("%s: --dp %d on %s: in one process attention-DP ranks run on the CPU runner only; on GPUs run one rank per process: mpirun -np %d turnstile serve --dp %d",
			s.command, s.dp, s.device, s.dp, s.dp)
	}
	d = &deployment{mlp: "whole MLP"}
	defer func() {
		if err != nil {
			_ = d.Close() // the build's error is the one to report
			d = nil
		}
	}()
	ranks := s.dp
	if s.world != nil {
		if d.world, err = s.world(); err != nil {
			return d, err
		}
		d.closers = append(d.closers, d.world.Close)
		d.proc, ranks = d.world.Rank(), 1
	}
	// The sharded MLP's collectives run on the runner's stream while the
	// gather runs on the loop: its own communicator.
	var mlpComm *mpi.World
	if d.world != nil && s.shardMLP && s.device.Backend != cuda.BackendCUDA {
		if mlpComm, err = d.world.Dup(); err != nil {
			return d, fmt.Errorf("%s: the sharded MLP's communicator: %w", s.command, err)
		}
		d.closers = append(d.closers, mlpComm.Close)
	}
	if d.seats, err = s.engine.DeriveSeats(); err != nil {
		return d, fmt.Errorf("%s: %w", s.command, err)
	}
	rs := s.runner
	rs.seats, rs.blockSize, rs.maxBatchTokens = d.seats, s.engine.BlockSize, s.engine.MaxNumBatchedTokens
	if mlpComm != nil { // a nil *mpi.World would make a non-nil MLPComm
		rs.mlp = mlpComm
	}
	cfg := s.engine
	cfg.Ablation = s.ablation.Engine
	tok := s.model.Tokenizer()
	// One engine per attention-DP rank, each with its own runner, KV cache,
	// seats and guided decoder; executor.New validates each rank's seat
	// consumers against its pool in both directions.
	var vocab *grammar.Vocab
	var dummies []func() error
	for range ranks {
		r, err := d.addRunner(s, rs)
		if err != nil {
			return d, err
		}
		if cpu, ok := r.(*model.CPURunner); ok && mlpComm != nil {
			// A rank with nothing to launch still joins every layer's MLP
			// collectives.
			dummies = append(dummies, cpu.DummyStep)
		}
		if vocab == nil && d.grammarOff == nil {
			// Once per model, as wide as the runner's logits.
			vocab, d.grammarOff = guided.VocabOf(tok, s.model.StopIDs(), r.Capacity().Vocab)
		}
		cfg.Guide = nil
		if vocab != nil {
			if cfg.Guide, err = guided.New(d.seats, vocab); err != nil {
				return d, fmt.Errorf("%s: %w", s.command, err)
			}
		}
		eng, err := executor.New(cfg, r, tok)
		if err != nil {
			return d, fmt.Errorf("%s: %w", s.command, err)
		}
		// Closed before its runner: an attention-DP deployment's Run
		// returns with each rank's last step still in flight on its
		// runner (Close waits for it; after an engine's own Run it does
		// nothing).
		d.closers = append(d.closers, eng.Close)
		d.engines = append(d.engines, eng)
	}
	d.grammars, err = d.grammarCache(vocab)
	if err != nil {
		return d, fmt.Errorf("%s: %w", s.command, err)
	}
	d.front = d.engines[0]
	if s.dp > 1 {
		fe, err := adp.NewFrontend(d.adpConfig(s, dummies), d.engines) // across processes: gathers with every peer
		if err != nil {
			return d, fmt.Errorf("%s: %w", s.command, err)
		}
		d.front = fe
	}
	return d, nil
}

// addRunner builds one rank's runner and records what the report states
// of it.
func (d *deployment) addRunner(s deploymentSpec, rs runnerSizes) (runner, error) {
	r, gpu, err := newRunner(s.command, s.device, s.model, rs)
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, r.Close)
	if cpu, ok := r.(*model.CPURunner); ok {
		d.kvDtype, d.kvBytes = strings.ToLower(cpu.KVType().String()), cpu.KVBytes()
		if rs.mlp != nil {
			d.mlp = fmt.Sprintf("MLP shard %d of %d: %.1f KiB of the MLP weights (whole: %.1f KiB)", d.world.Rank()+1, d.world.Size(),
				float64(cpu.MLPWeightBytes())/1024, float64(s.model.MLPWeightBytes())/1024)
		}
	}
	if gpu != nil {
		d.kvDtype, d.kvBytes, d.gpu = gpu.KVType, int64(gpu.KVBytes), gpu
	}
	return r, nil
}

// grammarCache is the server's cache of compiled grammars, or nil when
// structured output is off: without a vocabulary, or across processes,
// where a request placed on another process's rank would lose its
// grammar (adp's bulletin carries no executor.Request.Grammar).
func (d *deployment) grammarCache(vocab *grammar.Vocab) (*guided.Cache, error) {
	switch {
	case vocab == nil:
		return nil, nil
	case d.world != nil:
		d.grammarOff = errors.New("across processes the attention-DP bulletin does not carry a request's grammar")
		return nil, nil
	}
	return guided.NewCache(guided.DefaultCacheConfig)
}

// adpConfig is the attention-DP deployment's configuration: across
// processes it joins the world, with the ranks' dummy steps (a sharded
// MLP), placement verification and the watchdog, which ends the job.
func (d *deployment) adpConfig(s deploymentSpec, dummies []func() error) adp.Config {
	log := s.log
	c := adp.Config{Ablation: s.ablation, Logf: func(f string, a ...any) { log.Debug(fmt.Sprintf(f, a...)) }}
	if w := d.world; w != nil {
		c.Comm, c.VerifyPlacement, c.Watchdog, c.Dummies = w, s.verifyPlacement, s.watchdog, dummies
		c.OnStuck = func(msg string) {
			log.Error("attention-DP watchdog: ending the job", slog.String("reason", msg), slog.Int("rank", d.proc))
			w.Abort(3)
		}
	}
	return c
}

// Close releases what the deployment opened, last opened first: each
// engine, then its runner, then the MLP's communicator, then the world.
func (d *deployment) Close() error {
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		errs = append(errs, d.closers[i]())
	}
	d.closers = nil
	return errors.Join(errs...)
}
