package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// openaiNodeVersion is the pinned `openai` npm package: the newest release
// line that still runs on Node 20 (7.x requires Node >= 22).
const openaiNodeVersion = "6.49.0"

// openaiNode returns a directory holding node_modules/openai at the pinned
// version.
func openaiNode(t *testing.T) string {
	t.Helper()
	return nodePackages(t, "openai@"+openaiNodeVersion)
}

// nodePackages returns a directory whose node_modules holds pkgs (pinned
// "name@version" specs). Each set is installed once per machine into the
// user cache, in a directory named by the set (a fresh temporary directory
// renamed into place, marked complete by a file listing the set), so
// repeated test runs do not reinstall it. Without npm the test is skipped.
func nodePackages(t *testing.T, pkgs ...string) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed; the Node.js client tests need Node.js and npm")
	}
	set := slices.Sorted(slices.Values(pkgs))
	sum := sha256.Sum256([]byte(strings.Join(set, "\n")))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "turnstile", "node-"+hex.EncodeToString(sum[:8]))
	const marker = "turnstile-packages.txt"
	if _, err := os.Stat(filepath.Join(dir, marker)); err == nil {
		return dir
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(dir), 0o755))
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, append([]string{"install", "--no-audit", "--no-fund", "--no-save"}, set...)...)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm install %s: %s", strings.Join(set, " "), out)
	require.NoError(t, os.WriteFile(filepath.Join(tmp, marker), []byte(strings.Join(set, "\n")+"\n"), 0o644))
	if err := os.Rename(tmp, dir); err != nil {
		// Another test process installed it meanwhile.
		_, statErr := os.Stat(filepath.Join(dir, marker))
		require.NoError(t, statErr, "installing into %s: %v", dir, err)
	}
	return dir
}

// runNode runs script (a file under testdata, copied with the .mjs files
// beside it next to dir's node_modules, where Node resolves packages from)
// with env added to the environment, and returns its standard output; a
// non-zero exit fails the test with its standard error.
func runNode(t *testing.T, dir, script string, timeout time.Duration, env ...string) []byte {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "npm is installed but node is not")
	run := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(run, "node_modules")))
	mods, err := filepath.Glob(filepath.Join(filepath.Dir(script), "*.mjs"))
	require.NoError(t, err)
	for _, m := range mods {
		b, err := os.ReadFile(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(run, filepath.Base(m)), b, 0o644))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Base(script))
	cmd.Dir = run
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s: stdout %s\nstderr %s", script, stdout.String(), stderr.String())
	return stdout.Bytes()
}

// TestOpenAINodeClient drives the server with the official OpenAI Node.js
// client: models, completions and chat, whole and streamed, and the errors
// the client maps to its exception classes.
func TestOpenAINodeClient(t *testing.T) {
	dir := openaiNode(t)
	eng, m := storiesEngine(t, true)
	e := startEnv(t, eng, m.Tokenizer(), Config{Model: testModel, MaxContext: m.MaxContext(), Tokenizer: m.Tokenizer(),
		APIKeys: []string{"sk-test"}, MaxInFlight: 16})
	stdout := runNode(t, dir, filepath.Join("testdata", "openai-node", "client.mjs"), 2*time.Minute,
		"TURNSTILE_URL="+e.ts.URL+"/v1", "TURNSTILE_KEY=sk-test", "TURNSTILE_MODEL="+testModel)

	var got struct {
		Models          []string `json:"models"`
		Completion      string   `json:"completion"`
		CompletionUsage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"completionUsage"`
		CompletionStreamFinish string `json:"completionStreamFinish"`
		Chat                   string `json:"chat"`
		ChatRole               string `json:"chatRole"`
		ChatStreamUsage        struct {
			CompletionTokens int `json:"completion_tokens"`
			PromptTokens     int `json:"prompt_tokens"`
		} `json:"chatStreamUsage"`
		BadRequest struct {
			Status int    `json:"status"`
			Type   string `json:"type"`
			Param  string `json:"param"`
		} `json:"badRequest"`
		NotFound     int `json:"notFound"`
		Unauthorized int `json:"unauthorized"`
	}
	require.NoError(t, json.Unmarshal(stdout, &got), "client output: %s", stdout)
	require.Equal(t, []string{testModel}, got.Models)

	ref := greedyReference(t, "Once upon a time", 24)
	require.Equal(t, ref.Text, got.Completion, "the client sees the greedy text")
	require.Equal(t, 24, got.CompletionUsage.CompletionTokens)
	require.Equal(t, "length", got.CompletionStreamFinish)
	require.NotEmpty(t, got.Chat)
	require.Equal(t, "assistant", got.ChatRole)
	require.Equal(t, 16, got.ChatStreamUsage.CompletionTokens)
	require.Positive(t, got.ChatStreamUsage.PromptTokens)
	require.Equal(t, 400, got.BadRequest.Status)
	require.Equal(t, errInvalidRequest, got.BadRequest.Type)
	require.Equal(t, "max_tokens", got.BadRequest.Param)
	require.Equal(t, 404, got.NotFound)
	require.Equal(t, 401, got.Unauthorized)
}
