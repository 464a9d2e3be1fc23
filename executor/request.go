package executor

import (
	"errors"
	"fmt"
	"github.com/turnstile-llm/turnstile/grammar"

	"github.com/turnstile-llm/turnstile/sampling"
)

// Tokenizer is what the engine needs of a tokenizer (model/tokenizer's
// Tokenizer satisfies it).
type Tokenizer interface {
	// Encode turns text into token ids, with a leading BOS when addBOS.
	Encode(text string, addBOS bool) []int32
	// Piece is the bytes one token stands for: possibly an incomplete UTF-8
	// sequence (byte fallback), empty for control tokens. The engine joins
	// pieces and never emits half a character. The slice is read-only.
	//
	// Output text continues the prompt, so a SentencePiece leading space
	// is kept after prompt text; after a prompt with no text (only control
	// tokens such as BOS) the first text-bearing piece loses one leading
	// space when the tokenizer adds a space prefix (Encode("a") begins
	// with a space), as llama.cpp and model/tokenizer's NewDecoder do.
	Piece(id int32) []byte
	BOS() int32
	EOS() int32
	VocabSize() int
}

// Request is one generation request.
type Request struct {
	// Prompt is the text to continue; it is encoded with a BOS. Ignored when
	// PromptTokens is set.
	Prompt string
	// PromptTokens, when non-empty, is the prompt as token ids.
	PromptTokens []int32
	// MaxTokens bounds the generated tokens; 0 means up to the model context.
	MaxTokens int
	// Params are the sampling settings; Params.Logprobs asks for the
	// log-probability of every chosen token, Params.TopLogprobs for that many
	// most likely alternatives at each position (which implies Logprobs).
	// A zero Seed with HasSeed false gets a seed from the engine
	// (Config.Seed and arrival order).
	Params sampling.Params
	// Stop strings end generation when they appear in the output text
	// (matched across token boundaries); the match is excluded from the text.
	Stop []string
	// StopTokenIDs end generation when sampled (not emitted as text).
	StopTokenIDs []int32
	// IgnoreEOS keeps generating past EOS.
	IgnoreEOS bool
	// CacheSalt isolates prefix caching: requests with different salts never
	// share KV blocks.
	CacheSalt string
	// ProgramID groups requests of one agentic program: for the program
	// policy (Config.Programs), which runs one turn of a program at a time,
	// and for attention-DP's program-aware routing (Engine.HoldsProgram).
	ProgramID string
	// ProgramRelease ends the program when this request ends (finished or
	// aborted): its pinned KV is unpinned and its charge dropped. It
	// needs a ProgramID.
	ProgramRelease bool
	// Grammar constrains the output (structured output): every token is
	// drawn among those the grammar allows after the output so far, and a
	// stop token only once the output is a whole sentence of it. It needs
	// the engine's guided decoder (Config.Guide), and refuses IgnoreEOS
	// (the grammar decides where the output ends). Compiled grammars are
	// shared: many requests may hold one.
	Grammar *grammar.Grammar
}

// FinishReason says why a request ended.
type FinishReason string

const (
	FinishNone   FinishReason = ""
	FinishStop   FinishReason = "stop"   // EOS, stop token or stop string
	FinishLength FinishReason = "length" // max tokens or model context
	FinishAbort  FinishReason = "abort"  // context cancelled or engine shut down
)

// Usage counts a request's tokens.
type Usage struct {
	Prompt       int // prompt tokens
	Completion   int // generated tokens (incl. a final stop token)
	CachedPrompt int // prompt tokens served from the prefix cache at first admission
}

// validate checks r against the engine's limits and returns the prompt
// tokens. Errors name the offending field and value.
func (e *Engine) validate(r *Request) ([]int32, error) {
	if r == nil {
		return nil, errors.New("executor: nil request")
	}
	prompt := r.PromptTokens
	if len(prompt) == 0 {
		if r.Prompt == "" {
			return nil, errors.New("executor: prompt: empty (give Prompt or PromptTokens)")
		}
		prompt = e.tok.Encode(r.Prompt, true)
		if len(prompt) == 0 {
			return nil, fmt.Errorf("executor: prompt: %q encodes to no tokens", r.Prompt)
		}
	}
	vocab := e.capacity.Vocab
	for i, t := range prompt {
		if t < 0 || int(t) >= vocab {
			return nil, fmt.Errorf("executor: prompt_tokens[%d]: token %d outside vocab [0, %d)", i, t, vocab)
		}
	}
	if r.ProgramRelease && r.ProgramID == "" {
		return nil, errors.New("executor: program_release: needs a program id")
	}
	if r.MaxTokens < 0 {
		return nil, fmt.Errorf("executor: max_tokens: must be >= 0, got %d", r.MaxTokens)
	}
	if err := r.Params.Validate(vocab); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	for i, s := range r.Stop {
		if s == "" {
			return nil, fmt.Errorf("executor: stop[%d]: empty stop string", i)
		}
	}
	for i, t := range r.StopTokenIDs {
		if t < 0 || int(t) >= vocab {
			return nil, fmt.Errorf("executor: stop_token_ids[%d]: token %d outside vocab [0, %d)", i, t, vocab)
		}
	}
	if r.Grammar != nil {
		if e.cfg.Guide == nil {
			return nil, errors.New("executor: the request has a grammar, but this engine has no guided decoder (structured output is off)")
		}
		if r.IgnoreEOS {
			return nil, errors.New("executor: ignore_eos: not allowed with a grammar, which decides where the output ends")
		}
	}
	if len(prompt) >= e.capacity.MaxContext {
		return nil, fmt.Errorf("executor: prompt: %d tokens, but the model context is %d tokens (at least one must be left to generate)",
			len(prompt), e.capacity.MaxContext)
	}
	if err := e.kv.Fits(len(prompt) + 1); err != nil {
		return nil, fmt.Errorf("executor: prompt: %d tokens (+1 to generate) do not fit the KV pool: %w", len(prompt), err)
	}
	return prompt, nil
}

// Validate checks r as Submit would, without queueing it: a front end that
// places requests on engines in other processes (built alike) refuses a
// bad request before it travels. Errors name the field and value.
func (e *Engine) Validate(r *Request) error {
	_, err := e.validate(r)
	return err
}
