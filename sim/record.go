package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/step"
)

// ShapeOf is what a cost model sees of b, whose KV blocks hold bs
// positions: a sequence taking exactly one new token is a decode, any other
// contributes its new tokens as prefill, and every sequence contributes its
// context length; a prefill also its attended (query, key) pairs; a group
// its shared run once and its decode members' shared pairs (as
// Runner.Execute counts).
func ShapeOf(b *step.Batch, bs int) StepShape {
	s := StepShape{Seqs: len(b.Seqs)}
	for i := range b.Seqs {
		s.add(&b.Seqs[i])
	}
	s.addGroups(b, bs)
	return s
}

// Recorder is a Device that runs another and records every step's shape
// and duration on a clock, for Calibrate: wrap the CPU or GPU runner with a
// real clock and drive traffic through the engine (`turnstile bench
// calibrate`), or wrap this package's Runner with its virtual clock to
// recover its cost model. Like any Device it is called from one goroutine
// at a time.
type Recorder struct {
	inner   step.Runner
	clock   clock.Clock
	samples []Sample

	virt    clock.Clock // SpendOn's clock; nil: none
	mu      sync.Mutex
	pending []time.Duration // recorded steps not yet spent, in step order
}

// NewRecorder wraps inner, timing each step on clk.
func NewRecorder(inner step.Runner, clk clock.Clock) (*Recorder, error) {
	if inner == nil || clk == nil {
		return nil, fmt.Errorf("sim: recorder needs a device and a clock")
	}
	return &Recorder{inner: inner, clock: clk}, nil
}

// SpendOn makes the recorder a real device on virtual time: each recorded
// step's measured duration is also spent on virt when the engine processes
// the step (executor.StepSpender). Drivers that run on a virtual clock
// (arrivals, tool waits) can then drive the CPU or GPU runner at full speed:
// waits cost nothing, steps cost what they measured. Call it before the
// first step. The inner device must not spend time on virt itself.
func (r *Recorder) SpendOn(virt clock.Clock) { r.virt = virt }

// SpendStep implements executor.StepSpender: with SpendOn it spends the
// oldest recorded step's duration on the virtual clock.
func (r *Recorder) SpendStep() error {
	if r.virt == nil {
		return nil
	}
	d, err := popPending(&r.mu, &r.pending)
	if err != nil {
		return fmt.Errorf("sim: recorder: %w", err)
	}
	return r.virt.Sleep(context.Background(), d)
}

// Capacity is the inner device's.
func (r *Recorder) Capacity() step.Capacity { return r.inner.Capacity() }

// Execute runs the step on the inner device and records it; a failed step
// is not recorded.
func (r *Recorder) Execute(b *step.Batch, out *step.Output) error {
	bs := 0
	if len(b.Groups) > 0 { // only groups need the block size
		bs = r.inner.Capacity().BlockSize
	}
	shape := ShapeOf(b, bs)
	start := r.clock.Now()
	if err := r.inner.Execute(b, out); err != nil {
		return err
	}
	d := r.clock.Now().Sub(start)
	r.samples = append(r.samples, Sample{Shape: shape, Time: d})
	if r.virt != nil {
		r.mu.Lock()
		r.pending = append(r.pending, d)
		r.mu.Unlock()
	}
	return nil
}

// Samples returns the steps recorded so far (a copy).
func (r *Recorder) Samples() []Sample {
	return append([]Sample(nil), r.samples...)
}
