package gguf

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// TestModelFile is the real model the tests use, relative to the repository root.
const TestModelFile = "testdata/models/stories260K.gguf"

// TestModelPath finds stories260K.gguf for tests: $TURNSTILE_MODEL when set,
// else <repo>/testdata/models/stories260K.gguf where <repo> is the nearest
// directory at or above the working directory holding go.mod. The error
// tells the reader to run `make model`.
func TestModelPath() (string, error) {
	return repoFile(TestModelFile, "run `make model`")
}

// QuantFixtureDir is the directory of the llama.cpp-quantised fixtures
// (written by scripts/make-quant-fixtures.sh), relative to the repository root.
const QuantFixtureDir = "testdata/quant"

// QuantFixturePath finds file name in <repo>/testdata/quant.
func QuantFixturePath(name string) (string, error) {
	return repoFile(filepath.Join(QuantFixtureDir, name), "run scripts/make-quant-fixtures.sh")
}

// QuantFixtureModel rebuilds, in memory, the synthetic model that
// scripts/make-quant-fixtures.sh makes with `turnstile model synth` before
// llama.cpp quantises it: llama, dim 256, 1 layer, 4 heads, 1 kv head, the
// given ffn width, tied output, stories260K's tokenizer, seed 1, weights of
// type typ. It returns the file's bytes.
func QuantFixtureModel(typ GGMLType, ffn int) ([]byte, error) {
	c := LlamaConfig{Dim: 256, Layers: 1, Heads: 4, KVHeads: 1, FFN: ffn, ContextLength: 512, TiedOutput: true}
	return synthStoriesVocab(c, typ)
}

// synthStoriesVocab is SynthLlama of c with seed 1 and stories260K's
// tokenizer, as `turnstile model synth --seed 1 --vocab-from
// stories260K.gguf` writes it.
func synthStoriesVocab(c LlamaConfig, typ GGMLType) ([]byte, error) {
	p, err := TestModelPath()
	if err != nil {
		return nil, err
	}
	src, err := Open(p)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	toks, err := src.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	c.Vocab = len(toks)
	// The seed stream is the one cmd/turnstile's synth uses for --seed 1.
	w, err := SynthLlama(c, typ, rand.New(rand.NewPCG(1, 0x7475726e)))
	if err != nil {
		return nil, err
	}
	for _, kv := range src.Metadata {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			w.SetValue(kv.Key, kv.Value)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ArchFixtureDir holds llama.cpp's logits of the architecture fixtures
// (scripts/make-arch-fixtures.sh), relative to the repository root.
const ArchFixtureDir = "testdata/arch"

// ArchFixturePath finds file name in <repo>/testdata/arch.
func ArchFixturePath(name string) (string, error) {
	return repoFile(filepath.Join(ArchFixtureDir, name), "run scripts/make-arch-fixtures.sh")
}

// ArchFixture is one synthetic model of scripts/make-arch-fixtures.sh:
// its name (the fixture is <Name>.bin) and the configuration the script's
// `turnstile model synth` flags give (F32, seed 1, stories260K's tokenizer).
type ArchFixture struct {
	Name   string
	Config LlamaConfig
}

// ArchFixtures lists the architecture fixtures. The script must pass the
// same shapes as flags.
func ArchFixtures() []ArchFixture {
	base := LlamaConfig{Dim: 128, Layers: 2, Heads: 4, KVHeads: 2, FFN: 256, ContextLength: 512}
	llama3 := base
	llama3.RopeTheta, llama3.RopeScaling = 500000, "llama3"
	llama3.RopeScaleFactor, llama3.RopeLowFreqFactor, llama3.RopeHighFreqFactor, llama3.RopeOrigContext = 8, 1, 4, 32
	qwen2 := base
	qwen2.Arch, qwen2.QKVBias, qwen2.RopeTheta = "qwen2", true, 1000000
	qwen3 := base
	qwen3.Arch, qwen3.HeadDim, qwen3.TiedOutput, qwen3.RopeTheta = "qwen3", 64, true, 1000000
	return []ArchFixture{{"llama3", llama3}, {"qwen2", qwen2}, {"qwen3", qwen3}}
}

// ArchFixtureModel rebuilds, in memory, the F32 GGUF of the architecture
// fixture name.
func ArchFixtureModel(name string) ([]byte, error) {
	for _, a := range ArchFixtures() {
		if a.Name == name {
			return synthStoriesVocab(a.Config, TypeF32)
		}
	}
	return nil, fmt.Errorf("no architecture fixture %q", name)
}

// repoFile finds rel under the nearest directory at or above the working
// directory holding go.mod; hint says how to make a missing file.
func repoFile(rel, hint string) (string, error) {
	if p := os.Getenv("TURNSTILE_MODEL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("TURNSTILE_MODEL=%s: %w (run `make model`)", p, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("test file %s: %w", rel, err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, rel)
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("test file %s missing: %s: %w", p, hint, err)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("test file %s: no go.mod above the working directory; %s in the repository", rel, hint)
		}
		dir = parent
	}
}
