package adp

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/sampling"
)

// The byte wire between the processes of a deployment: what process 0
// broadcasts each iteration (aborts, program releases, the pending new
// requests) and what the other processes send back to it (output deltas,
// refusals, release replies, rank metrics). Every process runs the same
// binary, so the format is compact and unversioned; every length is
// checked against the bytes left, so a corrupt message is an error naming
// what was being read, never a panic or a huge allocation.

// wireBuf appends the wire's primitive values.
type wireBuf []byte

func (b *wireBuf) uvarint(v uint64) { *b = binary.AppendUvarint(*b, v) }
func (b *wireBuf) varint(v int64)   { *b = binary.AppendVarint(*b, v) }
func (b *wireBuf) byte1(v byte)     { *b = append(*b, v) }
func (b *wireBuf) bool1(v bool) {
	if v {
		b.byte1(1)
	} else {
		b.byte1(0)
	}
}
func (b *wireBuf) f32(v float32) { *b = binary.LittleEndian.AppendUint32(*b, math.Float32bits(v)) }
func (b *wireBuf) u64(v uint64)  { *b = binary.LittleEndian.AppendUint64(*b, v) }
func (b *wireBuf) str(s string) {
	b.uvarint(uint64(len(s)))
	*b = append(*b, s...)
}
func (b *wireBuf) ints32(v []int32) {
	b.uvarint(uint64(len(v)))
	for _, x := range v {
		b.varint(int64(x))
	}
}
func (b *wireBuf) floats32(v []float32) {
	b.uvarint(uint64(len(v)))
	for _, x := range v {
		b.f32(x)
	}
}

// wireReader reads what wireBuf wrote; the first error sticks and names
// the field being read.
type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) fail(what string, why string) {
	if r.err == nil {
		r.err = fmt.Errorf("adp: wire: %s: %s", what, why)
	}
}

func (r *wireReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what, "bad or truncated varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what, "bad or truncated varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a length of items each at least min bytes long, bounded by
// the bytes left (so garbage cannot ask for a huge allocation).
func (r *wireReader) count(what string, min int) int {
	n := r.uvarint(what)
	if r.err == nil && n > uint64(len(r.b)/min) {
		r.fail(what, fmt.Sprintf("length %d exceeds the %d bytes left", n, len(r.b)))
		return 0
	}
	return int(n)
}

func (r *wireReader) int(what string) int {
	v := r.varint(what)
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail(what, fmt.Sprintf("%d outside int32", v))
		return 0
	}
	return int(v)
}

func (r *wireReader) byte1(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.fail(what, "truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *wireReader) bool1(what string) bool {
	switch v := r.byte1(what); v {
	case 0:
		return false
	case 1:
		return true
	default:
		r.fail(what, fmt.Sprintf("bool byte %d", v))
		return false
	}
}

func (r *wireReader) fixed(what string, n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail(what, "truncated")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *wireReader) f32(what string) float32 {
	if v := r.fixed(what, 4); v != nil {
		return math.Float32frombits(binary.LittleEndian.Uint32(v))
	}
	return 0
}

func (r *wireReader) u64(what string) uint64 {
	if v := r.fixed(what, 8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (r *wireReader) str(what string) string {
	n := r.count(what, 1)
	return string(r.fixed(what, n))
}

func (r *wireReader) ints32(what string) []int32 {
	n := r.count(what, 1)
	if n == 0 {
		return nil
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(r.int(what))
	}
	return v
}

func (r *wireReader) floats32(what string) []float32 {
	n := r.count(what, 4)
	if n == 0 {
		return nil
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = r.f32(what)
	}
	return v
}

func (r *wireReader) strs(what string) []string {
	n := r.count(what, 1)
	if n == 0 {
		return nil
	}
	v := make([]string, n)
	for i := range v {
		v[i] = r.str(what)
	}
	return v
}

// putRequest appends request q (placed under wire id) to b.
func putRequest(b *wireBuf, id uint64, q *executor.Request) {
	b.uvarint(id)
	b.str(q.Prompt)
	b.ints32(q.PromptTokens)
	b.varint(int64(q.MaxTokens))
	p := &q.Params
	b.f32(p.Temperature)
	b.varint(int64(p.TopK))
	b.f32(p.TopP)
	b.f32(p.MinP)
	b.u64(p.Seed)
	b.bool1(p.HasSeed)
	b.f32(p.RepetitionPenalty)
	b.f32(p.PresencePenalty)
	b.f32(p.FrequencyPenalty)
	b.bool1(p.Logprobs)
	b.varint(int64(p.TopLogprobs))
	b.uvarint(uint64(len(q.Stop)))
	for _, s := range q.Stop {
		b.str(s)
	}
	b.ints32(q.StopTokenIDs)
	b.bool1(q.IgnoreEOS)
	b.str(q.CacheSalt)
	b.str(q.ProgramID)
	b.bool1(q.ProgramRelease)
}

// request reads what putRequest wrote.
func (r *wireReader) request() (uint64, *executor.Request) {
	id := r.uvarint("request id")
	q := &executor.Request{}
	q.Prompt = r.str("prompt")
	q.PromptTokens = r.ints32("prompt tokens")
	q.MaxTokens = r.int("max tokens")
	q.Params = sampling.Params{
		Temperature: r.f32("temperature"), TopK: r.int("top_k"), TopP: r.f32("top_p"), MinP: r.f32("min_p"),
		Seed: r.u64("seed"), HasSeed: r.bool1("has seed"),
		RepetitionPenalty: r.f32("repetition penalty"), PresencePenalty: r.f32("presence penalty"),
		FrequencyPenalty: r.f32("frequency penalty"), Logprobs: r.bool1("logprobs"), TopLogprobs: r.int("top logprobs"),
	}
	q.Stop = r.strs("stop")
	q.StopTokenIDs = r.ints32("stop token ids")
	q.IgnoreEOS = r.bool1("ignore eos")
	q.CacheSalt = r.str("cache salt")
	q.ProgramID = r.str("program id")
	q.ProgramRelease = r.bool1("program release")
	return id, q
}

// putDelta appends the record of delta d of the request with wire id to b.
func putDelta(b *wireBuf, id uint64, d *executor.Delta) {
	b.byte1(recDelta)
	b.uvarint(id)
	b.str(d.Text)
	b.ints32(d.TokenIDs)
	b.bool1(d.Logprobs != nil)
	if d.Logprobs != nil {
		b.floats32(d.Logprobs)
	}
	b.uvarint(uint64(len(d.TopLogprobs)))
	for _, row := range d.TopLogprobs {
		b.uvarint(uint64(len(row)))
		for _, t := range row {
			b.varint(int64(t.Token))
			b.f32(t.Logprob)
		}
	}
	b.str(string(d.FinishReason))
	b.uvarint(uint64(d.Usage.Prompt))
	b.uvarint(uint64(d.Usage.Completion))
	b.uvarint(uint64(d.Usage.CachedPrompt))
}

// finishReasons are the reasons a delta may carry.
var finishReasons = [...]executor.FinishReason{executor.FinishNone, executor.FinishStop, executor.FinishLength, executor.FinishAbort}

// delta reads what putDelta wrote.
func (r *wireReader) delta() (uint64, executor.Delta) {
	id := r.uvarint("delta id")
	var d executor.Delta
	d.Text = r.str("delta text")
	d.TokenIDs = r.ints32("delta tokens")
	if r.bool1("delta has logprobs") {
		d.Logprobs = r.floats32("delta logprobs")
	}
	if n := r.count("delta top logprobs", 1); n > 0 {
		d.TopLogprobs = make([][]executor.TokenLogprob, n)
		for k := range d.TopLogprobs {
			m := r.count("delta top logprob row", 5)
			row := make([]executor.TokenLogprob, m)
			for j := range row {
				row[j] = executor.TokenLogprob{Token: int32(r.int("top logprob token")), Logprob: r.f32("top logprob")}
			}
			d.TopLogprobs[k] = row
		}
	}
	reason := executor.FinishReason(r.str("finish reason"))
	known := false
	for _, f := range finishReasons {
		known = known || f == reason
	}
	if !known {
		r.fail("finish reason", fmt.Sprintf("unknown %q", reason))
	}
	d.FinishReason = reason
	d.Usage = executor.Usage{Prompt: r.uint("usage prompt"), Completion: r.uint("usage completion"), CachedPrompt: r.uint("usage cached")}
	return id, d
}

func (r *wireReader) uint(what string) int {
	v := r.uvarint(what)
	if v > math.MaxInt32 {
		r.fail(what, fmt.Sprintf("%d outside int32", v))
		return 0
	}
	return int(v)
}

// bulletin is process 0's broadcast: what every process applies this
// iteration.
type bulletin struct {
	aborts   []uint64  // wire ids of requests placed on other processes whose clients left
	releases []release // programs to end on every rank
	ids      []uint64  // wire ids of reqs
	reqs     []*executor.Request
}

// release asks every rank to end a program; ticket matches the replies.
type release struct {
	ticket uint64
	id     string
}

func (w *bulletin) reset() {
	w.aborts, w.releases, w.ids = w.aborts[:0], w.releases[:0], w.ids[:0]
	clear(w.reqs)
	w.reqs = w.reqs[:0]
}

// encode appends w to b.
func (w *bulletin) encode(b *wireBuf) {
	b.uvarint(uint64(len(w.aborts)))
	for _, id := range w.aborts {
		b.uvarint(id)
	}
	b.uvarint(uint64(len(w.releases)))
	for _, r := range w.releases {
		b.uvarint(r.ticket)
		b.str(r.id)
	}
	b.uvarint(uint64(len(w.reqs)))
	for i, q := range w.reqs {
		putRequest(b, w.ids[i], q)
	}
}

// decodeBulletin reads a broadcast into w (reset first).
func decodeBulletin(b []byte, w *bulletin) error {
	w.reset()
	r := wireReader{b: b}
	for n := r.count("aborts", 1); n > 0; n-- {
		w.aborts = append(w.aborts, r.uvarint("abort id"))
	}
	for n := r.count("releases", 2); n > 0; n-- {
		w.releases = append(w.releases, release{ticket: r.uvarint("release ticket"), id: r.str("release program")})
	}
	for n := r.count("requests", 8); n > 0 && r.err == nil; n-- {
		id, q := r.request()
		w.ids, w.reqs = append(w.ids, id), append(w.reqs, q)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("bulletin", fmt.Sprintf("%d trailing bytes", len(r.b)))
	}
	return r.err
}

// Record kinds a process sends process 0.
const (
	recDelta   = 1 // a request's output since the last record
	recRefused = 2 // the rank refused a placed request (the error text)
	recRelease = 3 // a program release's answer on this process's ranks
	recMetrics = 4 // a rank's executor metrics (JSON)
)

// reply is one record decoded by process 0.
type reply struct {
	kind    byte
	id      uint64 // request id, or release ticket
	delta   executor.Delta
	text    string // refusal or release error text
	found   bool
	rank    int
	metrics []byte
}

func putRefused(b *wireBuf, id uint64, err error) {
	b.byte1(recRefused)
	b.uvarint(id)
	b.str(err.Error())
}

func putReleaseReply(b *wireBuf, ticket uint64, found bool, err error) {
	b.byte1(recRelease)
	b.uvarint(ticket)
	b.bool1(found)
	if err != nil {
		b.str(err.Error())
	} else {
		b.str("")
	}
}

func putMetrics(b *wireBuf, rank int, js []byte) {
	b.byte1(recMetrics)
	b.uvarint(uint64(rank))
	b.str(string(js))
}

// decodeReplies reads one process's records, calling f for each.
func decodeReplies(b []byte, f func(*reply) error) error {
	r := wireReader{b: b}
	var rep reply
	for len(r.b) > 0 && r.err == nil {
		rep = reply{kind: r.byte1("record kind")}
		switch rep.kind {
		case recDelta:
			rep.id, rep.delta = r.delta()
		case recRefused:
			rep.id, rep.text = r.uvarint("refused id"), r.str("refusal")
		case recRelease:
			rep.id, rep.found, rep.text = r.uvarint("release ticket"), r.bool1("release found"), r.str("release error")
		case recMetrics:
			rep.rank = r.uint("metrics rank")
			rep.metrics = []byte(r.str("metrics"))
		default:
			r.fail("record kind", fmt.Sprintf("unknown kind %d", rep.kind))
		}
		if r.err != nil {
			break
		}
		if err := f(&rep); err != nil {
			return err
		}
	}
	if r.err != nil {
		return r.err
	}
	return nil
}
