package serveload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// MaxPromptWords bounds PromptLen.Max.
const MaxPromptWords = 1 << 16

// PromptLen is a prompt length distribution, in words: each prompt is that
// many words drawn uniformly (from the request's seeded RNG) from Words, a
// fixed vocabulary of 64 short story words, joined by single spaces, so
// its length is exact in words. Tokens per word depend on the server's
// tokenizer (each word is one to a few tokens). The zero value selects
// Config.Prompts instead.
type PromptLen struct {
	// Dist is "fixed" (every prompt Min words; Max == Min) or "uniform"
	// (each prompt's length drawn uniformly from [Min, Max], both
	// included).
	Dist     string
	Min, Max int
}

// IsZero reports whether p selects no distribution.
func (p PromptLen) IsZero() bool { return p == PromptLen{} }

// String is p in ParsePromptLen's format.
func (p PromptLen) String() string {
	if p.Dist == "fixed" {
		return "fixed:" + strconv.Itoa(p.Min)
	}
	return fmt.Sprintf("%s:%d-%d", p.Dist, p.Min, p.Max)
}

// ParsePromptLen parses "fixed:N" (N words) or "uniform:A-B" (A to B
// words, both included), 1 <= A <= B <= MaxPromptWords.
func ParsePromptLen(s string) (PromptLen, error) {
	dist, arg, ok := strings.Cut(s, ":")
	if !ok {
		return PromptLen{}, errors.New("want fixed:N or uniform:MIN-MAX (words)")
	}
	var p PromptLen
	var err error
	switch dist {
	case "fixed":
		p.Dist = dist
		if p.Min, err = strconv.Atoi(arg); err != nil {
			return PromptLen{}, fmt.Errorf("fixed length %q: not an integer", arg)
		}
		p.Max = p.Min
	case "uniform":
		p.Dist = dist
		lo, hi, ok := strings.Cut(arg, "-")
		if !ok {
			return PromptLen{}, fmt.Errorf("uniform range %q: want MIN-MAX", arg)
		}
		if p.Min, err = strconv.Atoi(lo); err != nil {
			return PromptLen{}, fmt.Errorf("uniform minimum %q: not an integer", lo)
		}
		if p.Max, err = strconv.Atoi(hi); err != nil {
			return PromptLen{}, fmt.Errorf("uniform maximum %q: not an integer", hi)
		}
	default:
		return PromptLen{}, fmt.Errorf("distribution %q: want fixed or uniform", dist)
	}
	return p, p.validate()
}

func (p PromptLen) validate() error {
	switch {
	case p.Dist != "fixed" && p.Dist != "uniform":
		return fmt.Errorf("distribution %q: want fixed or uniform", p.Dist)
	case p.Min < 1 || p.Max > MaxPromptWords || p.Min > p.Max:
		return fmt.Errorf("length %d-%d words: want 1 <= min <= max <= %d", p.Min, p.Max, MaxPromptWords)
	case p.Dist == "fixed" && p.Min != p.Max:
		return fmt.Errorf("fixed length with min %d != max %d", p.Min, p.Max)
	}
	return nil
}

// words draws one prompt's length.
func (p PromptLen) words(rng *rand.Rand) int {
	if p.Max == p.Min {
		return p.Min
	}
	return p.Min + rng.IntN(p.Max-p.Min+1)
}

// Words is PromptLen's vocabulary (a new slice each call).
func Words() []string { return append([]string(nil), vocabulary[:]...) }

var vocabulary = [64]string{
	"once", "upon", "a", "time", "there", "was", "little", "girl",
	"boy", "named", "lily", "tom", "who", "loved", "to", "play",
	"with", "her", "his", "big", "red", "ball", "in", "the",
	"park", "one", "day", "she", "he", "saw", "small", "bird",
	"dog", "cat", "tree", "and", "ran", "home", "mom", "said",
	"it", "happy", "sad", "friend", "they", "went", "garden", "flower",
	"sun", "bed", "warm", "box", "toy", "found", "jumped", "very",
	"fun", "look", "at", "sky", "blue", "water", "fish", "smiled",
}

// storyPrompt is n vocabulary words drawn from rng.
func storyPrompt(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 6)
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
	}
	return b.String()
}

// drawPrompt is one request's prompt and its length in words.
func (c *Config) drawPrompt(rng *rand.Rand) (string, int) {
	if !c.PromptLen.IsZero() {
		n := c.PromptLen.words(rng)
		return storyPrompt(rng, n), n
	}
	p := c.Prompts[rng.IntN(len(c.Prompts))]
	return p, len(strings.Fields(p))
}

// promptsLabel describes the prompt set for the Result.
func (c *Config) promptsLabel() string {
	if !c.PromptLen.IsZero() {
		return c.PromptLen.String() + " words"
	}
	lo, hi := MaxPromptWords, 0
	for _, p := range c.Prompts {
		n := len(strings.Fields(p))
		lo, hi = min(lo, n), max(hi, n)
	}
	return fmt.Sprintf("%d prompts of %d-%d words", len(c.Prompts), lo, hi)
}
