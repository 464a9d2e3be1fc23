package adp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/testwait"
	"github.com/turnstile-llm/turnstile/sampling"
)

// group is a Collective between goroutines standing for processes: an
// allgather returns when every party has entered it, as MPI's does, and
// abort makes every pending and later call fail (MPI_Abort ends the job).
type group struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n       int
	round   uint64
	arrived int
	rows    [][]int64
	// res is the last completed round's rows, flattened by the party that
	// completed it. A waiter reads it after waking: the next round cannot
	// complete (and replace it) before every waiter has entered it.
	res     []int64
	aborted error
}

func newGroup(n int) *group {
	g := &group{n: n, rows: make([][]int64, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *group) abort(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aborted == nil {
		g.aborted = err
	}
	g.cond.Broadcast()
}

// party is process p's view of the group.
type party struct {
	g *group
	p int
}

func (c party) Rank() int { return c.p }
func (c party) Size() int { return c.g.n }
func (c party) AllgatherInt64(local, all []int64) error {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aborted != nil {
		return g.aborted
	}
	round := g.round
	g.rows[c.p] = append(g.rows[c.p][:0], local...)
	g.arrived++
	if g.arrived == g.n {
		g.res = g.res[:0]
		for _, r := range g.rows {
			g.res = append(g.res, r...)
		}
		g.arrived = 0
		g.round++
		g.cond.Broadcast()
	}
	for g.round == round && g.aborted == nil {
		g.cond.Wait()
	}
	if g.aborted != nil {
		return g.aborted
	}
	copy(all, g.res)
	return nil
}

// livenessRun runs two ranks as two "processes": rank 0 decodes a long
// request while rank 1's short one retires early. It returns each loop's
// error and the watchdog messages.
func livenessRun(t *testing.T, localLiveness bool) (errs [2]error, stuck []string, tokens [2]int) {
	t.Helper()
	engines := frontendEngines(t, 2)
	g := newGroup(2)
	ctx, cancel := context.WithCancel(testwait.Ctx(t))
	defer cancel()
	var mu sync.Mutex
	onStuck := func(msg string) {
		mu.Lock()
		stuck = append(stuck, msg)
		mu.Unlock()
		g.abort(errors.New("job aborted by the watchdog"))
		cancel()
	}
	streams := make([]*executor.Stream, 2)
	for i, n := range []int{24, 2} { // rank 1 finishes first and retires
		st, err := engines[i].Submit(context.Background(), &executor.Request{Prompt: "hello", MaxTokens: n, IgnoreEOS: true,
			Params: sampling.DefaultParams()})
		require.NoError(t, err)
		streams[i] = st
	}
	var wg sync.WaitGroup
	for i := range 2 {
		// The real rule's bound is generous, never a timing assertion; the
		// broken rule's is short, since it is expected to fire.
		watchdog := testwait.Bound
		if localLiveness {
			watchdog = 2 * time.Second
		}
		loop, err := NewProcessLoop(ProcessConfig{Collective: party{g, i}, Watchdog: watchdog, OnStuck: onStuck,
			LocalLiveness: localLiveness}, NewEngineRank(engines[i], nil, nil))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = loop.RunUntilIdle(ctx)
		}()
	}
	testwait.Within(t, "both process loops to return", func() struct{} { wg.Wait(); return struct{}{} })
	for i, st := range streams {
		if errs[i] == nil {
			d, err := st.Collect(testwait.Ctx(t))
			require.NoError(t, err)
			tokens[i] = len(d.TokenIDs)
		}
	}
	return errs, stuck, tokens
}

// TestProcessLoopLiveness: with retiring requests counted for liveness the
// two ranks step in lockstep to the end; with the broken rule, rank 1,
// whose only request is retiring, waits in its own queue while rank 0 waits
// for it in the gather: a hang, which the watchdog names and ends.
func TestProcessLoopLiveness(t *testing.T) {
	errs, stuck, tokens := livenessRun(t, false)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Empty(t, stuck, "the real rule never trips the watchdog")
	require.Equal(t, [2]int{24, 2}, tokens)

	errs, stuck, _ = livenessRun(t, true)
	require.Error(t, errs[0], "rank 0 cannot finish: its peer never gathers again")
	require.NotEmpty(t, stuck, "the watchdog fires")
	// Whichever watchdog fires first ends the job: rank 1's, waiting in its
	// own queue, or rank 0's, waiting for rank 1 in the gather.
	all := fmt.Sprint(stuck)
	require.True(t, strings.Contains(all, "rank 1 of 2 stuck") && strings.Contains(all, "its own queue wait (retiring requests not counted for liveness)") ||
		strings.Contains(all, "rank 0 of 2 stuck") && strings.Contains(all, "the gather's allgather (a peer has not entered it)"),
		"the watchdog names the rank and what it is stuck in: %s", all)
}

func TestNewProcessLoopRefuses(t *testing.T) {
	r := NewEngineRank(frontendEngines(t, 1)[0], nil, nil)
	for _, tc := range []struct {
		cfg  ProcessConfig
		rank Rank
		want string
	}{
		{ProcessConfig{}, r, "Collective is required"},
		{ProcessConfig{Collective: Local{}}, nil, "needs a rank"},
		{ProcessConfig{Collective: Local{}, Watchdog: -time.Second}, r, "Watchdog -1s"},
		{ProcessConfig{Collective: Local{}, Watchdog: time.Second}, r, "needs OnStuck"},
	} {
		_, err := NewProcessLoop(tc.cfg, tc.rank)
		require.ErrorContains(t, err, tc.want)
	}
}
