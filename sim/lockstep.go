package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/internal/clock"
)

// Lockstep is the virtual time of attention-DP ranks that step together:
// every rank's runner spends its step on its own Rank clock, which records
// the time without moving the shared clock, and End closes the iteration by
// advancing the shared clock by the slowest rank's time, because the
// collective at the end of the step waits for the last rank. A rank with a
// dummy step spends nothing and waits for the others like the rest.
//
// Rank clocks are safe for concurrent use (ranks step on their own
// goroutines); End must not run while a rank is stepping.
type Lockstep struct {
	shared *clock.Virtual
	mu     sync.Mutex
	spent  []time.Duration // per rank, this iteration
}

// NewLockstep returns the lockstep time of ranks ranks on shared.
func NewLockstep(shared *clock.Virtual, ranks int) (*Lockstep, error) {
	if shared == nil {
		return nil, fmt.Errorf("sim: lockstep needs a shared virtual clock")
	}
	if ranks < 1 {
		return nil, fmt.Errorf("sim: lockstep over %d ranks", ranks)
	}
	return &Lockstep{shared: shared, spent: make([]time.Duration, ranks)}, nil
}

// Rank is rank i's clock: Now is the shared time plus what rank i has spent
// in this iteration; Sleep records d for rank i. Pass it as the rank's
// runner clock (Config.Clock) and engine clock.
func (l *Lockstep) Rank(i int) (clock.Clock, error) {
	if i < 0 || i >= len(l.spent) {
		return nil, fmt.Errorf("sim: lockstep rank %d outside [0, %d)", i, len(l.spent))
	}
	return rankClock{l: l, i: i}, nil
}

// End closes the iteration: the shared clock advances by the largest time
// any rank spent, which End returns, and every rank's count restarts.
func (l *Lockstep) End() (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest time.Duration
	for i, d := range l.spent {
		longest = max(longest, d)
		l.spent[i] = 0
	}
	return longest, l.shared.Advance(longest)
}

type rankClock struct {
	l *Lockstep
	i int
}

func (c rankClock) Now() time.Time {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.shared.Now().Add(c.l.spent[c.i])
}

func (c rankClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	c.l.mu.Lock()
	c.l.spent[c.i] += d
	c.l.mu.Unlock()
	return nil
}
