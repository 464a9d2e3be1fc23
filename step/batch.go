package step

import "github.com/turnstile-llm/turnstile/sampling"

// FutureToken in Batch.Tokens stands for "the token this sequence's seat
// sampled in the previous step". The overlap scheduler plans step n+1 before
// step n's tokens reach the host; the runner substitutes the value where it
// was produced (its own per-seat last-token row), so no host round trip is
// needed between steps.
const FutureToken int32 = -1

// SeqBatch is one sequence's slice of a Batch.
type SeqBatch struct {
	// Seat is the sequence's seat index (seatpool): its row in every
	// seat-indexed buffer of the runner (sampler state, last-token row, ...).
	Seat int32
	// TokenStart and NumTokens select this sequence's new tokens in
	// Batch.Tokens/Batch.Positions (varlen layout). NumTokens ≥ 1.
	TokenStart int32
	NumTokens  int32
	// ContextLen is the number of tokens in the sequence's KV cache after this
	// step, i.e. the position of its last new token + 1.
	ContextLen int32
	// BlockTable lists the kvpool block ids holding positions
	// [0, ContextLen) in order; block i holds positions [i*bs, (i+1)*bs).
	// The slice is owned by the caller and valid until Execute returns.
	BlockTable []int32
	// Sample asks for a token for this sequence (decode, or the last chunk
	// of a prefill). When false the step only fills the KV cache.
	Sample bool
	// Constrained says the token is drawn under its row of Batch.Masks
	// (structured output). It is known when the step is planned, the row
	// only just before sampling: a runner that samples some sequences on
	// the device samples these where it can apply the row.
	Constrained bool
	// Start marks the sequence's first step at this seat: the runner resets
	// the seat's sampler state from Params and History.
	Start bool
	// Params is the sequence's sampling settings; read when Start is set.
	Params *sampling.Params
	// History is the sequence's context so far: the prompt (all tokens
	// before the first generated one), then, for a sequence resumed after
	// preemption by recompute, the tokens it already generated. It is read
	// when Start is set so that penalties see prefix-cached tokens the
	// runner never receives as input.
	History []int32
	// NumOutput, read with Start, says that the last NumOutput tokens of
	// History were generated (0 for a new sequence; in [0, len(History)]).
	// The runner starts the seat's sampler so that they count as output for
	// the presence and frequency penalties, as if it had sampled them
	// (sampling.Sampler.StartWithOutput), not as prompt.
	NumOutput int32
}

// Batch is one step of work in varlen layout. All slices are owned by the
// caller and must not be retained by the runner after Execute returns.
type Batch struct {
	// Tokens are the new tokens of every sequence, flattened; an entry may be
	// FutureToken. Positions are their absolute positions (same length).
	Tokens    []int32
	Positions []int32
	Seqs      []SeqBatch
	// Groups are sets of sequences that share a leading run of blocks
	// (see Group; found by Grouper), with their members in GroupSeqs.
	// Empty when nothing is shared or grouping is off; a runner may ignore
	// them.
	Groups    []Group
	GroupSeqs []int32
	// Masks, when set, constrains some sequences' sampling (structured
	// output): the runner calls Wait just before it samples and draws a
	// constrained sequence's token only among those its row allows. Nil
	// when no sequence of the step is constrained.
	Masks Masks
}

// Masks gives a step's token masks. The engine computes a constrained
// sequence's mask while the step's forward pass runs (the mask depends on
// the token the sequence sampled in the previous step, which the overlap
// scheduler learns only then), so a runner asks for the masks as late as
// it can: after the forward pass, before sampling.
type Masks interface {
	// Wait blocks until the masks are ready. Row i is Seqs[i]'s:
	// (Vocab+63)/64 words, bit t%64 of word t/64 set when token t may be
	// sampled; nil when the sequence is unconstrained or does not sample.
	// The rows are valid until Execute returns. An error fails the step.
	Wait() ([][]uint64, error)
}

// NumTokens is the number of new tokens in the batch.
func (b *Batch) NumTokens() int { return len(b.Tokens) }

// Reset empties the batch, keeping its capacity (no allocation per step).
func (b *Batch) Reset() {
	b.Tokens = b.Tokens[:0]
	b.Positions = b.Positions[:0]
	b.Seqs = b.Seqs[:0]
	b.Groups = b.Groups[:0]
	b.GroupSeqs = b.GroupSeqs[:0]
	b.Masks = nil
}

// Output is what a step produced, aligned with Batch.Seqs. Slices are owned by
// the caller, who sizes them with Output.Resize; the runner fills them.
type Output struct {
	// Tokens[i] is the token sampled for Seqs[i], or -1 when Seqs[i].Sample is false.
	Tokens []int32
	// Logprobs[i] is the log-probability of Tokens[i] (0 when not requested).
	Logprobs []float32
	// TopTokens/TopLogprobs hold, for Seqs[i], sampling.MaxTopLogprobs
	// alternatives at [i*MaxTopLogprobs, i*MaxTopLogprobs+Params.TopLogprobs).
	TopTokens   []int32
	TopLogprobs []float32
}

// Resize sets the output's length to n sequences, reusing capacity.
func (o *Output) Resize(n int) {
	o.Tokens = resize(o.Tokens, n)
	o.Logprobs = resize(o.Logprobs, n)
	o.TopTokens = resize(o.TopTokens, n*sampling.MaxTopLogprobs)
	o.TopLogprobs = resize(o.TopLogprobs, n*sampling.MaxTopLogprobs)
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Capacity is what a runner can hold, declared so that the engine validates
// its sizes against it at start-up (seatpool, kvpool).
type Capacity struct {
	// Seats is the number of seat-indexed rows (sampler state, last-token
	// row, scratch) the runner allocated.
	Seats int
	// KVBlocks and BlockSize describe the paged KV cache the runner owns;
	// block ids are in [0, KVBlocks).
	KVBlocks  int
	BlockSize int
	// MaxContext is the longest sequence (prompt + output) the model accepts.
	MaxContext int
	// MaxBatchTokens is the most new tokens one Execute call accepts.
	MaxBatchTokens int
	// Vocab is the number of logits per row.
	Vocab int
}

// Runner executes steps: the one interface the CPU runner, the CUDA runner
// and the simulated device implement and the engine drives. Execute is
// synchronous and called by one goroutine at a time, in step order (the
// device stream); b and out are owned by the caller and valid until Execute
// returns. Execute resizes out to len(b.Seqs). A batch that breaks the
// contract (see Checker) returns an error naming the offending value.
type Runner interface {
	Execute(b *Batch, out *Output) error
	Capacity() Capacity
}
