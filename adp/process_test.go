package adp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/testwait"
	"github.com/turnstile-llm/turnstile/sampling"
)

// group is a Comm between goroutines standing for processes: each
// collective returns when every party has entered it, as MPI's do, and
// abort makes every pending and later call fail (MPI_Abort ends the job).
type group struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n       int
	round   uint64
	arrived int
	rows    [][]byte
	// res is the last completed round's rows, kept by the party that
	// completed it. A waiter reads it after waking: the next round cannot
	// complete (and replace it) before every waiter has entered it.
	res     [][]byte
	aborted error
}

func newGroup(n int) *group {
	g := &group{n: n, rows: make([][]byte, n)}
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

// exchange deposits p's row and returns every party's, once all arrived.
func (g *group) exchange(p int, row []byte) ([][]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aborted != nil {
		return nil, g.aborted
	}
	round := g.round
	g.rows[p] = append([]byte(nil), row...)
	g.arrived++
	if g.arrived == g.n {
		g.res = append([][]byte(nil), g.rows...)
		g.arrived = 0
		g.round++
		g.cond.Broadcast()
	}
	for g.round == round && g.aborted == nil {
		g.cond.Wait()
	}
	if g.aborted != nil {
		return nil, g.aborted
	}
	return g.res, nil
}

// party is process p's view of the group.
type party struct {
	g *group
	p int
}

func (c party) Rank() int { return c.p }
func (c party) Size() int { return c.g.n }

func (c party) AllgatherInt64(local, all []int64) error {
	row := make([]byte, 8*len(local))
	for i, v := range local {
		binary.LittleEndian.PutUint64(row[8*i:], uint64(v))
	}
	rows, err := c.g.exchange(c.p, row)
	if err != nil {
		return err
	}
	k := 0
	for _, r := range rows {
		if len(r) != len(row) {
			return fmt.Errorf("allgather of %d bytes met one of %d", len(row), len(r))
		}
		for i := 0; i < len(r); i += 8 {
			all[k] = int64(binary.LittleEndian.Uint64(r[i:]))
			k++
		}
	}
	return nil
}

func (c party) BcastBytes(buf []byte, root int) error {
	rows, err := c.g.exchange(c.p, buf)
	if err != nil {
		return err
	}
	if len(rows[root]) != len(buf) {
		return fmt.Errorf("broadcast of %d bytes into %d", len(rows[root]), len(buf))
	}
	copy(buf, rows[root])
	return nil
}

func (c party) GathervBytes(local []byte, counts []int, all []byte, root int) error {
	if len(local) != counts[c.p] {
		return fmt.Errorf("gatherv: %d bytes, counts say %d", len(local), counts[c.p])
	}
	rows, err := c.g.exchange(c.p, local)
	if err != nil {
		return err
	}
	if c.p == root {
		off := 0
		for q, r := range rows {
			if len(r) != counts[q] {
				return fmt.Errorf("gatherv: process %d sent %d bytes, counts say %d", q, len(r), counts[q])
			}
			off += copy(all[off:], r)
		}
	}
	return nil
}

// procs runs a deployment of n processes (goroutines over one group), one
// engine each, with cfg (its Comm set per process).
type procs struct {
	g   *group
	fes []*Frontend
}

func newProcs(t *testing.T, n int, cfg Config) *procs {
	t.Helper()
	return newProcsOf(t, cfg, frontendEngines(t, n))
}

// newProcsOf is newProcs over the given engines, one process each.
func newProcsOf(t *testing.T, cfg Config, engines []*executor.Engine) *procs {
	t.Helper()
	n := len(engines)
	p := &procs{g: newGroup(n), fes: make([]*Frontend, n)}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for q := range n { // New gathers: every process at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			c.Comm = party{p.g, q}
			p.fes[q], errs[q] = NewFrontend(c, engines[q:q+1])
		}()
	}
	wg.Wait()
	for q, err := range errs {
		require.NoError(t, err, "process %d", q)
	}
	return p
}

// run starts every process's loop; stop cancels process 0's (the others
// stop at the next gather, as under mpirun after the front end shuts down)
// and returns every loop's error.
func (p *procs) run(t *testing.T) (stop func() []error) {
	ctx, cancel := context.WithCancel(context.Background())
	errs := make([]error, len(p.fes))
	var wg sync.WaitGroup
	for q, fe := range p.fes {
		c := ctx
		if q > 0 {
			c = context.Background()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[q] = fe.Run(c)
		}()
	}
	return func() []error {
		cancel()
		testwait.Within(t, "every process's loop to return", func() struct{} { wg.Wait(); return struct{}{} })
		return errs
	}
}

// TestProcessesMatchOneProcess: two processes of one rank each, joined by
// the byte wire, place a request sequence exactly as one process with two
// ranks does, and every request's output is the same.
func TestProcessesMatchOneProcess(t *testing.T) {
	reqs := func() []*executor.Request {
		var out []*executor.Request
		for i := range 9 {
			out = append(out, &executor.Request{PromptTokens: []int32{256, int32(40 + i), int32(50 + 3*i), 60},
				MaxTokens: 3 + (i*5)%7, IgnoreEOS: i%2 == 0, Params: sampling.DefaultParams()})
		}
		return out
	}
	type result struct {
		rank   int
		tokens []int32
		text   string
		finish executor.FinishReason
	}
	outputs := func(t *testing.T, d *Deployment, run func() func() []error) []result {
		var hs []*Handle
		for _, r := range reqs() {
			h, err := d.Submit(context.Background(), r)
			require.NoError(t, err)
			hs = append(hs, h)
		}
		stop := run()
		var out []result
		for i, h := range hs {
			st, err := h.Wait(testwait.Ctx(t))
			require.NoError(t, err, "request %d", i)
			dl, err := st.ReadAll(testwait.Ctx(t))
			require.NoError(t, err)
			out = append(out, result{rank: h.Rank(), tokens: dl.TokenIDs, text: dl.Text, finish: dl.FinishReason})
		}
		for q, err := range stop() {
			require.NoError(t, err, "process %d", q)
		}
		return out
	}

	one, err := NewFrontend(Config{}, frontendEngines(t, 2))
	require.NoError(t, err)
	want := outputs(t, one.d, func() func() []error {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- one.Run(ctx) }()
		return func() []error { cancel(); return []error{testwait.Recv(t, done, "Run to return")} }
	})
	require.NoError(t, one.Check())

	p := newProcs(t, 2, Config{VerifyPlacement: true})
	got := outputs(t, p.fes[0].d, func() func() []error { return p.run(t) })
	require.Equal(t, want, got, "placements and outputs")
	ranks := map[int]int{}
	for _, r := range got {
		ranks[r.rank]++
	}
	require.Len(t, ranks, 2, "the sequence uses both ranks: %v", ranks)
	for q, fe := range p.fes {
		require.NoError(t, fe.Check(), "process %d", q)
	}
	// Process 0's metrics carry rank 1 as process 1 last sent it.
	snaps := p.fes[0].RankSnapshots()
	require.Len(t, snaps, 2)
	require.Equal(t, uint64(ranks[1]), snaps[1].Submitted, "rank 1's metrics reached process 0")
	require.Equal(t, uint64(ranks[0]), snaps[0].Submitted)
}

// TestProcessesMetricsCountEndedRequests: when a request served in another
// process ends, process 0 holds that rank's metrics counting it (submitted
// and finished) before the client has the end of its stream, however
// recently the rank's metrics were last sent and though the rank still
// runs another request: /metrics read after a response counts its request
// where it ran. Process 0's loop is stepped here, so the check runs between
// its iterations, as soon as the client could read; rank 1's periodic sends
// are pushed out of reach, so only the rule under test sends its metrics
// while it has work.
func TestProcessesMetricsCountEndedRequests(t *testing.T) {
	for _, overlap := range []bool{false, true} {
		t.Run(fmt.Sprintf("overlap=%v", overlap), func(t *testing.T) {
			p := newProcsOf(t, Config{Router: onRank(1)}, frontendEnginesOverlap(t, 2, overlap))
			p.fes[1].d.x.every = time.Hour
			done := make(chan error, 1)
			go func() { done <- p.fes[1].Run(context.Background()) }()
			d := p.fes[0].d
			// A short and a long request on rank 1 at once, then one more.
			lengths := []int{3, 40, 5}
			var hs []*Handle
			for i, n := range lengths[:2] {
				h, err := d.Submit(testwait.Ctx(t), &executor.Request{PromptTokens: []int32{256, int32(41 + i), 42},
					MaxTokens: n, IgnoreEOS: true, Params: sampling.DefaultParams()})
				require.NoError(t, err)
				hs = append(hs, h)
			}
			sts := make([]*executor.Stream, len(lengths))
			got := make([]executor.Delta, len(lengths))
			finished := 0
			for it := 0; finished < len(lengths); it++ {
				require.Less(t, it, 1000, "every request ends")
				_, err := d.Step()
				require.NoError(t, err)
				ended := 0
				for i, h := range hs {
					if sts[i] == nil {
						if h.Rank() < 0 {
							continue
						}
						require.Equal(t, 1, h.Rank())
						s, err := h.Wait(testwait.Ctx(t))
						require.NoError(t, err)
						sts[i] = s.(*executor.Stream)
					}
					for got[i].FinishReason == executor.FinishNone {
						dl, ok, err := sts[i].TryRecv()
						if err != nil || !ok {
							break
						}
						got[i].TokenIDs = append(got[i].TokenIDs, dl.TokenIDs...)
						if got[i].FinishReason = dl.FinishReason; dl.FinishReason != executor.FinishNone {
							ended++
						}
					}
				}
				if ended == 0 {
					continue
				}
				finished += ended
				m := p.fes[0].RankSnapshots()[1]
				require.Equal(t, uint64(len(hs)), m.Submitted, "rank 1's submissions as process 0 holds them once %d requests ended", finished)
				require.Equal(t, uint64(finished), m.Finished, "rank 1's finished requests as process 0 holds them once %d requests ended", finished)
				if len(hs) < len(lengths) {
					h, err := d.Submit(testwait.Ctx(t), &executor.Request{PromptTokens: []int32{256, 43, 42},
						MaxTokens: lengths[len(hs)], IgnoreEOS: true, Params: sampling.DefaultParams()})
					require.NoError(t, err)
					hs = append(hs, h)
				}
			}
			for i, n := range lengths {
				require.Equal(t, executor.FinishLength, got[i].FinishReason, "request %d", i)
				require.Len(t, got[i].TokenIDs, n, "request %d", i)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			require.NoError(t, p.fes[0].Run(ctx), "process 0 stops")
			require.NoError(t, testwait.Recv(t, done, "process 1's loop to return"))
			for q, fe := range p.fes {
				require.NoError(t, fe.Check(), "process %d", q)
			}
		})
	}
}

// TestProcessesAbortAndRelease: a client that leaves aborts its request
// on the process that serves it; a program release reaches every process
// and reports whether any rank knew the program; Submit elsewhere than
// process 0 is refused.
func TestProcessesAbortAndRelease(t *testing.T) {
	p := newProcs(t, 2, Config{})
	stop := p.run(t)
	fe := p.fes[0]
	_, err := p.fes[1].Submit(context.Background(), &executor.Request{Prompt: "x"})
	require.ErrorIs(t, err, ErrNotFrontEnd)

	// Two long requests: the second lands on rank 1 (process 1).
	long := func() *executor.Request {
		return &executor.Request{PromptTokens: []int32{256, 41, 42}, MaxTokens: 100, IgnoreEOS: true, ProgramID: "prog",
			Params: sampling.DefaultParams()}
	}
	s0, err := fe.Submit(testwait.Ctx(t), long())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(testwait.Ctx(t))
	h, err := fe.d.Submit(ctx, long())
	require.NoError(t, err)
	s1, err := h.Wait(testwait.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, 1, h.Rank())
	_, err = s1.Recv(testwait.Ctx(t)) // it is running there
	require.NoError(t, err)
	cancel()
	d1, err := s1.ReadAll(testwait.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, executor.FinishAbort, d1.FinishReason, "aborted on process 1")
	d0, err := s0.ReadAll(testwait.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, executor.FinishLength, d0.FinishReason)
	require.Len(t, d0.TokenIDs, 100)

	// These engines have no program policy: every rank answers alike.
	_, err = fe.ReleaseProgram("prog")
	require.ErrorIs(t, err, executor.ErrNoPrograms)

	for q, err := range stop() {
		require.NoError(t, err, "process %d", q)
	}
	for q, fe := range p.fes {
		require.NoError(t, fe.Check(), "process %d", q)
	}
	m := p.fes[1].engines[0].Snapshot()
	require.Equal(t, uint64(1), m.Aborted, "process 1 aborted the request whose client left")
}

// TestProcessesStopWithInFlight: process 0 stopping while a request runs
// on process 1 stops every process, and the relayed stream ends (abort)
// instead of hanging its reader.
func TestProcessesStopWithInFlight(t *testing.T) {
	p := newProcs(t, 2, Config{})
	stop := p.run(t)
	var sts []Stream
	for range 2 {
		st, err := p.fes[0].d.SubmitStream(testwait.Ctx(t), &executor.Request{PromptTokens: []int32{256, 41, 42},
			MaxTokens: 120, IgnoreEOS: true, Params: sampling.DefaultParams()})
		require.NoError(t, err)
		sts = append(sts, st)
	}
	// The first output may already carry the finish (length): the loops
	// run on while this goroutine waits to be scheduled.
	first, err := sts[1].Recv(testwait.Ctx(t))
	require.NoError(t, err)
	for q, err := range stop() {
		require.NoError(t, err, "process %d", q)
	}
	d, err := sts[1].ReadAll(testwait.Ctx(t))
	require.NoError(t, err)
	if first.FinishReason != executor.FinishNone {
		require.Equal(t, executor.FinishNone, d.FinishReason, "one finish")
		d.FinishReason = first.FinishReason
	}
	require.Contains(t, []executor.FinishReason{executor.FinishAbort, executor.FinishLength}, d.FinishReason)
}

// livenessRun runs two ranks as two processes: rank 0 decodes a long
// request while rank 1's short one retires early. It returns each loop's
// error, the watchdog messages and each request's tokens.
func livenessRun(t *testing.T, localLiveness bool) (errs [2]error, stuck []string, tokens [2]int) {
	t.Helper()
	// The real rule's bound is generous, never a timing assertion; the
	// broken rule's is short, since it is expected to fire.
	watchdog := testwait.Bound
	if localLiveness {
		watchdog = 2 * time.Second
	}
	var (
		mu sync.Mutex
		p  *procs
	)
	onStuck := func(msg string) {
		mu.Lock()
		stuck = append(stuck, msg)
		mu.Unlock()
		p.g.abort(errors.New("job aborted by the watchdog"))
		for _, fe := range p.fes {
			fe.d.Wake() // a process in its own queue wait meets the abort at the gather
		}
	}
	p = newProcs(t, 2, Config{Watchdog: watchdog, OnStuck: onStuck, Ablation: Ablation{LocalLiveness: localLiveness}})
	var hs []*Handle
	for _, n := range []int{24, 2} { // the second lands on rank 1, finishes first and retires
		h, err := p.fes[0].d.Submit(context.Background(), &executor.Request{Prompt: "hello", MaxTokens: n, IgnoreEOS: true,
			Params: sampling.DefaultParams()})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	var wg sync.WaitGroup
	for q := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				idle, err := p.fes[q].d.Step()
				if err != nil || idle {
					errs[q] = err
					return
				}
			}
		}()
	}
	testwait.Within(t, "both processes to go idle or fail", func() struct{} { wg.Wait(); return struct{}{} })
	for i, h := range hs {
		if errs[0] != nil {
			break
		}
		require.Equal(t, i, h.Rank())
		st, err := h.Wait(testwait.Ctx(t))
		require.NoError(t, err)
		d, err := st.ReadAll(testwait.Ctx(t))
		require.NoError(t, err)
		tokens[i] = len(d.TokenIDs)
	}
	for _, fe := range p.fes {
		require.NoError(t, fe.d.Close())
	}
	return errs, stuck, tokens
}

// TestLiveness: with retiring requests counted for liveness the two
// processes step in lockstep to the end; with the broken rule, process 1,
// whose only request is retiring, waits in its own queue while process 0
// waits for it in the gather: a hang, which the watchdog names and ends.
func TestLiveness(t *testing.T) {
	errs, stuck, tokens := livenessRun(t, false)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Empty(t, stuck, "the real rule never trips the watchdog")
	require.Equal(t, [2]int{24, 2}, tokens)

	errs, stuck, _ = livenessRun(t, true)
	require.Error(t, errs[0], "process 0 cannot finish: its peer never gathers again")
	require.NotEmpty(t, stuck, "the watchdog fires")
	// Whichever watchdog fires first ends the job: process 1's, waiting in
	// its own queue, or process 0's, waiting for it in the gather.
	all := fmt.Sprint(stuck)
	require.True(t, strings.Contains(all, "process 1 of 2 (ranks 1 to 1) stuck") && strings.Contains(all, "its own queue wait (retiring requests not counted for liveness)") ||
		strings.Contains(all, "process 0 of 2 (ranks 0 to 0) stuck") && strings.Contains(all, "the gather's allgather (a peer has not entered it)"),
		"the watchdog names the process, its ranks and what it is stuck in: %s", all)
}

func TestNewDeploymentRefuses(t *testing.T) {
	r := NewEngineRank(frontendEngines(t, 1)[0], nil, nil)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Watchdog: -time.Second}, "Watchdog -1s"},
		{Config{Watchdog: time.Second}, "needs OnStuck"},
		{Config{Dummies: make([]func() error, 2)}, "2 dummy steps for 1 ranks"},
		{Config{MaxPlaced: -1}, "MaxPlaced must be >= 0"},
		{Config{Ablation: Ablation{Engine: executor.Ablation{ChargeRetiring: true}}},
			"rank 0's engine has ablation {ChargeRetiring:false}, the deployment {ChargeRetiring:true}"},
	} {
		_, err := New(tc.cfg, []Rank{r})
		require.ErrorContains(t, err, tc.want)
	}
}

// onRank places every request on one rank.
type onRank int

func (r onRank) Route(l *Loads, pending []Pending, out []int) {
	for j := range out {
		out[j] = int(r)
		l.place(int(r), pending[j].Tokens)
	}
}

// owingRank serves a request in one step, after which it no longer counts
// it, while the request's stream hands its output out one delta per poll:
// the rank holds no live request while process 0 is still owed output.
type owingRank struct{ waiting int }

func (r *owingRank) Step() (bool, error) {
	busy := r.waiting > 0
	r.waiting = 0
	return busy, nil
}

func (r *owingRank) State(s *RankState) {
	*s = RankState{Capacity: 1, Waiting: r.waiting, Hits: s.Hits[:0], Resident: s.Resident[:0]}
}

func (r *owingRank) Match(*RankState, []*executor.Request, Needs) {}

func (r *owingRank) Submit(context.Context, *executor.Request) (Stream, error) {
	r.waiting++
	return &owingStream{deltas: []executor.Delta{{TokenIDs: []int32{1}}, {TokenIDs: []int32{2}, FinishReason: executor.FinishLength}}}, nil
}

// owingStream is only polled (the embedded Stream is nil): every other
// TryRecv hands out its next delta, so each poll forwards one.
type owingStream struct {
	Stream
	deltas []executor.Delta
	rest   bool
}

func (s *owingStream) TryRecv() (executor.Delta, bool, error) {
	if len(s.deltas) == 0 {
		return executor.Delta{}, false, io.EOF
	}
	if s.rest = !s.rest; !s.rest {
		return executor.Delta{}, false, nil
	}
	d := s.deltas[0]
	s.deltas = s.deltas[1:]
	return d, true, nil
}

// TestProcessesIdleOnlyWhenNothingOwed: the deployment is idle only when no
// rank holds a live request and nothing is owed to process 0. Process 1's
// rank stops counting its request after one step while its output still
// takes two gathers to reach process 0: Step must not report idle before
// the client has its last token, since no new work would carry it.
func TestProcessesIdleOnlyWhenNothingOwed(t *testing.T) {
	g := newGroup(2)
	var ds [2]*Deployment
	var errs [2]error
	var wg sync.WaitGroup
	for q := range 2 { // New gathers: every process at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds[q], errs[q] = New(Config{Comm: party{g, q}, Router: onRank(1)}, []Rank{&owingRank{}})
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	h, err := ds[0].Submit(context.Background(), &executor.Request{PromptTokens: []int32{1, 2}, Params: sampling.DefaultParams()})
	require.NoError(t, err)
	for q := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				idle, err := ds[q].Step()
				if err != nil || idle {
					errs[q] = err
					return
				}
			}
		}()
	}
	testwait.Within(t, "both processes to go idle", func() struct{} { wg.Wait(); return struct{}{} })
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	st, err := h.Wait(testwait.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, 1, h.Rank())
	// No iteration follows an idle one without new work: what the relay
	// holds now is all the client gets.
	var got executor.Delta
	for {
		d, ok, err := st.(*executor.Stream).TryRecv()
		if err != nil || !ok {
			break
		}
		got.TokenIDs = append(got.TokenIDs, d.TokenIDs...)
		got.FinishReason = d.FinishReason
	}
	require.Equal(t, []int32{1, 2}, got.TokenIDs, "every token reached the client before the deployment went idle")
	require.Equal(t, executor.FinishLength, got.FinishReason)
	for q, d := range ds {
		require.NoError(t, d.Check(), "process %d", q)
		require.NoError(t, d.Close())
	}
}

// snapRank is an owingRank whose executor metrics are m.
type snapRank struct {
	owingRank
	m executor.Metrics
}

func (r *snapRank) Snapshot() executor.Metrics { return r.m }

// outputComm is process 0's end of one output gather of two processes, in
// which process 1 sends from1.
type outputComm struct {
	Local
	from1 []byte
}

func (outputComm) Size() int { return 2 }

func (c outputComm) GathervBytes(local []byte, counts []int, all []byte, root int) error {
	if root != 0 || len(counts) != 2 || counts[0] != len(local) || counts[1] != len(c.from1) || len(all) != len(local)+len(c.from1) {
		return fmt.Errorf("gatherv of %d and %d bytes (counts %v) into %d", len(local), len(c.from1), counts, len(all))
	}
	copy(all, local)
	copy(all[len(local):], c.from1)
	return nil
}

// TestOutputCarriesMetricsAheadOfAnEnd: the gather that brings process 0 a
// request's final output brings its rank's metrics with it, though the rank
// still has work and sent its metrics just before, and process 0 publishes
// them before the client's stream gets that output.
func TestOutputCarriesMetricsAheadOfAnEnd(t *testing.T) {
	var x1 crossing // process 1, whose rank (1) serves request 7
	x1.init(1, 2, 1, nil)
	x1.forwards[7] = &forward{s: &owingStream{deltas: []executor.Delta{{TokenIDs: []int32{5}, FinishReason: executor.FinishLength}}},
		cancel: func() {}}
	x1.sentAt, x1.unsent = time.Now(), true
	rank := &snapRank{m: executor.Metrics{Submitted: 2, Finished: 1}}
	x1.poll([]Rank{rank}, 1, []RankState{{Capacity: 2, Active: 1}})
	require.Empty(t, x1.forwards, "request 7's output is all in the outbox")

	var x0 crossing // process 0, which relays request 7 to its client
	x0.init(0, 2, 1, nil)
	x0.last = 7
	h := &Handle{ctx: context.Background(), req: &executor.Request{Params: sampling.DefaultParams()}, done: make(chan struct{})}
	st := x0.relay(h, 7, 1).(*executor.Stream)
	var reports []rankReport
	err := x0.gatherOutput(outputComm{from1: x1.outbox}, []ProcState{{}, {Out: len(x1.outbox)}}, func(r rankReport) {
		_, ok, err := st.TryRecv()
		require.NoError(t, err)
		require.False(t, ok, "rank metrics are published before the output they count reaches the client")
		reports = append(reports, r)
	})
	require.NoError(t, err)
	require.Len(t, reports, 1, "rank 1's metrics came with request 7's end")
	require.Equal(t, 1, reports[0].rank)
	require.Equal(t, uint64(2), reports[0].m.Submitted)
	require.Equal(t, uint64(1), reports[0].m.Finished)
	dl, ok, err := st.TryRecv()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, executor.FinishLength, dl.FinishReason)
	require.Equal(t, []int32{5}, dl.TokenIDs)
	require.NoError(t, x0.check())
}
