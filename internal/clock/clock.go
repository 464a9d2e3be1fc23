// Package clock is the injected source of time for every component that
// measures or waits: Real reads the wall clock, Virtual is a deterministic
// clock that only moves when someone advances it (the simulated runner does,
// by its step durations), so experiments with minutes of traffic run in
// milliseconds and reproduce exactly.
package clock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Clock is what components read time from.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// Sleep lets d pass. It returns early with ctx's error when ctx ends.
	// d <= 0 returns at once.
	Sleep(ctx context.Context, d time.Duration) error
}

// Real is the wall clock.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// Sleep blocks for d of wall time, or until ctx ends.
func (Real) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Virtual is a deterministic clock. Its time moves only through Advance and
// Sleep; Sleep advances the clock by d and returns at once (the caller is the
// one who "spends" the time, as the simulated runner spends a step). It is
// safe for concurrent use: readers on other goroutines see a monotonic time.
type Virtual struct {
	origin time.Time
	nanos  atomic.Int64 // elapsed since origin
}

// NewVirtual returns a virtual clock that reads origin until advanced.
func NewVirtual(origin time.Time) *Virtual {
	return &Virtual{origin: origin}
}

// Now is origin plus everything advanced so far.
func (v *Virtual) Now() time.Time {
	return v.origin.Add(time.Duration(v.nanos.Load()))
}

// Elapsed is the total time advanced since the clock was made.
func (v *Virtual) Elapsed() time.Duration { return time.Duration(v.nanos.Load()) }

// Advance moves the clock forward by d. A negative d is refused: virtual
// time, like real time, never goes back.
func (v *Virtual) Advance(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("clock: advance by negative duration %v", d)
	}
	v.nanos.Add(int64(d))
	return nil
}

// Sleep advances the clock by d (when d > 0) and returns at once; it returns
// ctx's error, without advancing, when ctx has already ended.
func (v *Virtual) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		v.nanos.Add(int64(d))
	}
	return nil
}
