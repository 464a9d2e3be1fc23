package tokenizer

import (
	"strings"
	"testing"
)

var benchText = strings.Repeat("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ", 4)

func BenchmarkEncodeSPM(b *testing.B) {
	tk := stories(b)
	b.SetBytes(int64(len(benchText)))
	b.ReportAllocs()
	for b.Loop() {
		tk.Encode(benchText, true)
	}
}

func BenchmarkDecoderAdd(b *testing.B) {
	tk := stories(b)
	ids := tk.Encode(benchText, true)
	b.ReportAllocs()
	d := tk.NewDecoder()
	i := 0
	for b.Loop() {
		d.Add(ids[i%len(ids)])
		i++
	}
}
