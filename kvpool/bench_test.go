package kvpool

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// cpuTime is this process's user+system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds a "cpu-ns/op" metric: process CPU time per op, which a
// shared, oversubscribed machine inflates far less than wall time (ns/op).
// Call it right after ResetTimer; it reports when the benchmark ends.
func reportCPU(b *testing.B) {
	start := cpuTime(b)
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		}
	})
}

// benchSeq runs NewSeq + MatchPrefix + Append + Release of one 2,048-token
// sequence at block size 16. cold changes the first token every iteration so
// nothing hits (and, once the pool is full, every block evicts a cached one).
func benchSeq(b *testing.B, cold bool) {
	p, err := New(Config{NumBlocks: 4096, BlockSize: 16})
	if err != nil {
		b.Fatal(err)
	}
	toks := seqTokens(0, 2048)
	k := Keys{Model: "m"}
	wantHit := 0
	if !cold {
		wantHit = 2048 - 16
	}
	run := func(first int32) int {
		toks[0] = first
		s := p.NewSeq(k)
		hit, err := p.MatchPrefix(s, toks)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Append(s, toks[hit:]); err != nil {
			b.Fatal(err)
		}
		p.Release(s)
		return hit
	}
	// Warm up: fill the cache so the cold case measures eviction too.
	for i := 0; i < 64; i++ {
		run(int32(-1 - i))
	}
	run(-1) // the full-hit case looks this one up
	b.ReportAllocs()
	b.ResetTimer()
	reportCPU(b)
	for i := int32(0); b.Loop(); i++ {
		first := int32(-1)
		if cold {
			first = i
		}
		if hit := run(first); hit != wantHit {
			b.Fatalf("hit %d tokens, want %d", hit, wantHit)
		}
	}
	b.StopTimer()
	if err := p.Check(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkSeq2048Cold(b *testing.B)    { benchSeq(b, true) }
func BenchmarkSeq2048FullHit(b *testing.B) { benchSeq(b, false) }

// benchPrefix32K publishes a 32,768-token sequence (2,048 blocks) and looks it up.
func benchPrefix32K(b *testing.B, match bool) {
	p, err := New(Config{NumBlocks: 4096, BlockSize: 16})
	if err != nil {
		b.Fatal(err)
	}
	toks := seqTokens(0, 32768)
	k := Keys{Model: "m"}
	s := p.NewSeq(k)
	if err := p.Append(s, toks); err != nil {
		b.Fatal(err)
	}
	p.Release(s)
	const want = 32768 - 16
	b.ReportAllocs()
	b.ResetTimer()
	reportCPU(b)
	for b.Loop() {
		if match {
			s := p.NewSeq(k)
			if hit, err := p.MatchPrefix(s, toks); err != nil || hit != want {
				b.Fatalf("hit %d, err %v", hit, err)
			}
			p.Release(s)
		} else if hit := p.PeekPrefix(k, toks); hit != want {
			b.Fatalf("hit %d", hit)
		}
	}
}

func BenchmarkPeekPrefix32K(b *testing.B)  { benchPrefix32K(b, false) }
func BenchmarkMatchPrefix32K(b *testing.B) { benchPrefix32K(b, true) }

// BenchmarkChainReset2048 is the cost of hashing a 2,048-token prompt into
// a Chain (128 blocks), as the executor does once per request at Submit.
func BenchmarkChainReset2048(b *testing.B) {
	toks := seqTokens(0, 2048)
	var c Chain
	b.ReportAllocs()
	reportCPU(b)
	for b.Loop() {
		if err := c.Reset(Keys{Model: "m"}, 16, toks); err != nil {
			b.Fatal(err)
		}
	}
	if c.Blocks() != 128 {
		b.Fatalf("%d blocks, want 128", c.Blocks())
	}
}

// BenchmarkBlockHash is the cost of hashing one 16-token block (SHA-256).
func BenchmarkBlockHash(b *testing.B) {
	p, err := New(Config{NumBlocks: 1})
	if err != nil {
		b.Fatal(err)
	}
	toks := seqTokens(0, 16)
	var h Hash
	reportCPU(b)
	for b.Loop() {
		h = p.blockHash(h, toks)
	}
}

// BenchmarkMetadata1M reports the pool's metadata bytes per block at 1M blocks.
func BenchmarkMetadata1M(b *testing.B) {
	const n = 1 << 20
	var perBlock float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p, err := New(Config{NumBlocks: n, BlockSize: 16})
		if err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		perBlock = float64(after.TotalAlloc-before.TotalAlloc) / n
		runtime.KeepAlive(p)
	}
	b.ReportMetric(perBlock, "B/block")
}
