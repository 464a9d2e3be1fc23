package sim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/model"
)

func TestShapeOf(t *testing.T) {
	b := &model.Batch{Seqs: []model.SeqBatch{
		{NumTokens: 1, ContextLen: 100},
		{NumTokens: 64, ContextLen: 64},
		{NumTokens: 1, ContextLen: 7},
		{NumTokens: 16, ContextLen: 300},
	}}
	require.Equal(t, StepShape{Seqs: 4, PrefillTokens: 80, DecodeSeqs: 2, ContextTokens: 471}, ShapeOf(b))
	require.Equal(t, StepShape{}, ShapeOf(&model.Batch{}))
}

// failing is a device whose every step fails.
type failing struct{ Device }

func (failing) Execute(*model.Batch, *model.Output) error { return context.DeadlineExceeded }

func TestRecorderErrors(t *testing.T) {
	_, err := NewRecorder(nil, clock.Real{})
	require.ErrorContains(t, err, "needs a device and a clock")
	rec, err := NewRecorder(failing{}, clock.NewVirtual(time.Unix(0, 0)))
	require.NoError(t, err)
	require.ErrorIs(t, rec.Execute(&model.Batch{}, &model.Output{}), context.DeadlineExceeded)
	require.Empty(t, rec.Samples(), "failed steps are not recorded")
}
