package sim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

func TestShapeOf(t *testing.T) {
	b := &step.Batch{Seqs: []step.SeqBatch{
		{NumTokens: 1, ContextLen: 100},
		{NumTokens: 64, ContextLen: 64},
		{NumTokens: 1, ContextLen: 7},
		{NumTokens: 16, ContextLen: 300},
	}}
	// Prefill pairs: 64 tokens from empty attend 1+2+…+64 = 2,080 keys;
	// 16 tokens ending at 300 attend 285+…+300 = 4,680.
	require.Equal(t, StepShape{Seqs: 4, PrefillTokens: 80, DecodeSeqs: 2, ContextTokens: 471, PrefillPairs: 2080 + 4680}, ShapeOf(b, 16))
	require.Equal(t, StepShape{}, ShapeOf(&step.Batch{}, 16))
}

// failing is a device whose every step fails.
type failing struct{ step.Runner }

func (failing) Execute(*step.Batch, *step.Output) error { return context.DeadlineExceeded }

func TestRecorderErrors(t *testing.T) {
	_, err := NewRecorder(nil, clock.Real{})
	require.ErrorContains(t, err, "needs a device and a clock")
	rec, err := NewRecorder(failing{}, clock.NewVirtual(time.Unix(0, 0)))
	require.NoError(t, err)
	require.ErrorIs(t, rec.Execute(&step.Batch{}, &step.Output{}), context.DeadlineExceeded)
	require.Empty(t, rec.Samples(), "failed steps are not recorded")
}

// TestDeferSpend: the runner's cost and a recorder's measured time
// reach the clock only when the engine processes the step, in step order,
// and spending a step never executed is an error.
func TestDeferSpend(t *testing.T) {
	vc := clock.NewVirtual(time.Unix(0, 0))
	r, err := New(Config{Capacity: step.Capacity{Seats: 1, KVBlocks: 4, BlockSize: 4, MaxContext: 16, MaxBatchTokens: 16, Vocab: 8},
		Cost: Fixed(5 * time.Millisecond), Clock: vc, DeferSpend: true})
	require.NoError(t, err)
	p := sampling.DefaultParams()
	b := &step.Batch{Tokens: []int32{1, 2}, Positions: []int32{0, 1},
		Seqs: []step.SeqBatch{{Seat: 0, Start: true, NumTokens: 2, ContextLen: 2, BlockTable: []int32{0}, Sample: true, Params: &p}}}
	out := &step.Output{}
	out.Resize(1)
	require.NoError(t, r.Execute(b, out))
	require.Zero(t, vc.Elapsed(), "Execute spends nothing under DeferSpend")
	require.NoError(t, r.SpendStep())
	require.Equal(t, 5*time.Millisecond, vc.Elapsed())
	require.ErrorContains(t, r.SpendStep(), "never executed")

	// A recorder spending a (virtual here, real in use) device's measured
	// time on a second virtual clock.
	dev := clock.NewVirtual(time.Unix(0, 0))
	inner, err := New(Config{Capacity: step.Capacity{Seats: 1, KVBlocks: 4, BlockSize: 4, MaxContext: 16, MaxBatchTokens: 16, Vocab: 8},
		Cost: Fixed(3 * time.Millisecond), Clock: dev})
	require.NoError(t, err)
	rec, err := NewRecorder(inner, dev)
	require.NoError(t, err)
	virt := clock.NewVirtual(time.Unix(0, 0))
	rec.SpendOn(virt)
	require.NoError(t, rec.Execute(b, out))
	require.Zero(t, virt.Elapsed())
	require.NoError(t, rec.SpendStep())
	require.Equal(t, 3*time.Millisecond, virt.Elapsed())
	require.Len(t, rec.Samples(), 1)
	require.ErrorContains(t, rec.SpendStep(), "never executed")
}
