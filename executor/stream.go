package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/turnstile-llm/turnstile/sampling"
)

// TokenLogprob is one candidate token and its natural-log probability.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// Delta is the output a request produced since the previous Recv.
type Delta struct {
	// Text is new UTF-8 text (never half a character; invalid bytes are
	// replaced with U+FFFD).
	Text string
	// TokenIDs are the new token ids; Logprobs their log-probabilities when
	// the request asked for them (Params.Logprobs or TopLogprobs > 0;
	// aligned with TokenIDs), else nil.
	TokenIDs []int32
	Logprobs []float32
	// TopLogprobs, when Params.TopLogprobs > 0, holds for each of TokenIDs
	// the Params.TopLogprobs most likely tokens at that position (fewer only
	// when the vocabulary is smaller), most likely first, under the same
	// distribution as Logprobs; else nil. The inner slices share one
	// allocation owned by the receiver.
	TopLogprobs [][]TokenLogprob
	// FinishReason is set on the last delta, together with Usage.
	FinishReason FinishReason
	Usage        Usage
	// StopString, on a last delta with FinishStop, is the stop string
	// (Request.Stop) whose match ended the output; "" when EOS or a stop
	// token ended it. (adp's wire codec does not carry it: a stream
	// relayed from another process reports "".)
	StopString string
	// Err, on a last delta with FinishAbort, is why the engine ended the
	// request itself (a structured-output matcher that failed), nil when a
	// client or shutdown aborted it.
	Err error
}

// Stream delivers one request's output. The engine appends to it; the
// consumer drains it with Recv, which coalesces everything produced since
// the last call, so a slow consumer never blocks the step loop.
type Stream struct {
	mu       sync.Mutex
	text     []byte
	ids      []int32
	lps      []float32
	logprobs bool
	// tops holds top alternatives per pushed token, flat: topN per token
	// (entries for tokens past the vocabulary have Token -1 and are dropped
	// by TryRecv).
	tops   []TokenLogprob
	topN   int
	finish FinishReason
	usage  Usage
	stop   string // the stop string that ended the output
	err    error
	final  bool // the last delta was delivered
	notify chan struct{}
	// ended is closed once the finish is recorded: the request no longer
	// needs the engine, whether or not its consumer has read it.
	ended chan struct{}
}

// streamPrealloc is the output (tokens) a stream buffers without allocating
// when its consumer falls behind.
const streamPrealloc = 64

// newStream makes the stream of a request with sampling parameters p: it
// buffers log-probabilities only when p asks for them, and p.TopLogprobs
// alternatives per token.
func newStream(p sampling.Params) *Stream {
	s := &Stream{logprobs: p.Logprobs || p.TopLogprobs > 0, topN: p.TopLogprobs, notify: make(chan struct{}, 1), ended: make(chan struct{})}
	s.text = make([]byte, 0, 4*streamPrealloc)
	s.ids = make([]int32, 0, streamPrealloc)
	if s.logprobs {
		s.lps = make([]float32, 0, streamPrealloc)
	}
	if s.topN > 0 {
		s.tops = make([]TokenLogprob, 0, streamPrealloc*s.topN)
	}
	return s
}

// Recv returns the output produced since the last call, blocking until there
// is some or ctx ends. After the delta carrying the FinishReason it returns
// io.EOF.
func (s *Stream) Recv(ctx context.Context) (Delta, error) {
	for {
		if d, ok, err := s.TryRecv(); ok || err != nil {
			return d, err
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Delta{}, ctx.Err()
		}
	}
}

// Ended is closed when the request's finish is recorded (its last token
// produced, or it was aborted): the engine is done with it, though the
// consumer may not have read the output yet. A front end that bounds the
// requests in flight frees the request's place here, so a client that reads
// slowly does not hold capacity the engine no longer uses.
func (s *Stream) Ended() <-chan struct{} { return s.ended }

// finishLocked records reason and u as the finish, once; s.mu is held.
func (s *Stream) finishLocked(reason FinishReason, u Usage) {
	if s.finish != FinishNone || reason == FinishNone {
		return
	}
	s.finish, s.usage = reason, u
	close(s.ended)
}

// TryRecv is Recv without blocking: ok is false when nothing is pending.
func (s *Stream) TryRecv() (d Delta, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.final {
		return Delta{}, false, io.EOF
	}
	if len(s.ids) == 0 && len(s.text) == 0 && s.finish == FinishNone {
		return Delta{}, false, nil
	}
	d.Text = strings.ToValidUTF8(string(s.text), "\uFFFD")
	d.TokenIDs = append([]int32(nil), s.ids...)
	if s.logprobs {
		d.Logprobs = append([]float32(nil), s.lps...)
	}
	if s.topN > 0 {
		d.TopLogprobs = splitTops(s.tops, s.topN, len(s.ids))
	}
	s.text, s.ids, s.lps, s.tops = s.text[:0], s.ids[:0], s.lps[:0], s.tops[:0]
	if s.finish != FinishNone {
		d.FinishReason, d.Usage, d.Err, d.StopString = s.finish, s.usage, s.err, s.stop
		s.final = true
	}
	return d, true, nil
}

// ReadAll drains the stream to its end and returns everything as one delta.
func (s *Stream) ReadAll(ctx context.Context) (Delta, error) {
	var all Delta
	var text strings.Builder
	for {
		d, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			all.Text = text.String()
			return all, nil
		}
		if err != nil {
			return all, err
		}
		text.WriteString(d.Text)
		all.TokenIDs = append(all.TokenIDs, d.TokenIDs...)
		all.Logprobs = append(all.Logprobs, d.Logprobs...)
		all.TopLogprobs = append(all.TopLogprobs, d.TopLogprobs...)
		all.FinishReason, all.Usage, all.Err, all.StopString = d.FinishReason, d.Usage, d.Err, d.StopString
	}
}

// splitTops copies flat (n tokens × per alternatives) into one new
// allocation and slices it per token, dropping the Token -1 padding of
// positions with fewer alternatives than asked.
func splitTops(flat []TokenLogprob, per, n int) [][]TokenLogprob {
	buf := append([]TokenLogprob(nil), flat...)
	out := make([][]TokenLogprob, n)
	for k := range out {
		row := buf[k*per : (k+1)*per : (k+1)*per]
		for len(row) > 0 && row[len(row)-1].Token < 0 {
			row = row[:len(row)-1]
		}
		out[k] = row
	}
	return out
}

// push appends the output of one sampled token: its text (possibly empty),
// id, log-probability and top alternatives (topIDs/topLPs hold at least
// the stream's topN entries when it keeps alternatives; ignored otherwise).
// Called by the loop; no allocation in steady state.
func (s *Stream) push(text []byte, id int32, lp float32, topIDs []int32, topLPs []float32) {
	s.mu.Lock()
	s.text = append(s.text, text...)
	s.ids = append(s.ids, id)
	if s.logprobs {
		s.lps = append(s.lps, lp)
	}
	for k := range s.topN {
		s.tops = append(s.tops, TokenLogprob{Token: topIDs[k], Logprob: topLPs[k]})
	}
	s.mu.Unlock()
	s.wake()
}

// fail records why the engine is about to end the request (before end).
func (s *Stream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// end records the finish (and the stop string that ended the output, if
// one did); the next Recv returns it.
func (s *Stream) end(text []byte, reason FinishReason, u Usage, stop string) {
	s.mu.Lock()
	s.text = append(s.text, text...)
	if s.finish == FinishNone {
		s.stop = stop
	}
	s.finishLocked(reason, u)
	s.mu.Unlock()
	s.wake()
}

func (s *Stream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// NewRelayStream makes a stream that carries output produced elsewhere: a
// request served by another process, whose deltas arrive over the wire and
// are handed to Relay. p is the request's sampling parameters (they say
// whether log-probabilities are kept). The consumer reads it like any
// stream.
func NewRelayStream(p sampling.Params) *Stream { return newStream(p) }

// Relay appends d, a delta received from the stream of the same request on
// another process, as if the engine had produced it here: text, tokens,
// log-probabilities and alternatives are appended (d.TopLogprobs rows
// shorter than the stream's count are padded, as the engine pads), and a
// FinishReason ends the stream with d.Usage. A delta after the finish is
// an error, as is one whose Logprobs or TopLogprobs do not align with its
// TokenIDs.
func (s *Stream) Relay(d Delta) error {
	if s.logprobs && len(d.Logprobs) != len(d.TokenIDs) {
		return fmt.Errorf("executor: relayed delta has %d logprobs for %d tokens", len(d.Logprobs), len(d.TokenIDs))
	}
	if s.topN > 0 && len(d.TopLogprobs) != len(d.TokenIDs) {
		return fmt.Errorf("executor: relayed delta has %d top-logprob rows for %d tokens", len(d.TopLogprobs), len(d.TokenIDs))
	}
	s.mu.Lock()
	if s.final || s.finish != FinishNone {
		s.mu.Unlock()
		return errors.New("executor: relayed delta after the stream's finish")
	}
	s.text = append(s.text, d.Text...)
	s.ids = append(s.ids, d.TokenIDs...)
	if s.logprobs {
		s.lps = append(s.lps, d.Logprobs...)
	}
	for k := range d.TokenIDs {
		if s.topN == 0 {
			break
		}
		row := d.TopLogprobs[k]
		for j := range s.topN {
			if j < len(row) {
				s.tops = append(s.tops, row[j])
			} else {
				s.tops = append(s.tops, TokenLogprob{Token: -1})
			}
		}
	}
	if s.finish == FinishNone && d.FinishReason != FinishNone {
		s.stop = d.StopString
	}
	s.finishLocked(d.FinishReason, d.Usage)
	s.mu.Unlock()
	s.wake()
	return nil
}
