package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/guided"
	"github.com/turnstile-llm/turnstile/internal/testwait"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
)

// TestBuildDeploymentGuided: every engine of a deployment gets a guided
// decoder and the server a grammar cache, so a constrained request through
// the front end (one engine, or two attention-DP ranks in one process)
// produces one of its choices; the deployment's accounting is exact after.
func TestBuildDeploymentGuided(t *testing.T) {
	path, err := gguf.TestModelPath()
	require.NoError(t, err)
	m, err := model.LoadLlama(path, model.LlamaOptions{})
	require.NoError(t, err)
	defer m.Close()
	choices := []string{"the big cat", "a dog"}
	for _, dp := range []int{1, 2} {
		t.Run(fmt.Sprint("dp", dp), func(t *testing.T) {
			d, err := buildDeployment(deploymentSpec{command: "test", model: m, device: cuda.Selection{Backend: cuda.BackendCPU}, dp: dp,
				engine: executor.Config{MaxBatchSize: 2, MaxNumBatchedTokens: 64, BlockSize: 16, Overlap: true},
				runner: runnerSizes{kvBlocks: 64, workers: 1, kvType: kernels.F32}, log: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			require.Len(t, d.engines, dp)
			require.NoError(t, d.grammarOff)
			require.NotNil(t, d.grammars)

			ctx := testwait.Ctx(t)
			g, err := d.grammars.Get(ctx, guided.Spec{Kind: guided.Choice, Choices: choices})
			require.NoError(t, err)
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- d.front.Run(runCtx) }()
			tok := m.Tokenizer()
			s, err := d.front.Submit(ctx, &executor.Request{PromptTokens: tok.Encode("Once upon a time", tok.AddBOS()), MaxTokens: 16,
				Params: sampling.DefaultParams(), Grammar: g, StopTokenIDs: m.StopIDs()})
			require.NoError(t, err)
			out, err := s.ReadAll(ctx)
			require.NoError(t, err)
			require.Contains(t, choices, out.Text)
			require.Equal(t, executor.FinishStop, out.FinishReason)
			stop()
			if err := testwait.Recv(t, done, "the front end's loop"); !errors.Is(err, context.Canceled) {
				require.NoError(t, err)
			}
			require.NoError(t, d.front.Check())
		})
	}
}
