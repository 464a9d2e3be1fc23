package seatpool

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSeats(t *testing.T) {
	tests := []struct {
		name    string
		in      Sizing
		want    int
		wantErr string
	}{
		{"overlap off", Sizing{MaxBatchSize: 8}, 8, ""},
		{"overlap off, deferred teardown", Sizing{MaxBatchSize: 8, DeferredTeardown: true}, 8, ""},
		{"overlap on, immediate teardown", Sizing{MaxBatchSize: 8, Overlap: true}, 8, ""},
		{"overlap on, deferred teardown", Sizing{MaxBatchSize: 8, Overlap: true, DeferredTeardown: true}, 16, ""},
		{"batch of one with headroom", Sizing{MaxBatchSize: 1, Overlap: true, DeferredTeardown: true}, 2, ""},
		{"largest batch", Sizing{MaxBatchSize: MaxSeats / 2, Overlap: true, DeferredTeardown: true}, MaxSeats / 2 * 2, ""},
		{"zero batch", Sizing{MaxBatchSize: 0}, 0, "seatpool: max batch size 0: must be > 0"},
		{"negative batch", Sizing{MaxBatchSize: -3, Overlap: true}, 0, "seatpool: max batch size -3: must be > 0"},
		{"batch too large", Sizing{MaxBatchSize: MaxSeats/2 + 1}, 0, "seatpool: max batch size 536870912: must be <= 536870911"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Seats(tc.in)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, got-tc.in.MaxBatchSize, tc.in.Headroom())
		})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		seats   int
		wantErr string
	}{
		{1, ""},
		{33, ""},
		{0, "seatpool: 0 seats: must be in 1..1073741823"},
		{-1, "seatpool: -1 seats: must be in 1..1073741823"},
		{MaxSeats + 1, "seatpool: 1073741824 seats: must be in 1..1073741823"},
	}
	for _, tc := range tests {
		p, err := New(tc.seats)
		if tc.wantErr != "" {
			require.EqualError(t, err, tc.wantErr)
			require.Nil(t, p)
			continue
		}
		require.NoError(t, err)
		require.NoError(t, p.Check())
		require.Equal(t, tc.seats, p.Seats())
		require.Equal(t, tc.seats, p.Free())
		require.Zero(t, p.Live())
		require.Zero(t, p.Retiring())
	}
}

// op is one pool operation in a scripted table test.
type op struct {
	kind    string // "acquire", "retire", "release"
	seat    Seat   // for retire/release; for acquire, the seat expected
	wantErr string // exact error, or "" for success
}

func TestOperations(t *testing.T) {
	tests := []struct {
		name  string
		seats int
		ops   []op
		// counts after the last op
		free, live, retiring int
	}{
		{"acquire in ascending order", 3, []op{
			{"acquire", 0, ""}, {"acquire", 1, ""}, {"acquire", 2, ""},
		}, 0, 3, 0},
		{"acquire when full", 2, []op{
			{"acquire", 0, ""}, {"acquire", 1, ""},
			{"acquire", -1, "seatpool: no free seat: 2 seats, 2 live, 0 retiring"},
		}, 0, 2, 0},
		{"retiring seats still block acquire", 2, []op{
			{"acquire", 0, ""}, {"acquire", 1, ""}, {"retire", 0, ""},
			{"acquire", -1, "seatpool: no free seat: 2 seats, 1 live, 1 retiring"},
		}, 0, 1, 1},
		{"retire then release", 2, []op{
			{"acquire", 0, ""}, {"retire", 0, ""}, {"release", 0, ""},
		}, 2, 0, 0},
		{"release live (abort)", 2, []op{
			{"acquire", 0, ""}, {"release", 0, ""},
		}, 2, 0, 0},
		{"released seat is reused first", 3, []op{
			{"acquire", 0, ""}, {"acquire", 1, ""}, {"release", 0, ""}, {"acquire", 0, ""},
			{"retire", 1, ""}, {"release", 1, ""}, {"acquire", 1, ""}, {"acquire", 2, ""},
		}, 0, 3, 0},
		{"release free seat", 2, []op{
			{"release", 1, "seatpool: release seat 1: seat is free"},
		}, 2, 0, 0},
		{"double release", 2, []op{
			{"acquire", 0, ""}, {"release", 0, ""},
			{"release", 0, "seatpool: release seat 0: seat is free"},
		}, 2, 0, 0},
		{"retire free seat", 2, []op{
			{"retire", 0, "seatpool: retire seat 0: seat is free"},
		}, 2, 0, 0},
		{"retire twice", 2, []op{
			{"acquire", 0, ""}, {"retire", 0, ""},
			{"retire", 0, "seatpool: retire seat 0: seat is retiring"},
		}, 1, 0, 1},
		{"seat past the pool", 2, []op{
			{"retire", 2, "seatpool: retire seat 2: outside the pool of 2 seats"},
			{"release", 2, "seatpool: release seat 2: outside the pool of 2 seats"},
		}, 2, 0, 0},
		{"negative seat", 2, []op{
			{"retire", -1, "seatpool: retire seat -1: outside the pool of 2 seats"},
			{"release", -1, "seatpool: release seat -1: outside the pool of 2 seats"},
		}, 2, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.seats)
			require.NoError(t, err)
			for i, o := range tc.ops {
				before := snapshot(p)
				var err error
				switch o.kind {
				case "acquire":
					var s Seat
					s, err = p.Acquire()
					if o.wantErr == "" {
						require.Equal(t, o.seat, s, "op %d", i)
						require.Equal(t, Live, p.State(s))
					} else {
						require.ErrorIs(t, err, ErrNoSeat)
					}
				case "retire":
					err = p.Retire(o.seat)
					if o.wantErr == "" {
						require.Equal(t, Retiring, p.State(o.seat))
					}
				case "release":
					err = p.Release(o.seat)
					if o.wantErr == "" {
						require.Equal(t, Free, p.State(o.seat))
					}
				default:
					t.Fatalf("unknown op %q", o.kind)
				}
				if o.wantErr != "" {
					require.EqualError(t, err, o.wantErr, "op %d", i)
					require.Equal(t, before, snapshot(p), "failed op %d changed the pool", i)
				} else {
					require.NoError(t, err, "op %d", i)
				}
				require.NoError(t, p.Check(), "op %d", i)
				require.Equal(t, p.Seats(), p.Free()+p.Live()+p.Retiring())
			}
			require.Equal(t, tc.free, p.Free())
			require.Equal(t, tc.live, p.Live())
			require.Equal(t, tc.retiring, p.Retiring())
		})
	}
}

// snapshot copies everything observable, to prove failed ops change nothing.
func snapshot(p *Pool) []int {
	out := []int{p.Free(), p.Live(), p.Retiring()}
	for s := range p.Seats() {
		out = append(out, int(p.State(Seat(s))))
	}
	return out
}

func TestStateString(t *testing.T) {
	tests := []struct {
		s    State
		want string
	}{
		{Free, "free"}, {Live, "live"}, {Retiring, "retiring"}, {Invalid, "invalid"}, {State(9), "State(9)"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.s.String())
	}
}

func TestStateOutsidePool(t *testing.T) {
	p, err := New(2)
	require.NoError(t, err)
	for _, s := range []Seat{-1, 2, 1 << 30} {
		require.Equal(t, Invalid, p.State(s))
	}
	require.Equal(t, Free, p.State(1))
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		seats     int
		consumers []Consumer
		wantErr   string
	}{
		{"all agree", 32, []Consumer{{"sampler state", 32}, {"block-table rows", 32}, {"runner buffers", 32}}, ""},
		{"no consumers", 32, nil, ""},
		{"pool larger than consumer", 33, []Consumer{{"sampler state", 32}},
			"seat pool has 33 seats but sampler state holds 32: seat 32 would index past it"},
		{"pool much larger", 16, []Consumer{{"runner buffers", 8}},
			"seat pool has 16 seats but runner buffers holds 8: seats 8..15 would index past it"},
		{"pool smaller than consumer", 32, []Consumer{{"block-table rows", 33}},
			"seat pool has 32 seats but block-table rows holds 33: 1 admitted sequence would have no seat"},
		{"pool much smaller", 8, []Consumer{{"block-table rows", 16}},
			"seat pool has 8 seats but block-table rows holds 16: 8 admitted sequences would have no seat"},
		{"both directions joined", 16, []Consumer{
			{"sampler state", 16}, {"runner buffers", 8}, {"block-table rows", 24},
		}, "seat pool has 16 seats but runner buffers holds 8: seats 8..15 would index past it\n" +
			"seat pool has 16 seats but block-table rows holds 24: 8 admitted sequences would have no seat"},
		{"bad consumers", 4, []Consumer{{"", 4}, {"sampler state", 0}, {"draft state", -2}},
			"seatpool: consumer 0 (holds 4) has no owner name\n" +
				"seatpool: sampler state holds 0 sequences: must be > 0\n" +
				"seatpool: draft state holds -2 sequences: must be > 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.seats)
			require.NoError(t, err)
			err = p.Validate(tc.consumers...)
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.EqualError(t, err, tc.wantErr)
			}
			require.NoError(t, p.Check())
		})
	}
}

// TestValidateSizedFromSeats is the seed-004 regression: a consumer sized
// with its own formula instead of Seats must fail start-up, whichever way the
// two formulas disagree.
func TestValidateSizedFromSeats(t *testing.T) {
	tests := []struct {
		name   string
		sizing Sizing
		holds  int // what a consumer using its own formula allocated
		ok     bool
	}{
		{"consumer ignores headroom", Sizing{MaxBatchSize: 16, Overlap: true, DeferredTeardown: true}, 16, false},
		{"consumer adds headroom overlap-off", Sizing{MaxBatchSize: 16}, 32, false},
		{"consumer adds one", Sizing{MaxBatchSize: 32}, 33, false},
		{"consumer uses Seats", Sizing{MaxBatchSize: 16, Overlap: true, DeferredTeardown: true}, 32, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Seats(tc.sizing)
			require.NoError(t, err)
			p, err := New(n)
			require.NoError(t, err)
			err = p.Validate(Consumer{"speculative-decoding slots", tc.holds})
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				require.Contains(t, err.Error(), "speculative-decoding slots")
			}
		})
	}
}

func TestCheckCatchesCorruption(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(p *Pool)
		wantErr string
	}{
		{"unknown state", func(p *Pool) { p.state[1] = Invalid }, "seatpool: seat 1 in unknown state invalid"},
		{"live count off", func(p *Pool) { p.live++ }, "seatpool: counts free/live/retiring 2/2/0, states say 2/1/0"},
		{"retiring count off", func(p *Pool) { p.retir = 1 }, "seatpool: counts free/live/retiring 2/1/1, states say 2/1/0"},
		{"state flipped without stack", func(p *Pool) { p.state[0] = Free }, "seatpool: counts free/live/retiring 2/1/0, states say 3/0/0"},
		{"duplicate on stack", func(p *Pool) { p.free[0] = p.free[1] }, "seatpool: seat 1 on the free stack twice"},
		{"live seat on stack", func(p *Pool) { p.free[1] = 0 }, "seatpool: seat 0 on the free stack is live"},
		{"stack entry out of range", func(p *Pool) { p.free[0] = 7 }, "seatpool: free stack entry 0 is seat 7, outside the pool of 3 seats"},
		{"free count out of range", func(p *Pool) { p.nfree = 4 }, "seatpool: free count 4 outside 0..3"},
		{"stack truncated", func(p *Pool) { p.free = p.free[:2] }, "seatpool: free stack capacity 2, want 3 seats"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(3)
			require.NoError(t, err)
			s, err := p.Acquire()
			require.NoError(t, err)
			require.Equal(t, Seat(0), s)
			require.NoError(t, p.Check())
			tc.corrupt(p)
			require.EqualError(t, p.Check(), tc.wantErr)
		})
	}
}

// FuzzOps drives random acquire/retire/release sequences, compares the pool
// with a plain model after every op, checks invariants, and finally tears
// everything down and expects every seat free.
func FuzzOps(f *testing.F) {
	f.Add(uint8(4), []byte{0, 0, 0, 1, 2, 5, 0, 0, 0})
	f.Add(uint8(1), []byte{0, 0, 1, 1, 2, 2})
	f.Add(uint8(0), []byte{})
	f.Add(uint8(16), []byte{0, 0, 0, 0, 4, 9, 13, 0, 0, 255, 254, 3, 0, 7})
	f.Fuzz(func(t *testing.T, n uint8, ops []byte) {
		seats := int(n%64) + 1
		p, err := New(seats)
		require.NoError(t, err)
		model := make([]State, seats)
		var held []Seat // live or retiring, in acquisition order
		for i, b := range ops {
			// Low two bits pick the op; the rest picks a seat, sometimes out
			// of range or in the wrong state on purpose.
			target := Seat(int(b>>2) - 1)
			if len(held) > 0 && b&0x80 == 0 {
				target = held[int(b>>2)%len(held)]
			}
			switch b & 3 {
			case 0, 3:
				s, err := p.Acquire()
				if len(held) == seats {
					require.ErrorIs(t, err, ErrNoSeat, "op %d", i)
					break
				}
				require.NoError(t, err, "op %d", i)
				require.Equal(t, Free, model[s], "op %d: acquired seat %d was %s", i, s, model[s])
				model[s] = Live
				held = append(held, s)
			case 1:
				err := p.Retire(target)
				if target >= 0 && int(target) < seats && model[target] == Live {
					require.NoError(t, err, "op %d", i)
					model[target] = Retiring
				} else {
					require.Error(t, err, "op %d", i)
				}
			case 2:
				err := p.Release(target)
				if target >= 0 && int(target) < seats && model[target] != Free {
					require.NoError(t, err, "op %d", i)
					model[target] = Free
					held = remove(held, target)
				} else {
					require.Error(t, err, "op %d", i)
				}
			}
			require.NoError(t, p.Check(), "op %d", i)
			requireMatches(t, p, model)
		}
		for _, s := range held {
			if p.State(s) == Live && s%2 == 0 {
				require.NoError(t, p.Retire(s))
			}
			require.NoError(t, p.Release(s))
			require.NoError(t, p.Check())
		}
		require.Equal(t, seats, p.Free())
		require.Zero(t, p.Live())
		require.Zero(t, p.Retiring())
	})
}

func remove(held []Seat, s Seat) []Seat {
	for i, h := range held {
		if h == s {
			return append(held[:i], held[i+1:]...)
		}
	}
	return held
}

func requireMatches(t *testing.T, p *Pool, model []State) {
	t.Helper()
	var counts [3]int
	for s, st := range model {
		// Plain comparison first: require per seat is too slow for long
		// fuzz inputs.
		if got := p.State(Seat(s)); got != st {
			t.Fatalf("seat %d is %s, model says %s", s, got, st)
		}
		counts[st]++
	}
	require.Equal(t, counts[Free], p.Free())
	require.Equal(t, counts[Live], p.Live())
	require.Equal(t, counts[Retiring], p.Retiring())
}

func TestErrNoSeatIsSentinel(t *testing.T) {
	p, err := New(1)
	require.NoError(t, err)
	_, err = p.Acquire()
	require.NoError(t, err)
	_, err = p.Acquire()
	require.True(t, errors.Is(err, ErrNoSeat))
}

func TestAcquireReleaseAllocs(t *testing.T) {
	p, err := New(8)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		s, err := p.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Retire(s); err != nil {
			t.Fatal(err)
		}
		if err := p.Release(s); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
	require.NoError(t, p.Check())
}

func BenchmarkAcquireRelease(b *testing.B) {
	p, err := New(64)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		s, err := p.Acquire()
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Release(s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAcquireRetireRelease(b *testing.B) {
	p, err := New(64)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		s, err := p.Acquire()
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Retire(s); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(s); err != nil {
			b.Fatal(err)
		}
	}
}
