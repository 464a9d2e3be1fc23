package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/internal/testwait"
	"github.com/turnstile-llm/turnstile/policy"
)

func TestServeFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"dp 0", []string{"--dp", "0"}, "serve: --dp 0: must be in [1, 64]"},
		{"dp 65", []string{"--dp", "65"}, "serve: --dp 65: must be in [1, 64]"},
		{"admission D", []string{"--admission", "D"}, `serve: --admission "D": must be tokens, blocks or pausing`},
		{"admission buffer", []string{"--admission-buffer", "-1"}, "serve: --admission-buffer -1: policy: buffer -1 tokens: must be ≥ 0"},
		{"admission reserve", []string{"--admission", "B", "--admission-reserve", "-5"}, "serve: --admission-reserve -5: policy: reserve -5 tokens: must be ≥ 0"},
		{"acting weight", []string{"--acting-token-weight", "1.5"}, "serve: --acting-token-weight 1.5: policy: acting token weight 1.5: must be in [0, 1]"},
		{"pause threshold", []string{"--pause-threshold", "0"}, "serve: --pause-threshold 0: policy: pause threshold 0: must be in (0, 1]"},
		{"pause target", []string{"--admission", "C", "--pause-target", "0.99"}, "serve: --pause-target 0.99: policy: pause target 0.99 exceeds pause threshold 0.95"},
		{"resume hysteresis", []string{"--resume-hysteresis", "1"}, "serve: --resume-hysteresis 1: policy: resume hysteresis 1 must be below pause threshold 1"},
		{"aging tau", []string{"--aging-tau", "-1s"}, "serve: --aging-tau -1s: policy: aging tau -1s: must be ≥ 0"},
		{"forced resume", []string{"--forced-resume", "0s"}, "serve: --forced-resume 0s: policy: forced resume timeout 0s: must be > 0"},
		{"program lease", []string{"--program-lease", "-1m"}, "serve: --program-lease -1m0s: policy: program lease -1m0s: must be > 0"},
		{"block size 3", []string{"--block-size", "3"}, "serve: --block-size 3: must be a power of two"},
		{"block size 512", []string{"--block-size", "512"}, "serve: --block-size 512"},
		{"batch 0", []string{"--max-batch-size", "0"}, "serve: --max-batch-size 0"},
		{"batched tokens 0", []string{"--max-num-batched-tokens", "0"}, "serve: --max-num-batched-tokens 0"},
		{"port", []string{"--port", "70000"}, "serve: --port 70000"},
		{"dp watchdog", []string{"--dp-watchdog", "-1s"}, "serve: --dp-watchdog -1s: must be >= 0"},
		{"kv and gpu", []string{"--kv-cache-tokens", "4096", "--gpu-memory-fraction", "0.9"}, "serve: --kv-cache-tokens and --gpu-memory-fraction are exclusive"},
		{"gpu on explicit CPU", []string{"--device", "cpu", "--gpu-memory-fraction", "0.5"}, "serve: --gpu-memory-fraction 0.5: applies to the CUDA runner, but --device cpu selects the CPU"},
		{"gpu fraction 0", []string{"--gpu-memory-fraction", "0"}, "serve: --gpu-memory-fraction 0: must be in (0, 1]"},
		{"gpu fraction 1.5", []string{"--gpu-memory-fraction", "1.5"}, "serve: --gpu-memory-fraction 1.5: must be in (0, 1]"},
		{"gpu fraction NaN", []string{"--gpu-memory-fraction", "NaN"}, "serve: --gpu-memory-fraction NaN: must be in (0, 1]"},
		{"device tpu", []string{"--device", "tpu"}, `serve: --device "tpu": want auto, cpu, cuda or cuda:N`},
		{"device cuda:x", []string{"--device", "cuda:x"}, `serve: --device "cuda:x": the device index after cuda: must be a non-negative integer`},
		{"device cuda:-1", []string{"--device", "cuda:-1"}, `serve: --device "cuda:-1"`},
		{"log format", []string{"--log-format", "xml"}, `--log-format "xml"`},
		{"log level", []string{"--log-level", "loud"}, `--log-level "loud"`},
		{"empty key", []string{"--api-key", ""}, "--api-key #1"},
		{"max program queue", []string{"--max-program-queue", "-1"}, "serve: --max-program-queue -1: must be >= 0"},
		{"max active programs", []string{"--max-active-programs", "0"}, "serve: --max-active-programs 0: policy: max active programs 0: must be > 0"},
		{"read timeout", []string{"--read-timeout", "0s"}, "serve: --read-timeout 0s: must be > 0"},
		{"write timeout", []string{"--write-timeout", "-1s"}, "serve: --write-timeout -1s: must be > 0"},
		{"idle timeout", []string{"--idle-timeout", "0s"}, "serve: --idle-timeout 0s: must be > 0"},
		{"max connections", []string{"--max-connections", "0"}, "serve: --max-connections 0: must be >= 1"},
		{"responses max", []string{"--responses-max", "0"}, "serve: --responses-max 0, --responses-max-bytes 67108864 and --responses-ttl 1h0m0s: must be > 0"},
		{"responses bytes", []string{"--responses-max-bytes", "-1"}, "--responses-max-bytes -1"},
		{"responses ttl", []string{"--responses-ttl", "0s"}, "--responses-ttl 0s"},
		{"key file missing", []string{"--api-key-file", "/no/such/keys"}, "serve: --api-key-file: open /no/such/keys"},
		{"missing model", []string{"--model", "/no/such.gguf", "--port", "0"}, "/no/such.gguf"},
		{"kv below context", []string{"--kv-cache-tokens", "100", "--port", "0"}, "serve: --kv-cache-tokens 112 is less than the model context of 2048 tokens"},
		{"queue below batch", []string{"--max-queue", "2", "--max-batch-size", "8", "--port", "0"}, "--max-queue 2 is less than --max-batch-size 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, append([]string{"serve"}, tc.args...)...)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestServeProgramPolicy: the arm's defaults, overridden by the flags given;
// at most --max-batch-size (defaultServeOptions: 4) ACTIVE programs.
func TestServeProgramPolicy(t *testing.T) {
	for _, tc := range []struct {
		admission string
		set       map[string]bool
		check     func(t *testing.T, c *policy.Config)
	}{
		{"none", nil, func(t *testing.T, c *policy.Config) { require.Nil(t, c) }},
		{"", nil, func(t *testing.T, c *policy.Config) {
			require.Equal(t, policy.DefaultConfig(policy.BlockAccounting, 4), *c, "default: blocks with its defaults")
		}},
		{"c", map[string]bool{"pause-target": true, "program-lease": true}, func(t *testing.T, c *policy.Config) {
			want := policy.DefaultConfig(policy.PausingAccounting, 4)
			want.PauseTarget, want.Lease = 0.5, time.Minute
			require.Equal(t, want, *c, "pausing's thresholds, the target and lease given")
		}},
		{"B", map[string]bool{"admission-reserve": true, "aging-tau": true}, func(t *testing.T, c *policy.Config) {
			want := policy.DefaultConfig(policy.BlockAccounting, 4)
			want.Reserve, want.AgingTau = 64, 0
			require.Equal(t, want, *c)
		}},
	} {
		t.Run(tc.admission, func(t *testing.T) {
			o := defaultServeOptions()
			o.admission = tc.admission
			o.programs = programFlags{reserve: 64, pauseTarget: 0.5, lease: time.Minute, set: tc.set}
			require.NoError(t, o.validate())
			c, err := o.programPolicy()
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

// serveInProcess runs runServe on a free port until the returned stop is
// called; stop returns runServe's error.
func serveInProcess(t *testing.T, o serveOptions) (url string, out *bytes.Buffer, stop func() error) {
	t.Helper()
	require.NoError(t, o.validate())
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	out = &bytes.Buffer{}
	go func() { done <- runServe(ctx, o, out, io.Discard, func(a string) { addr <- a }) }()
	select {
	case a := <-addr:
		url = "http://" + a
	case err := <-done:
		t.Fatalf("serve ended before serving: %v", err)
	}
	return url, out, func() error { cancel(); return <-done }
}

func defaultServeOptions() serveOptions {
	o := newServeOptions()
	o.port, o.maxBatchSize, o.maxBatched, o.kvTokens, o.drain, o.workers = 0, 4, 256, 8192, time.Minute, 1
	o.dev = deviceOptions{device: "cpu", gpuFraction: defaultGPUMemoryFraction}
	return o
}

// TestServeGreedyMatchesGenerate: a greedy completion over HTTP is exactly
// what `turnstile generate` prints for the same prompt.
func TestServeGreedyMatchesGenerate(t *testing.T) {
	url, out, stop := serveInProcess(t, defaultServeOptions())
	require.Contains(t, out.String(), "\n  device       cpu\n")
	require.NotContains(t, out.String(), "GPU memory")
	require.Contains(t, out.String(), "seats        8 = max-batch-size 4 + overlap headroom 4")
	// stories260K: 5 layers × K and V × 8192 positions × 4 kv heads × 8 dims × 2 bytes (auto: f16).
	require.Contains(t, out.String(), "KV cache     512 blocks × 16 tokens = 8192 tokens, f16, 5.0 MiB")
	require.Contains(t, out.String(), "queue bound  32 requests")
	require.Contains(t, out.String(), "admission    blocks for requests with a program id: distinct blocks + reserve 512 per program, of 8192 tokens; at most 4 ACTIVE programs")

	resp, err := http.Get(url + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	for _, prompt := range []string{"Once upon a time", "The dog"} {
		requireCompletionMatchesGenerate(t, url, prompt, 48)
	}
	require.NoError(t, stop())
}

// requireCompletionMatchesGenerate: a greedy completion of n tokens over
// HTTP is exactly what `turnstile generate` prints for the same prompt.
func requireCompletionMatchesGenerate(t *testing.T, url, prompt string, n int) {
	t.Helper()
	var gen bytes.Buffer
	g := generateOptions{engineFlags: defaultEngineFlags(), prompt: prompt, n: n, topP: 1}
	g.workers, g.dev = 1, deviceOptions{device: "cpu"}
	require.NoError(t, runGenerate(&gen, io.Discard, g))
	body, _ := json.Marshal(map[string]any{"model": "stories260K", "prompt": prompt, "max_tokens": n, "temperature": 0})
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var c struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&c))
	resp.Body.Close()
	require.Equal(t, gen.String(), prompt+c.Choices[0].Text+"\n")
}

// TestServeSIGTERM runs the CLI in a child process (this test binary), sends
// SIGTERM while a stream is in flight and checks that the stream finishes
// and the process exits 0.
func TestServeSIGTERM(t *testing.T) {
	if os.Getenv("TURNSTILE_SERVE_CHILD") == "1" {
		cmd := newRootCmd()
		cmd.SetArgs([]string{"serve", "--device", "cpu", "--port", "0", "--max-batch-size", "2", "--kv-cache-tokens", "4096", "--workers", "1"})
		if err := cmd.Execute(); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestServeSIGTERM$")
	child.Env = append(os.Environ(), "TURNSTILE_SERVE_CHILD=1")
	stderr, err := child.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	defer func() { _ = child.Process.Kill() }()
	logs := bufio.NewScanner(stderr)
	addrRe := regexp.MustCompile(`msg=serving addr=(http://\S+)`)
	var url string
	for url == "" && logs.Scan() {
		if m := addrRe.FindStringSubmatch(logs.Text()); m != nil {
			url = m[1]
		}
	}
	require.NotEmpty(t, url, "the child never logged its address")
	var rest strings.Builder
	logDone := make(chan struct{})
	go func() {
		for logs.Scan() {
			rest.WriteString(logs.Text() + "\n")
		}
		close(logDone)
	}()

	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Once","max_tokens":300,"ignore_eos":true,"temperature":0,"stream":true}`))
	require.NoError(t, err)
	first := make([]byte, 6)
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err)
	require.Equal(t, "data: ", string(first))

	require.NoError(t, child.Process.Signal(syscall.SIGTERM))
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), `"finish_reason":"length"`, "the stream in flight finished")
	require.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"))
	require.NoError(t, child.Wait(), "exit status 0")
	<-logDone
	require.Contains(t, rest.String(), "msg=draining")
	require.Contains(t, rest.String(), "msg=stopped")
}

// TestServeChargeRetiring: the experiment flag reaches the engine's sizing
// report, so a BASE run cannot be mistaken for a FIX run from its logs.
func TestServeChargeRetiring(t *testing.T) {
	o := defaultServeOptions()
	o.ablation.Engine.ChargeRetiring = true
	_, out, stop := serveInProcess(t, o)
	require.NoError(t, stop())
	require.Contains(t, out.String(), "retiring     CHARGED")

	_, out, stop = serveInProcess(t, defaultServeOptions())
	require.NoError(t, stop())
	require.NotContains(t, out.String(), "CHARGED")
}

// TestServeDP: with --dp 2 requests are routed over two ranks (each its own
// engine, KV cache and seats); greedy completions equal `turnstile
// generate`'s, /metrics counts both ranks, and shutdown leaves every rank's
// accounting exact (runServe checks it).
func TestServeDP(t *testing.T) {
	o := defaultServeOptions()
	o.dp = 2
	url, out, stop := serveInProcess(t, o)
	require.Contains(t, out.String(), "ranks        2 attention-DP ranks")
	prompts := []string{"Once upon a time", "The dog", "Lily went to the park", "A big red ball"}
	for _, prompt := range prompts {
		requireCompletionMatchesGenerate(t, url, prompt, 24)
	}
	// A bad request is refused by the rank it was routed to, as by one engine.
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","max_tokens":0}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	resp, err = http.Get(url + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	for _, rank := range []string{"0", "1"} {
		require.Contains(t, string(metrics), "turnstile_kv_blocks_total{rank=\""+rank+"\"} 512", "each rank its own 512 blocks")
	}
	require.NotContains(t, string(metrics), "rank=\"2\"")
	require.NoError(t, stop())
}

// TestServeUnderMPILauncher: under mpirun, --dp must equal the world size
// (both named); a matching launch is recorded, and a world of more than one
// process runs one rank per process.
func TestServeUnderMPILauncher(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		dp   int
		want string
	}{
		{"not launched", nil, 2, ""},
		{"world matches", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, 2, ""},
		{"world of one", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}, 1, ""},
		{"world differs", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}, 2,
			"--dp 2 but the MPI world has 4 ranks"},
		{"malformed rank", map[string]string{"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"}, 2, "OMPI_COMM_WORLD_RANK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newServeOptions()
			o.dp = tc.dp
			o.getenv = func(k string) string { return tc.env[k] }
			err := o.checkLaunch()
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, tc.env != nil, o.launch.Launched)
				require.Equal(t, o.launch.Launched && o.launch.Size > 1, o.acrossProcesses())
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestServeProgramsRunSideBySide: with the default program admission, a
// second program's request runs while the first program is between turns
// (up to --max-batch-size ACTIVE programs, as the sizing report says),
// instead of waiting behind it until its lease or a forced resume.
func TestServeProgramsRunSideBySide(t *testing.T) {
	url, out, stop := serveInProcess(t, defaultServeOptions())
	defer func() { require.NoError(t, stop()) }()
	require.Contains(t, out.String(), "at most 4 ACTIVE programs")
	for _, id := range []string{"agent-1", "agent-2", "agent-1"} {
		req, err := http.NewRequestWithContext(testwait.Ctx(t), http.MethodPost, url+"/v1/completions",
			strings.NewReader(`{"prompt":"Once upon a time","max_tokens":8,"temperature":0}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Program-Id", id)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "program %s", id)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "program %s: %s", id, body)
	}
}

// TestServeAPIKeySources: keys come from --api-key, --api-key-file (one per
// line, comments and blank lines skipped) and TURNSTILE_API_KEY, so they
// need not be on the command line where ps shows them; a bad key names its
// source.
func TestServeAPIKeySources(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	good := write("keys", "# tenants\nk-file-1\n\n  k-file-2  \n")
	for _, tc := range []struct {
		name, file, env string
		want            []string
		wantErr         string
	}{
		{"flag only", "", "", []string{"k-flag"}, ""},
		{"file and env", good, "k-env", []string{"k-flag", "k-file-1", "k-file-2", "k-env"}, ""},
		{"bad line", write("bad", "ok\nbad key\n"), "", nil, "line 2: an API key must be non-empty without whitespace"},
		{"empty file", write("empty", "# none\n\n"), "", nil, "no keys in it"},
		{"bad env", "", "a b", nil, "TURNSTILE_API_KEY: an API key must be non-empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultServeOptions()
			o.apiKeys, o.apiKeyFile = []string{"k-flag"}, tc.file
			o.getenv = func(k string) string {
				if k == apiKeyEnv {
					return tc.env
				}
				return ""
			}
			err := o.addAPIKeys()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, o.apiKeys)
		})
	}

	// The environment's key is served.
	o := defaultServeOptions()
	o.getenv = func(k string) string {
		if k == apiKeyEnv {
			return "k-env"
		}
		return ""
	}
	require.NoError(t, o.addAPIKeys())
	url, _, stop := serveInProcess(t, o)
	defer func() { require.NoError(t, stop()) }()
	for key, want := range map[string]int{"": http.StatusUnauthorized, "k-env": http.StatusOK} {
		req, err := http.NewRequestWithContext(testwait.Ctx(t), http.MethodPost, url+"/v1/completions",
			strings.NewReader(`{"prompt":"Once","max_tokens":2}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "key %q", key)
	}
}

// TestServeBannerStatesBounds: the start-up report states the ACTIVE cap in
// force (--max-active-programs), the program turns' own bound and the
// client bounds.
func TestServeBannerStatesBounds(t *testing.T) {
	o := defaultServeOptions()
	o.programs.maxActive, o.programs.set = 3, map[string]bool{"max-active-programs": true}
	o.maxProgramQueue, o.maxConnections = 7, 50
	_, out, stop := serveInProcess(t, o)
	require.NoError(t, stop())
	require.Contains(t, out.String(), "at most 3 ACTIVE programs")
	require.Contains(t, out.String(), "queue bound  32 requests in flight (429 beyond); program turns: 7 of their own")
	require.Contains(t, out.String(), "clients      read timeout 30s, write timeout 30s, idle timeout 1m0s; at most 50 connections")
}

// TestServeSizesForTheCores: without --max-batch-size, serve on the CPU runs
// cpuSeqsPerCore sequences per core (within its bounds), a step budget that
// fits every row's token, and a KV cache of that many full contexts;
// given flags win.
func TestServeSizesForTheCores(t *testing.T) {
	for _, tc := range []struct {
		name              string
		workers, set      int // set: --max-batch-size given (0: not)
		batched           int
		wantBatch, wantTk int
	}{
		{"one core", 1, 0, 0, 8, 512},
		{"two cores", 2, 0, 0, 16, 512},
		{"many cores", 100, 0, 0, 64, 512},
		{"given", 2, 4, 0, 4, 512},
		{"budget follows the batch", 100, 0, 16, 64, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newServeOptions()
			o.autoSize, o.workers = true, tc.workers
			o.set = map[string]bool{}
			if tc.set > 0 {
				o.maxBatchSize, o.set["max-batch-size"] = tc.set, true
			}
			if tc.batched > 0 {
				o.maxBatched = tc.batched
			}
			o.servingDefaults(cuda.Selection{Backend: cuda.BackendCPU})
			require.Equal(t, tc.wantBatch, o.maxBatchSize)
			require.Equal(t, tc.wantTk, o.maxBatched)
			sz, err := o.resolve(2048, 512, cuda.Selection{Backend: cuda.BackendCPU})
			require.NoError(t, err)
			require.Equal(t, tc.wantBatch*2048, sz.kvTokens, "a full context per batch row")
		})
	}
	// Options filled by a caller (not the command line) keep their values.
	o := newServeOptions()
	o.maxBatchSize = 3
	o.servingDefaults(cuda.Selection{Backend: cuda.BackendCPU})
	require.Equal(t, 3, o.maxBatchSize)
}
