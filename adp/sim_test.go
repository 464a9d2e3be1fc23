package adp

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
)

// ctxRank is a simulated context-only rank on a virtual clock: every
// request is its prompt's prefill and one output token. It models the step
// loop of seed 004's context role exactly:
//
//   - a step admits waiting requests up to Capacity (minus the retiring ones
//     when charge is set: BASE);
//   - with overlap, the requests of step n are in flight with their last
//     token when the next gather happens: retiring, torn down while step n+1
//     runs; without overlap they are gone by then;
//   - a step with nothing to admit is a dummy step; every step, dummy or not,
//     costs stepTime (lockstep: all ranks take the same time).
//
// early models a rank whose previous step's results are processed before it
// reaches the gather (its device and host loop finished first), so its
// requests never show as retiring there, overlap or not. Which ranks are
// late is the k of seed 004's ladder: the lockstep loop cannot produce it
// from timing, so the experiment sets it.
type ctxRank struct {
	capacity        int
	overlap, charge bool
	early           bool
	clock           *clock.Virtual
	stepTime        time.Duration
	// cached prompts (by first token) for the KV-aware router's hits, and
	// resident requests per program.
	cached map[int32]int
	progs  map[string]int

	waiting, inflight []*ctxJob
	finished          int
	steps             int
	failAt            int // Step number (1-based) that fails, as a device error would; 0: none
}

type ctxJob struct {
	req    *executor.Request
	stream *ctxStream
}

func newCtxRank(capacity int, overlap, charge bool) *ctxRank {
	return &ctxRank{capacity: capacity, overlap: overlap, charge: charge,
		clock: clock.NewVirtual(time.Unix(0, 0)), stepTime: time.Millisecond, cached: map[int32]int{}, progs: map[string]int{}}
}

func (r *ctxRank) Step() (bool, error) {
	if r.failAt > 0 && r.steps+1 == r.failAt {
		return false, fmt.Errorf("device lost at step %d", r.failAt)
	}
	room := r.capacity
	if r.charge {
		room -= len(r.inflight)
	}
	n := max(min(len(r.waiting), room), 0)
	admitted := slices.Clone(r.waiting[:n])
	r.waiting = slices.Delete(r.waiting, 0, n)
	if err := r.clock.Sleep(context.Background(), r.stepTime); err != nil {
		return false, err
	}
	r.steps++
	// Teardown of what retired in the previous step, after this step's
	// launch (overlap); without overlap this step's requests end with it.
	r.finish(r.inflight)
	r.inflight = nil
	if r.overlap && !r.early {
		r.inflight = admitted
	} else {
		r.finish(admitted)
	}
	for _, j := range admitted {
		if len(j.req.PromptTokens) > 0 {
			r.cached[j.req.PromptTokens[0]] = len(j.req.PromptTokens) - 1
		}
	}
	return n > 0, nil
}

func (r *ctxRank) finish(jobs []*ctxJob) {
	for _, j := range jobs {
		j.stream.end(executor.Delta{TokenIDs: []int32{1}, FinishReason: executor.FinishLength,
			Usage: executor.Usage{Prompt: len(j.req.PromptTokens), Completion: 1}})
		r.finished++
		if p := j.req.ProgramID; p != "" {
			if r.progs[p]--; r.progs[p] == 0 {
				delete(r.progs, p)
			}
		}
	}
}

func (r *ctxRank) State(s *RankState) {
	*s = RankState{Capacity: r.capacity, Hits: s.Hits[:0], Resident: s.Resident[:0]}
	for _, j := range r.waiting {
		s.Waiting++
		s.WaitingTokens += len(j.req.PromptTokens)
	}
	for _, j := range r.inflight {
		s.Retiring++
		s.RetiringTokens += len(j.req.PromptTokens)
	}
}

func (r *ctxRank) Match(s *RankState, pending []*executor.Request, need Needs) {
	s.Hits, s.Resident = s.Hits[:0], s.Resident[:0]
	for _, q := range pending {
		if need.Hits {
			h := 0
			if len(q.PromptTokens) > 0 {
				h = min(r.cached[q.PromptTokens[0]], len(q.PromptTokens)-1)
			}
			s.Hits = append(s.Hits, h)
		}
		if need.Resident {
			s.Resident = append(s.Resident, q.ProgramID != "" && r.progs[q.ProgramID] > 0)
		}
	}
}

func (r *ctxRank) Submit(_ context.Context, q *executor.Request) (Stream, error) {
	j := &ctxJob{req: q, stream: &ctxStream{done: make(chan struct{})}}
	r.waiting = append(r.waiting, j)
	if q.ProgramID != "" {
		r.progs[q.ProgramID]++
	}
	return j.stream, nil
}

// ctxStream delivers one final delta.
type ctxStream struct {
	mu    sync.Mutex
	d     executor.Delta
	done  chan struct{}
	taken bool
}

func (s *ctxStream) end(d executor.Delta) {
	s.mu.Lock()
	s.d = d
	s.mu.Unlock()
	close(s.done)
}

func (s *ctxStream) Recv(ctx context.Context) (executor.Delta, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return executor.Delta{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken {
		return executor.Delta{}, io.EOF
	}
	s.taken = true
	return s.d, nil
}

func (s *ctxStream) ReadAll(ctx context.Context) (executor.Delta, error) {
	d, err := s.Recv(ctx)
	if err != nil {
		return d, err
	}
	_, err = s.Recv(ctx)
	if err != io.EOF {
		return d, err
	}
	return d, nil
}
