package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// openaiNodeVersion is the pinned `openai` npm package: the newest release
// line that still runs on Node 20 (7.x requires Node >= 22).
const openaiNodeVersion = "6.49.0"

// openaiNode returns a directory holding node_modules/openai at the pinned
// version. It is installed once per machine into the user cache (a fresh
// temporary directory renamed into place), so repeated test runs do not
// reinstall it.
func openaiNode(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed; the OpenAI Node client test needs Node.js and npm")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "turnstile", "openai-node-"+openaiNodeVersion)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err == nil {
		return dir
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(dir), 0o755))
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-save", "openai@"+openaiNodeVersion)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm install openai@%s: %s", openaiNodeVersion, out)
	if err := os.Rename(tmp, dir); err != nil {
		// Another test process installed it meanwhile.
		_, statErr := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json"))
		require.NoError(t, statErr, "installing into %s: %v", dir, err)
	}
	return dir
}

// TestOpenAINodeClient drives the server with the official OpenAI Node.js
// client: models, completions and chat, whole and streamed, and the errors
// the client maps to its exception classes.
func TestOpenAINodeClient(t *testing.T) {
	dir := openaiNode(t)
	node, err := exec.LookPath("node")
	require.NoError(t, err, "npm is installed but node is not")
	script, err := os.ReadFile(filepath.Join("testdata", "openai-node", "client.mjs"))
	require.NoError(t, err)
	// Node resolves packages from the script's directory: run a copy next
	// to node_modules.
	run := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(run, "node_modules")))
	require.NoError(t, os.WriteFile(filepath.Join(run, "client.mjs"), script, 0o644))

	eng, m := storiesEngine(t, true)
	e := startEnv(t, eng, m.Tokenizer(), Config{Model: testModel, MaxContext: m.MaxContext(), Tokenizer: m.Tokenizer(),
		APIKeys: []string{"sk-test"}, MaxInFlight: 16})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs")
	cmd.Dir = run
	cmd.Env = append(os.Environ(), "TURNSTILE_URL="+e.ts.URL+"/v1", "TURNSTILE_KEY=sk-test", "TURNSTILE_MODEL="+testModel)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "client.mjs: %s", stderr.String())

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
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), "client output: %s", stdout.String())
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
