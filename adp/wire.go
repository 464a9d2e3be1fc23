package adp

import (
	"errors"
	"fmt"
	"math"
)

// Collective joins the processes of one deployment at the gather point.
// adp defines it and stays cgo-free; dist/mpi's World implements it across
// processes (one per GPU under mpirun), Local inside one process. Every
// process calls each method at the same point of the same iteration.
type Collective interface {
	// Rank is this process's index in [0, Size).
	Rank() int
	// Size is the number of processes.
	Size() int
	// AllgatherInt64 gathers every process's local (the same length on
	// each) into all, rank-major: len(all) == Size()·len(local).
	AllgatherInt64(local, all []int64) error
}

// Comm is the Collective a deployment across processes needs: the gather,
// plus bytes — process 0's broadcast of what every process applies each
// iteration (aborts, program releases, the pending new requests) and
// every process's output gathered back to process 0. dist/mpi's World
// implements it.
type Comm interface {
	Collective
	// BcastBytes copies root's buf into every process's buf (the same
	// length on each).
	BcastBytes(buf []byte, root int) error
	// GathervBytes gathers every process's local into root's all, process
	// by process: counts[p] is process p's length (the same counts on
	// every process; len(all) == Σ counts on root, ignored elsewhere).
	GathervBytes(local []byte, counts []int, all []byte, root int) error
}

// Local is the Comm of a deployment whose ranks all live in this process:
// one process, and every collective is a copy.
type Local struct{}

// Rank is 0.
func (Local) Rank() int { return 0 }

// Size is 1.
func (Local) Size() int { return 1 }

// AllgatherInt64 copies local into all.
func (Local) AllgatherInt64(local, all []int64) error {
	if len(all) != len(local) {
		return fmt.Errorf("adp: local allgather of %d values into %d", len(local), len(all))
	}
	copy(all, local)
	return nil
}

// BcastBytes does nothing: the one process is the root.
func (Local) BcastBytes(buf []byte, root int) error {
	if root != 0 {
		return fmt.Errorf("adp: local broadcast from root %d, want 0", root)
	}
	return nil
}

// GathervBytes copies local into all.
func (Local) GathervBytes(local []byte, counts []int, all []byte, root int) error {
	if root != 0 || len(counts) != 1 || counts[0] != len(local) || len(all) != len(local) {
		return fmt.Errorf("adp: local gatherv of %d bytes (counts %v) into %d at root %d", len(local), counts, len(all), root)
	}
	copy(all, local)
	return nil
}

// maxWireCount bounds a gathered count: far above any real rank (2^48
// tokens), far below what garbage from a broken peer usually holds.
const maxWireCount = 1 << 48

// CountWords is the fixed width, in int64s, of one rank's counts on the
// wire: capacity, active, active tokens, waiting, waiting tokens, retiring,
// retiring tokens. It is what the gather exchanges every iteration.
const CountWords = 7

// MatchWords is the fixed width of one rank's match report for at most w
// pending requests: the lengths of Hits and Resident, then
// Hits and Resident each padded to w.
func MatchWords(w int) int { return 2 + 2*w }

// PutCounts writes s's counts to dst (len CountWords).
func (s *RankState) PutCounts(dst []int64) {
	_ = dst[CountWords-1]
	dst[0], dst[1], dst[2] = int64(s.Capacity), int64(s.Active), int64(s.ActiveTokens)
	dst[3], dst[4] = int64(s.Waiting), int64(s.WaitingTokens)
	dst[5], dst[6] = int64(s.Retiring), int64(s.RetiringTokens)
}

// SetCounts reads s's counts from src (len CountWords), leaving Hits and
// Resident alone. A negative count, or one beyond int, is an error naming
// it: a rank's state arrives from another process.
func (s *RankState) SetCounts(src []int64) error {
	if len(src) != CountWords {
		return fmt.Errorf("adp: rank counts of %d words, want %d", len(src), CountWords)
	}
	names := [CountWords]string{"capacity", "active", "active tokens", "waiting", "waiting tokens", "retiring", "retiring tokens"}
	for i, v := range src {
		if v < 0 || v > maxWireCount {
			return fmt.Errorf("adp: rank %s %d outside [0, %d]", names[i], v, int64(maxWireCount))
		}
	}
	s.Capacity, s.Active, s.ActiveTokens = int(src[0]), int(src[1]), int(src[2])
	s.Waiting, s.WaitingTokens = int(src[3]), int(src[4])
	s.Retiring, s.RetiringTokens = int(src[5]), int(src[6])
	return nil
}

// PutMatches writes s's match report (Hits and Resident, each at most w
// long) to dst (len MatchWords(w)).
func (s *RankState) PutMatches(dst []int64, w int) error {
	if len(dst) != MatchWords(w) {
		return fmt.Errorf("adp: match report of %d words, want %d for %d pending requests", len(dst), MatchWords(w), w)
	}
	if len(s.Hits) > w || len(s.Resident) > w {
		return fmt.Errorf("adp: rank reports %d hits and %d residencies for %d pending requests", len(s.Hits), len(s.Resident), w)
	}
	clear(dst)
	dst[0], dst[1] = int64(len(s.Hits)), int64(len(s.Resident))
	for j, h := range s.Hits {
		dst[2+j] = int64(h)
	}
	for j, r := range s.Resident {
		if r {
			dst[2+w+j] = 1
		}
	}
	return nil
}

// SetMatches reads s's Hits and Resident from src (len MatchWords(w)),
// reusing their capacity.
func (s *RankState) SetMatches(src []int64, w int) error {
	if len(src) != MatchWords(w) {
		return fmt.Errorf("adp: match report of %d words, want %d for %d pending requests", len(src), MatchWords(w), w)
	}
	nh, nr := src[0], src[1]
	if nh < 0 || nh > int64(w) || nr < 0 || nr > int64(w) {
		return fmt.Errorf("adp: match report of %d hits and %d residencies for %d pending requests", nh, nr, w)
	}
	s.Hits, s.Resident = s.Hits[:0], s.Resident[:0]
	for _, h := range src[2 : 2+nh] {
		if h < math.MinInt32 || h > math.MaxInt32 {
			return fmt.Errorf("adp: match report hit %d outside int32", h)
		}
		s.Hits = append(s.Hits, int(h))
	}
	for _, r := range src[2+w : 2+w+int(nr)] {
		if r != 0 && r != 1 {
			return fmt.Errorf("adp: match report residency %d, want 0 or 1", r)
		}
		s.Resident = append(s.Resident, r == 1)
	}
	return nil
}

// Exchange is the gather point on the wire: it moves rank states between
// the processes of a deployment as fixed-size int64 rows, so every process
// decodes the same states and its router places identically. Its buffers
// are reused across iterations; the zero value is ready. Not safe for
// concurrent use.
type Exchange struct {
	local, all []int64
}

// Counts exchanges the counts of local (this process's ranks, the same
// number on every process) through c into all (every rank, rank-major:
// process p's ranks at [p·len(local), (p+1)·len(local))): one allgather of
// CountWords words per rank.
func (x *Exchange) Counts(c Collective, local, all []RankState) error {
	return x.gather(c, local, all, CountWords, func(s *RankState, dst []int64) error { s.PutCounts(dst); return nil },
		func(s *RankState, src []int64) error { return s.SetCounts(src) })
}

// Matches exchanges the match reports (Hits, Resident) of local through c
// into all, for at most w pending requests: one allgather of
// MatchWords(w) words per rank.
func (x *Exchange) Matches(c Collective, local, all []RankState, w int) error {
	return x.gather(c, local, all, MatchWords(w), func(s *RankState, dst []int64) error { return s.PutMatches(dst, w) },
		func(s *RankState, src []int64) error { return s.SetMatches(src, w) })
}

func (x *Exchange) gather(c Collective, local, all []RankState, words int,
	put func(*RankState, []int64) error, set func(*RankState, []int64) error) error {
	if n := c.Size() * len(local); n != len(all) {
		return fmt.Errorf("adp: %d processes × %d local ranks = %d, but the deployment has %d ranks", c.Size(), len(local), n, len(all))
	}
	x.local = resize64(x.local, len(local)*words)
	x.all = resize64(x.all, len(all)*words)
	for i := range local {
		if err := put(&local[i], x.local[i*words:(i+1)*words]); err != nil {
			return fmt.Errorf("adp: rank %d: %w", c.Rank()*len(local)+i, err)
		}
	}
	if err := c.AllgatherInt64(x.local, x.all); err != nil {
		return fmt.Errorf("adp: gather: %w", err)
	}
	var errs []error
	for i := range all {
		if err := set(&all[i], x.all[i*words:(i+1)*words]); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("adp: gathered state: %w", errors.Join(errs...))
	}
	return nil
}

func resize64(s []int64, n int) []int64 {
	if cap(s) < n {
		return make([]int64, n)
	}
	return s[:n]
}

// ProcWords is the width, in int64s, of one process's own words in the
// deployment's gather, after its ranks' counts: queued, control, out,
// open, stop.
const ProcWords = 5

// ProcState is what one process reports at the deployment's gather besides
// its ranks' counts: what every process needs to make the same decisions
// (whether a broadcast, an output gather or another iteration follows).
type ProcState struct {
	// Queued is the requests waiting at the process's front end (process 0's;
	// 0 elsewhere), and Control the aborts and program releases it will
	// broadcast this iteration.
	Queued, Control int
	// Out is the bytes of output records the process sends process 0 at this
	// gather; Open is what it still owes process 0 (requests whose output
	// is not all sent, answers process 0 awaits), which keeps the deployment
	// from going idle.
	Out, Open int
	// Stop: the process is shutting down; every process stops at this
	// gather.
	Stop bool
}

func (p *ProcState) put(dst []int64) {
	dst[0], dst[1], dst[2], dst[3], dst[4] = int64(p.Queued), int64(p.Control), int64(p.Out), int64(p.Open), 0
	if p.Stop {
		dst[4] = 1
	}
}

func (p *ProcState) set(src []int64) error {
	names := [...]string{"queued", "control", "out bytes", "open"}
	for i, v := range src[:4] {
		if v < 0 || v > maxWireCount {
			return fmt.Errorf("adp: process %s %d outside [0, %d]", names[i], v, int64(maxWireCount))
		}
	}
	if src[2] > math.MaxInt32 {
		return fmt.Errorf("adp: process sends %d bytes at once, more than one gather carries (%d)", src[2], math.MaxInt32)
	}
	if src[4] != 0 && src[4] != 1 {
		return fmt.Errorf("adp: process stop flag %d, want 0 or 1", src[4])
	}
	*p = ProcState{Queued: int(src[0]), Control: int(src[1]), Out: int(src[2]), Open: int(src[3]), Stop: src[4] == 1}
	return nil
}

// PatientCollective is a Collective whose allgather can wait without
// spinning a core (dist/mpi's World polls a nonblocking one and sleeps).
// Every process must choose it at the same point: MPI never matches a
// nonblocking collective with a blocking one.
type PatientCollective interface {
	AllgatherInt64Patient(local, all []int64) error
}

// Gather is the deployment's gather: one allgather of every rank's counts
// (local: this process's ranks, the same number on every process; all:
// every rank, rank-major) and every process's own words (p: this
// process's; ps: every process's, len c.Size()). patient, decided alike
// on every process, uses c's PatientCollective allgather when it has one:
// for a gather that may wait long (the deployment was idle).
func (x *Exchange) Gather(c Collective, local, all []RankState, p *ProcState, ps []ProcState, patient bool) error {
	size, L := c.Size(), len(local)
	if n := size * L; n != len(all) {
		return fmt.Errorf("adp: %d processes × %d local ranks = %d, but the deployment has %d ranks", size, L, n, len(all))
	}
	if len(ps) != size {
		return fmt.Errorf("adp: %d process states for %d processes", len(ps), size)
	}
	words := L*CountWords + ProcWords
	x.local = resize64(x.local, words)
	x.all = resize64(x.all, size*words)
	for i := range local {
		local[i].PutCounts(x.local[i*CountWords : (i+1)*CountWords])
	}
	p.put(x.local[L*CountWords:])
	gather := c.AllgatherInt64
	if pc, ok := c.(PatientCollective); ok && patient {
		gather = pc.AllgatherInt64Patient
	}
	if err := gather(x.local, x.all); err != nil {
		return fmt.Errorf("adp: gather: %w", err)
	}
	var errs []error
	for q := range size {
		row := x.all[q*words : (q+1)*words]
		for i := range L {
			if err := all[q*L+i].SetCounts(row[i*CountWords : (i+1)*CountWords]); err != nil {
				errs = append(errs, fmt.Errorf("rank %d: %w", q*L+i, err))
			}
		}
		if err := ps[q].set(row[L*CountWords:]); err != nil {
			errs = append(errs, fmt.Errorf("process %d: %w", q, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("adp: gathered state: %w", errors.Join(errs...))
	}
	return nil
}
