package gguf

import "testing"

func BenchmarkOpenStories(b *testing.B) {
	p, err := TestModelPath()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDequantizeQ8_0(b *testing.B) {
	src := make([]float32, 4096)
	for i := range src {
		src[i] = float32(i%97) - 48
	}
	q, err := Quantize(TypeQ8_0, src)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src) * 4))
	b.ReportAllocs()
	for b.Loop() {
		if err := Dequantize(TypeQ8_0, q, src); err != nil {
			b.Fatal(err)
		}
	}
}
