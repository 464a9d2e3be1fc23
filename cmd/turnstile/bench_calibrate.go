package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/bench/calibrate"
	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/sim"
)

// benchCalibrateOptions are the flags of bench calibrate.
type benchCalibrateOptions struct {
	// engineFlags: --model, --device (cpu, cuda[:N] or sim), --workers,
	// --max-batch-size, --kv-cache-dtype and --cascade-min-blocks (the
	// engine's grouping: with it on, shared-prefix traffic prices shared
	// pairs); commandFlags: --seed (the training traffic), --out (the
	// profile's directory) and --profile (what --device sim is priced by).
	engineFlags
	commandFlags
	requests int
	runner   string         // cpu, cuda or sim: --device resolved by validate
	gpu      cuda.Selection // the CUDA device (runner cuda)
}

// The engine and command flags bench calibrate registers.
const (
	benchCalibrateEngineFlags  = flagModel | flagDevice | flagWorkers | flagMaxBatchSize | flagKVDtype | flagCascade
	benchCalibrateCommandFlags = flagSeed | flagOut | flagProfile
)

// calibrateProfileFile is the profile's name inside --out.
const calibrateProfileFile = "profile.json"

// calibrateMaxBatchSize bounds --max-batch-size: the decode passes run
// every power of two up to it.
const calibrateMaxBatchSize = 256

// Calibration sizes that are not flags: the step's token budget (longer
// prompts prefill in chunks), the KV block size and the simulated device's
// context. No warm-up steps are dropped: on the CPU runner the first steps
// of a pass measured no slower than later steps of the same shape.
const (
	calibrateMaxBatchTokens = 256
	calibrateBlockSize      = 16
	calibrateSimContext     = 4096
)

// calibrateGoal is issue #8's target for the held-out median step-time
// error on the CPU runner.
const calibrateGoal = 0.10

// calibrateCUDAWarmup is how many steps of each CUDA pass go unrecorded:
// the first steps load modules and capture graphs.
const calibrateCUDAWarmup = 4

func newBenchCalibrateCmd() *cobra.Command {
	o := benchCalibrateOptions{engineFlags: defaultEngineFlags(), commandFlags: defaultCommandFlags(), requests: 160}
	o.dev.device = "cpu" // calibrate measures the runner it is told to, never a guess
	o.maxBatchLimit = calibrateMaxBatchSize
	cmd := &cobra.Command{
		Use:   "calibrate [--model FILE] [--device cpu|cuda[:N]|sim] [--workers N] [--max-batch-size N] [--seed N] [--requests N] [--out DIR]",
		Short: "Fit the simulated device's cost model to a runner and print its held-out error",
		Long: "bench calibrate drives seeded traffic through an engine on a runner, recording every step's shape\n" +
			"and time: chat at every decode batch size 1, 2, 4, … --max-batch-size, long outputs (growing\n" +
			"contexts) and long chunked prefills. It fits the simulated device's cost model\n" +
			"  step = fixed + per prefill token·prefill tokens + per decode seq·decode seqs + per context token·context tokens\n" +
			"         + per prefill pair·(query, key) pairs of prefill attention\n" +
			"         + per shared pair·(decode query, shared-run token) pairs of cascade attention\n" +
			"(the last only with --cascade-min-blocks > 0: a pass of shared-prefix families puts groups in decode steps)\n" +
			"by least squares on relative error over the training traffic (--seed) and prints the error |predicted − measured| / measured\n" +
			"on held-out traffic of another seed, overall and for steps with prefill and decode-only steps.\n" +
			"--device cpu measures the CPU runner on --model (wall time), --device cuda[:N] the CUDA runner on\n" +
			"that GPU (its first 4 steps of every pass, kernel compilation and graph capture, are not recorded);\n" +
			"--device sim calibrates the simulated device priced by --profile\n" +
			"(a built-in H200 Llama-3-8B profile or a profile.json), a self-check that the fit recovers it.\n" +
			"--out writes the profile as JSON to DIR/" + calibrateProfileFile + " (bench agentic --profile reads it).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.parsed(cmd.Flags())
			if err := o.validate(); err != nil {
				return err
			}
			return untilSignal(cmd, func(ctx context.Context) error {
				_, err := runBenchCalibrate(ctx, o, cmd.OutOrStdout())
				return err
			})
		},
	}
	f := cmd.Flags()
	o.engineFlags.register(f, benchCalibrateEngineFlags)
	o.commandFlags.register(f, benchCalibrateCommandFlags)
	f.IntVar(&o.requests, "requests", o.requests, "requests in each of the training and held-out sets (held-out traffic: --seed + 1000003)")
	return cmd
}

// validate checks the flags that do not need the model and resolves
// --device to the runner.
func (o *benchCalibrateOptions) validate() error {
	const cmd = "bench calibrate"
	if o.simulated() {
		o.runner = simDevice
	} else {
		sel, err := o.dev.validate(cmd, false)
		if err != nil {
			return err
		}
		if sel.Backend == cuda.BackendAuto {
			return fmt.Errorf("%s: --device %s: name the runner to calibrate: cpu, cuda, cuda:N or sim", cmd, o.dev.device)
		}
		o.runner, o.gpu = sel.Backend.String(), sel
	}
	switch {
	case o.runner == "cuda" && o.set["workers"]:
		return fmt.Errorf("%s: --workers %d: applies to --device cpu", cmd, o.workers)
	case o.runner == simDevice && o.set["model"]:
		return fmt.Errorf("%s: --model %q: applies to --device cpu or cuda (sim calibrates its built-in profile)", cmd, o.model)
	case o.runner == simDevice && o.set["workers"]:
		return fmt.Errorf("%s: --workers %d: applies to --device cpu", cmd, o.workers)
	case o.runner != simDevice && o.set["profile"]:
		return fmt.Errorf("%s: --profile %q: applies to --device sim (a real runner is measured, not priced)", cmd, o.profile)
	}
	if err := o.engineFlags.validate(cmd); err != nil {
		return err
	}
	if o.requests < 8 {
		return fmt.Errorf("%s: --requests %d: must be >= 8 (every pass needs one)", cmd, o.requests)
	}
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return fmt.Errorf("%s: --out %q: %w", cmd, o.out, err)
		}
	}
	return nil
}

// simTruth is the profile --device sim must recover (--profile): device
// time only, which is what a recorder sees.
func (o *benchCalibrateOptions) simTruth() (sim.Linear, error) {
	l, _, err := o.simProfile(false)
	if err != nil {
		return sim.Linear{}, fmt.Errorf("bench calibrate: %w", err)
	}
	l.HostFixed, l.HostPerSeq = 0, 0
	return l, nil
}

// runBenchCalibrate calibrates, prints the table to out and writes --out.
func runBenchCalibrate(ctx context.Context, o benchCalibrateOptions, out io.Writer) (calibrate.Profile, error) {
	cfg := calibrate.Config{MaxBatchSize: o.maxBatchSize, MaxBatchTokens: calibrateMaxBatchTokens, BlockSize: calibrateBlockSize,
		Requests: o.requests, Seed: o.seed, CascadeMinBlocks: o.cascadeMin}
	var name string
	workers := 0
	var truth *sim.Linear
	switch o.runner {
	case "sim":
		l, err := o.simTruth()
		if err != nil {
			return calibrate.Profile{}, err
		}
		truth, name = &l, "sim-"+filepath.Base(o.profile)
		cfg.Device, cfg.MaxContext = calibrate.Sim(l, calibrateSimContext), calibrateSimContext
	default:
		backend := cuda.BackendCPU
		if o.runner == "cuda" {
			backend = cuda.BackendCUDA
		}
		m, err := model.LoadLlama(o.model, o.llamaOptions(backend))
		if err != nil {
			return calibrate.Profile{}, fmt.Errorf("bench calibrate: --model: %w", err) // the error names the file
		}
		defer m.Close()
		workers = o.workers
		if workers == 0 {
			workers = runtime.GOMAXPROCS(0)
		}
		name = filepath.Base(o.model)
		kvType, err := o.kvType(backend)
		if err != nil {
			return calibrate.Profile{}, fmt.Errorf("bench calibrate: %w", err)
		}
		cfg.Device, cfg.MaxContext = calibrate.CPU(m, workers, kvType), m.MaxContext()
		if o.runner == "cuda" {
			workers = 0
			cfg.Device, cfg.Warmup = calibrate.CUDA(m, o.gpu.Index, kvType), calibrateCUDAWarmup
		}
	}
	what := name
	switch o.runner {
	case "cpu":
		what = fmt.Sprintf("%s, workers %d", name, workers)
	case "cuda":
		what = fmt.Sprintf("%s, GPU %d", name, o.gpu.Index)
	}
	if _, err := fmt.Fprintf(out, "calibrating the %s runner (%s): max batch %d, %d requests per set, seed %d\n",
		o.runner, what, o.maxBatchSize, o.requests, o.seed); err != nil {
		return calibrate.Profile{}, err
	}
	res, err := calibrate.Run(ctx, cfg)
	if err != nil {
		return calibrate.Profile{}, fmt.Errorf("bench calibrate: %w", err)
	}
	p := res.Profile(name, o.runner, workers)
	p.MaxBatchSize, p.Requests, p.Seed = o.maxBatchSize, o.requests, o.seed
	if err := printCalibration(out, res, truth, o.seed); err != nil {
		return p, err
	}
	if o.out != "" {
		path := filepath.Join(o.out, calibrateProfileFile)
		if err := p.WriteProfile(path); err != nil {
			return p, fmt.Errorf("bench calibrate: --out %q: %w", o.out, err)
		}
		if _, err := fmt.Fprintf(out, "profile written to %s\n", path); err != nil {
			return p, err
		}
	}
	return p, nil
}

// printCalibration prints the fitted coefficients (µs), the held-out
// errors and the goal line; truth, when known, is printed beside the fit.
func printCalibration(out io.Writer, res calibrate.Result, truth *sim.Linear, seed uint64) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "\nfitted device model (least squares over %d training steps; R² %.4f, RMS %.2f µs):\n",
		len(res.Train), res.Fit.R2, res.Fit.RMS*1e6)
	header := "coefficient\tfitted µs\t"
	if truth != nil {
		header += "true µs\t"
	}
	fmt.Fprintln(tw, header)
	coef := func(l sim.Linear) []float64 {
		return []float64{l.Fixed, l.PerPrefillToken, l.PerDecodeSeq, l.PerContextToken, l.PerPrefillPair, l.PerSharedPair}
	}
	fit := coef(res.Linear)
	var want []float64
	if truth != nil {
		want = coef(*truth)
	}
	for i, n := range []string{"fixed", "per prefill token", "per decode seq", "per context token", "per prefill pair", "per shared pair"} {
		line := fmt.Sprintf("%s\t%.4f\t", n, fit[i]*1e6)
		if truth != nil {
			line += fmt.Sprintf("%.4f\t", want[i]*1e6)
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nheld-out error |predicted − measured| / measured (traffic seed %d, never fitted):\n", seed+calibrate.HeldOutSeedOffset)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "steps\tcount\tmedian\tp90\t")
	for _, r := range []struct {
		name string
		e    calibrate.Errors
	}{{"all held-out", res.HeldOutAll}, {"with prefill", res.HeldOutPrefill}, {"decode-only", res.HeldOutDecode}, {"training (in-sample)", res.TrainAll},
		{"noise floor (same shape)", res.Noise}} {
		fmt.Fprintf(tw, "%s\t%d\t%.2f%%\t%.2f%%\t\n", r.name, r.e.Samples, 100*r.e.Median, 100*r.e.P90)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "\nmedian step-time error %.2f%% (goal ≤ %.0f%%); measurement noise floor %.2f%%\n"+
		"  (noise floor: decode steps of the same shape against their group's median; no model of the shape predicts better)\n",
		100*res.HeldOutAll.Median, 100*calibrateGoal, 100*res.Noise.Median)
	return err
}
