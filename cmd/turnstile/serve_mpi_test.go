package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/testwait"
)

// serveMPIArgsEnv carries the serve command line to TestServeMPIChild, the
// entry point every rank of a test's mpirun runs.
const serveMPIArgsEnv = "TURNSTILE_SERVE_MPI_ARGS"

// TestServeMPIChild is one rank of a serve launched by mpiServe; it does
// nothing in a normal test run.
func TestServeMPIChild(t *testing.T) {
	args := os.Getenv(serveMPIArgsEnv)
	if args == "" {
		t.Skip("only runs as a rank under mpirun (mpiServe)")
	}
	cmd := newRootCmd()
	cmd.SetArgs(strings.Fields(args))
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "turnstile:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// mpiJob is a `mpirun -np N turnstile serve --dp N` started by a test.
type mpiJob struct {
	cmd  *exec.Cmd
	url  string
	pids []int // each rank's process, from the world listing
	mu   sync.Mutex
	out  strings.Builder
	done chan error
}

func (j *mpiJob) output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.String()
}

var (
	servingRe = regexp.MustCompile(`msg=serving addr=(http://\S+)`)
	worldRe   = regexp.MustCompile(`(?m)^    rank (\d+) +host \S+, pid (\d+), (.*)$`)
)

// mpiServe launches np ranks of serve (extra flags appended) under mpirun
// and waits until process 0 serves and its world listing is in; the job is
// killed at the end of the test if still running. It skips without mpirun
// (fails under CI=true).
func mpiServe(t *testing.T, np int, extra ...string) *mpiJob {
	t.Helper()
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: mpirun not on PATH (%v): install openmpi-bin (make deps does)", err)
		}
		t.Skipf("mpirun not on PATH (%v): install openmpi-bin (make deps does)", err)
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	args := append([]string{"serve", "--dp", strconv.Itoa(np), "--device", "cpu", "--port", "0", "--max-batch-size", "2",
		"--kv-cache-tokens", "4096", "--workers", "1", "--verify-placement"}, extra...)
	j := &mpiJob{done: make(chan error, 1)}
	j.cmd = exec.Command(mpirun, "-np", strconv.Itoa(np), "--oversubscribe", "--bind-to", "none", "-x", serveMPIArgsEnv,
		exe, "-test.run=^TestServeMPIChild$", "-test.count=1")
	j.cmd.Env = append(os.Environ(), serveMPIArgsEnv+"="+strings.Join(args, " "),
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_btl=self,vader")
	pr, pw := io.Pipe()
	j.cmd.Stdout, j.cmd.Stderr = pw, pw
	require.NoError(t, j.cmd.Start())
	scanned := make(chan struct{})
	go func() {
		err := j.cmd.Wait()
		_ = pw.Close()
		// The scanner may still hold the last lines it read: done means
		// they are in j.out (stop reads process 0's last one).
		<-scanned
		j.done <- err
	}()
	t.Cleanup(func() {
		_ = j.cmd.Process.Kill()
		for _, p := range j.pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	// Process 0 prints the world (stdout) before it logs that it serves
	// (stderr), but mpirun forwards each stream on its own, so the serving
	// line can come first: wait for it and for every rank's line.
	served := make(chan string, 1)
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		url, ranks := "", 0
		for sc.Scan() {
			line := sc.Text()
			j.mu.Lock()
			j.out.WriteString(line + "\n")
			j.mu.Unlock()
			if m := servingRe.FindStringSubmatch(line); m != nil {
				url = m[1]
			}
			if worldRe.MatchString(line) {
				ranks++
			}
			if url != "" && ranks == np {
				served <- url
				url = ""
			}
		}
		_, _ = io.Copy(io.Discard, pr) // after a line too long to scan: mpirun must not block
	}()
	select {
	case j.url = <-served:
	case err := <-j.done:
		t.Fatalf("mpirun exited before serving (%v):\n%s", err, j.output())
	case <-time.After(testwait.Bound):
		t.Fatalf("no rank served within %v:\n%s", testwait.Bound, j.output())
	}
	for _, m := range worldRe.FindAllStringSubmatch(j.output(), -1) {
		pid, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		j.pids = append(j.pids, pid)
	}
	require.Len(t, j.pids, np, "the world lists every rank:\n%s", j.output())
	return j
}

// stop sends mpirun SIGTERM (it forwards it to every rank) and waits.
// mpirun itself exits 1 after forwarding a signal, however its ranks end,
// so the ranks' clean exit is read from process 0's log.
func (j *mpiJob) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, j.cmd.Process.Signal(syscall.SIGTERM))
	testwait.Recv(t, j.done, "mpirun to exit after SIGTERM")
	require.Contains(t, j.output(), "msg=stopped", "process 0 drained and stopped:\n%s", j.output())
	require.NotContains(t, j.output(), "rank failed", j.output())
}

// running reports whether process pid exists and is not a zombie (a
// killed child waiting to be reaped is gone for the test's purpose).
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

// complete posts a greedy completion and returns its text and token count.
func complete(t *testing.T, url, prompt string, n int) (string, int) {
	t.Helper()
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0}`, prompt, n)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var r struct {
		Choices []struct{ Text string }
		Usage   struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &r))
	require.Len(t, r.Choices, 1)
	return r.Choices[0].Text, r.Usage.CompletionTokens
}

// generated is `turnstile generate`'s greedy continuation of prompt.
func generated(t *testing.T, prompt string, n int) string {
	t.Helper()
	cmd := newRootCmd()
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"generate", "--device", "cpu", "--prompt", prompt, "-n", strconv.Itoa(n)})
	require.NoError(t, cmd.Execute())
	text := strings.TrimRight(out.String(), "\n")
	i := strings.LastIndex(text, prompt)
	require.GreaterOrEqual(t, i, 0, "generate prints the prompt and its continuation: %q", text)
	return text[i+len(prompt):]
}

var mpiPrompts = []string{"Once upon a time", "The cat", "Lily went", "Tom had a dog", "One day, a bird", "The sun was"}

// TestServeMPI: `mpirun -np N turnstile serve --dp N` on stories260K, one
// rank per process and the MLP sharded across them, answers greedy
// completions exactly as `turnstile generate` continues the same prompts,
// sequentially and with every prompt in flight at once; process 0's
// /metrics carries every rank; SIGTERM drains and stops every rank.
func TestServeMPI(t *testing.T) {
	const n = 24
	want := make([]string, len(mpiPrompts))
	for i, p := range mpiPrompts {
		want[i] = generated(t, p, n)
	}
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			j := mpiServe(t, np)
			world := j.output()
			for r := range np {
				require.Regexp(t, fmt.Sprintf(`rank %d +host .* MLP shard %d of %d: `, r, r+1, np), world)
			}
			for i, p := range mpiPrompts[:2] {
				got, toks := complete(t, j.url, p, n)
				require.Equal(t, want[i], got, "prompt %q", p)
				require.Equal(t, n, toks)
			}
			var wg sync.WaitGroup
			got := make([]string, len(mpiPrompts))
			for i, p := range mpiPrompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], _ = complete(t, j.url, p, n)
				}()
			}
			testwait.Within(t, "every concurrent completion", func() struct{} { wg.Wait(); return struct{}{} })
			require.Equal(t, want, got, "concurrent greedy completions match generate")

			resp, err := http.Get(j.url + "/metrics")
			require.NoError(t, err)
			metrics, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			total := 0
			for r := range np {
				re := regexp.MustCompile(fmt.Sprintf(`turnstile_engine_requests_submitted_total\{rank="%d"\} (\d+)`, r))
				m := re.FindStringSubmatch(string(metrics))
				require.NotNil(t, m, "rank %d's series reach process 0's /metrics", r)
				v, _ := strconv.Atoi(m[1])
				total += v
			}
			// A process sends its ranks' metrics with every request's final
			// output, and process 0 publishes them before it delivers that
			// output, so once every answer is in, /metrics counts every
			// request where it ran.
			require.Equal(t, 2+len(mpiPrompts), total, "every request counted on exactly one rank:\n%s", metrics)
			j.stop(t)
		})
	}
}

// TestServeMPIKillRank: kill -9 of one rank during load takes the whole
// job down, never a hang: mpirun and every rank exit, and the client's
// stream ends (closed or an error) instead of waiting forever.
func TestServeMPIKillRank(t *testing.T) {
	j := mpiServe(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound)
	defer cancel()
	var wg sync.WaitGroup
	ended := make(chan time.Time, 4)
	for i := range 4 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.url+"/v1/completions",
			strings.NewReader(fmt.Sprintf(`{"prompt":"Once %d","max_tokens":1500,"ignore_eos":true,"temperature":0,"stream":true}`, i)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		first := make([]byte, 6)
		_, err = io.ReadFull(resp.Body, first)
		require.NoError(t, err, "the stream started")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(io.Discard, resp.Body) // ends when the job is gone
			resp.Body.Close()
			ended <- time.Now()
		}()
	}
	killed := time.Now()
	require.NoError(t, syscall.Kill(j.pids[1], syscall.SIGKILL))
	err := testwait.Recv(t, j.done, "mpirun to exit after a rank was killed")
	require.Error(t, err, "the job fails")
	gone := time.Since(killed)
	testwait.Within(t, "every client stream to end", func() struct{} { wg.Wait(); return struct{}{} })
	last := killed
	for range 4 {
		if e := <-ended; e.After(last) {
			last = e
		}
	}
	for _, p := range j.pids {
		testwait.For(t, fmt.Sprintf("rank process %d to be gone", p), func() bool { return !running(p) })
	}
	t.Logf("kill -9 of rank 1: mpirun exited after %v, the last client stream ended after %v", gone.Round(time.Millisecond), last.Sub(killed).Round(time.Millisecond))
}
