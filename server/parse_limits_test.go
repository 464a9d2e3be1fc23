package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordingTok is the real tokenizer, recording what Encode is asked to
// tokenize.
type recordingTok struct {
	Tokenizer
	calls   int
	longest int // bytes of the longest text passed to Encode
}

func (r *recordingTok) Encode(text string, addBOS bool) []int32 {
	r.calls++
	r.longest = max(r.longest, len(text))
	return r.Tokenizer.Encode(text, addBOS)
}

// recordingParser is testParser over a recordingTok.
func recordingParser(t *testing.T, template string) (*parser, *recordingTok) {
	t.Helper()
	p := testParser(t, template)
	rec := &recordingTok{Tokenizer: p.tok}
	p.tok = rec
	return p, rec
}

// parseFunc is completion or chatCompletion as a function of the parser.
type parseFunc func(*parser, []byte) (*job, *APIError)

// mustJSON marshals v (test bodies with long strings).
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// requireRefused checks e is a 400 about param with code, whose message
// contains each of msg.
func requireRefused(t *testing.T, j *job, e *APIError, param, code string, msg ...string) {
	t.Helper()
	require.Nil(t, j)
	require.NotNil(t, e, "accepted")
	require.Equal(t, 400, e.Status, e.Message)
	require.Equal(t, param, e.Param, e.Message)
	require.Equal(t, code, e.Code, e.Message)
	for _, m := range msg {
		require.Contains(t, e.Message, m)
	}
}

// text is n bytes of story-like ASCII.
func text(n int) string {
	return strings.Repeat("Once upon a time there was a cat. ", n/34+1)[:n]
}

func TestParseMaxPieceBytes(t *testing.T) {
	stories := storiesTokenizer(t)
	longest := 0
	for id := 0; id < stories.VocabSize(); id++ {
		longest = max(longest, len(stories.Piece(int32(id))))
	}
	for _, tc := range []struct {
		name string
		tok  Tokenizer
		want int
	}{
		{"stories260K", stories, longest},
		{"empty vocabulary", fakePieces{}, 1},
		{"only empty pieces", fakePieces{"", ""}, 1},
		{"longest last", fakePieces{"a", "bc", "defgh"}, 5},
		{"longest first", fakePieces{"héllo", "a"}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, maxPieceBytes(tc.tok))
		})
	}
	require.Greater(t, longest, 1)
}

// fakePieces is a Tokenizer of only pieces, for maxPieceBytes.
type fakePieces []string

func (f fakePieces) Encode(string, bool) []int32 { return nil }
func (f fakePieces) Piece(id int32) []byte       { return []byte(f[id]) }
func (f fakePieces) Token(id int32) string       { return f[id] }
func (f fakePieces) BOS() int32                  { return -1 }
func (f fakePieces) EOS() int32                  { return -1 }
func (f fakePieces) AddBOS() bool                { return false }
func (f fakePieces) VocabSize() int              { return len(f) }

// TestParsePromptByteBound: a prompt over maxContext*maxPiece bytes is
// refused before anything is tokenized; one under it still gets the exact
// token check; a normal one passes.
func TestParsePromptByteBound(t *testing.T) {
	bound := testParser(t, "").byteBound()
	require.Equal(t, 64*maxPieceBytes(storiesTokenizer(t)), bound)
	const mb = 1 << 20
	big := text(mb)
	msg := func(s string) []map[string]any { return []map[string]any{{"role": "user", "content": s}} }
	for _, tc := range []struct {
		name        string
		tmpl        string
		parse       parseFunc
		body        any
		param, code string // "" code: accepted
		msg         []string
		maxEncode   int // longest text Encode may see
	}{
		{"completion string 1MB", "", (*parser).completion, map[string]any{"prompt": big},
			"prompt", "context_length_exceeded",
			[]string{fmt.Sprintf("prompt[0] is %d bytes", mb), fmt.Sprintf("at most %d bytes", bound), "context of 64 tokens", "nothing was tokenized"}, 0},
		{"completion list, second 1MB", "", (*parser).completion, map[string]any{"prompt": []string{"hi", big}},
			"prompt", "context_length_exceeded", []string{fmt.Sprintf("prompt[1] is %d bytes", mb)}, 0},
		{"completion list, one byte over", "", (*parser).completion, map[string]any{"prompt": []string{"hi", text(bound + 1)}},
			"prompt", "context_length_exceeded", []string{fmt.Sprintf("prompt[1] is %d bytes", bound+1)}, 0},
		{"completion at the bound: exact token check", "", (*parser).completion, map[string]any{"prompt": text(bound)},
			"prompt", "context_length_exceeded", []string{"prompt 0 is", "tokens, but the model's context is 64 tokens"}, bound},
		{"completion normal", "", (*parser).completion, map[string]any{"prompt": "Once upon a time", "max_tokens": 5},
			"", "", nil, len("Once upon a time")},
		{"chat 1MB content", "", (*parser).chatCompletion, map[string]any{"messages": msg(big)},
			"messages", "context_length_exceeded", []string{fmt.Sprintf("the messages' content is %d bytes", mb)}, 0},
		{"chat content split over messages", chatML, (*parser).chatCompletion,
			map[string]any{"messages": append(msg(text(bound/2+1)), msg(text(bound/2+1))...)},
			"messages", "context_length_exceeded", []string{fmt.Sprintf("the messages' content is %d bytes", 2*(bound/2+1))}, 0},
		{"chat rendered over the bound", "", (*parser).chatCompletion, map[string]any{"messages": msg(text(bound))},
			"messages", "context_length_exceeded", []string{fmt.Sprintf("the rendered prompt is %d bytes", bound+len("User: \nAssistant:"))}, 0},
		{"chat under the bound: exact token check", "", (*parser).chatCompletion, map[string]any{"messages": msg(text(bound - 20))},
			"prompt", "context_length_exceeded", []string{"tokens, but the model's context is 64 tokens"}, bound},
		{"chat normal", chatML, (*parser).chatCompletion, map[string]any{"messages": msg("Hi!"), "max_tokens": 5},
			"", "", nil, bound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, rec := recordingParser(t, tc.tmpl)
			j, e := tc.parse(p, mustJSON(t, tc.body))
			if tc.code == "" {
				require.Nil(t, e)
				require.NotEmpty(t, j.reqs)
			} else {
				requireRefused(t, j, e, tc.param, tc.code, tc.msg...)
			}
			require.LessOrEqual(t, rec.longest, tc.maxEncode, "Encode saw %d bytes", rec.longest)
		})
	}
}

// TestParseNoBoundWithoutMaxPiece: maxPiece 0 skips only the byte
// pre-check; the exact token check still refuses.
func TestParseNoBoundWithoutMaxPiece(t *testing.T) {
	p, rec := recordingParser(t, "")
	p.lim.maxPiece = 0
	long := text(2 * p.lim.maxContext * maxPieceBytes(storiesTokenizer(t)))
	j, e := p.completion(mustJSON(t, map[string]any{"prompt": long}))
	requireRefused(t, j, e, "prompt", "context_length_exceeded", "prompt 0 is")
	require.Equal(t, len(long), rec.longest)
}

// TestParsePromptCountBeforeEncode: a list prompt longer than the choice
// limit is refused before any element is tokenized or fully decoded.
func TestParsePromptCountBeforeEncode(t *testing.T) {
	strs := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = "a"
		}
		return s
	}
	lists := func(n, l int) [][]int {
		out := make([][]int, n)
		for i := range out {
			out[i] = make([]int, l)
			for k := range out[i] {
				out[i][k] = 300
			}
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		body        any
		param, code string // "" code: accepted
		msg         []string
		encodes     int // Encode calls
	}{
		{"9 strings", map[string]any{"prompt": strs(9)}, "prompt", "invalid_value", []string{"more than 8 prompts"}, 0},
		{"100000 strings", map[string]any{"prompt": strs(100000)}, "prompt", "invalid_value", []string{"more than 8 prompts"}, 0},
		{"9 lists of ids", map[string]any{"prompt": lists(9, 1)}, "prompt", "invalid_value", []string{"more than 8 prompts"}, 0},
		{"8 strings", map[string]any{"prompt": strs(8)}, "", "", nil, 8},
		{"8 strings × n 2", map[string]any{"prompt": strs(8), "n": 2}, "n", "invalid_value", []string{"8 prompts × n 2 = 16"}, 8},
		{"ids at the context", map[string]any{"prompt": lists(1, 64)[0]}, "prompt", "context_length_exceeded", []string{"prompt 0 is 64 tokens"}, 0},
		{"second list at the context", map[string]any{"prompt": append(lists(1, 1), lists(1, 64)...)}, "prompt", "context_length_exceeded", []string{"prompt 1 is 64 tokens"}, 0},
		{"ids under the context", map[string]any{"prompt": lists(1, 63)[0]}, "", "", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, rec := recordingParser(t, "")
			j, e := p.completion(mustJSON(t, tc.body))
			if tc.code == "" {
				require.Nil(t, e)
				require.NotEmpty(t, j.reqs)
			} else {
				requireRefused(t, j, e, tc.param, tc.code, tc.msg...)
			}
			require.Equal(t, tc.encodes, rec.calls)
		})
	}
}

// TestParseRanges: OpenAI's ranges for temperature, top_k within the
// vocabulary, and bounded stop strings.
func TestParseRanges(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name  string
		body  string
		param string // "": accepted
		msg   []string
	}{
		{"temperature 100", `{"prompt":"hi","temperature":100}`, "temperature", []string{"temperature 100", "[0, 2]"}},
		{"temperature 1e38", `{"prompt":"hi","temperature":1e38}`, "temperature", []string{"temperature 1e+38", "[0, 2]"}},
		{"temperature 2.0001", `{"prompt":"hi","temperature":2.0001}`, "temperature", []string{"2.0001"}},
		{"temperature -0.5", `{"prompt":"hi","temperature":-0.5}`, "temperature", []string{"-0.5", "[0, 2]"}},
		{"temperature 2", `{"prompt":"hi","temperature":2}`, "", nil},
		{"temperature 0", `{"prompt":"hi","temperature":0}`, "", nil},
		{"top_k 100000", `{"prompt":"hi","top_k":100000}`, "top_k", []string{"top_k 100000", "vocabulary size 512"}},
		{"top_k 513", `{"prompt":"hi","top_k":513}`, "top_k", []string{"top_k 513", "512"}},
		{"top_k 512", `{"prompt":"hi","top_k":512}`, "", nil},
		{"top_k 0", `{"prompt":"hi","top_k":0}`, "", nil},
		{"top_k -1", `{"prompt":"hi","top_k":-1}`, "", nil},
		{"top_k -2", `{"prompt":"hi","top_k":-2}`, "top_k", []string{"-2"}},
		{"stop 1MB", `{"prompt":"hi","stop":"` + strings.Repeat("x", mb) + `"}`, "stop", []string{"stop[0]: 1048576 bytes, at most 1024"}},
		{"stop list, second 1025 bytes", `{"prompt":"hi","stop":["a","` + strings.Repeat("x", 1025) + `"]}`, "stop", []string{"stop[1]: 1025 bytes, at most 1024"}},
		{"stop 1024 bytes", `{"prompt":"hi","stop":["` + strings.Repeat("x", 1024) + `"]}`, "", nil},
		{"17 stops", `{"prompt":"hi","stop":[` + strings.Repeat(`"a",`, 16) + `"a"]}`, "stop", []string{"more than 16 strings, at most 16"}},
		{"16 stops", `{"prompt":"hi","stop":[` + strings.Repeat(`"a",`, 15) + `"a"]}`, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testParser(t, "")
			j, e := p.completion([]byte(tc.body))
			if tc.param == "" {
				require.Nil(t, e)
				require.NotEmpty(t, j.reqs)
				return
			}
			requireRefused(t, j, e, tc.param, "invalid_value", tc.msg...)
		})
	}
}

// TestParseBodyNotObject: only a JSON object is a request; null used to
// decode as an empty request.
func TestParseBodyNotObject(t *testing.T) {
	for _, tc := range []struct {
		body, got string
	}{
		{`null`, "got null"},
		{` null `, "got null"},
		{`1`, "got a JSON number"},
		{`"x"`, "got a JSON string"},
		{`[]`, "got a JSON array"},
		{`true`, "got a JSON boolean"},
	} {
		for name, parse := range map[string]parseFunc{"completion": (*parser).completion, "chat": (*parser).chatCompletion} {
			t.Run(name+" "+tc.body, func(t *testing.T) {
				j, e := parse(testParser(t, ""), []byte(tc.body))
				requireRefused(t, j, e, "", "invalid_json", "request body must be a JSON object, "+tc.got)
			})
		}
	}
}

// TestParseElementErrors: type errors inside arrays name the element's
// index (in param for messages, in the message for prompt, stop and
// stop_token_ids, whose param stays the field).
func TestParseElementErrors(t *testing.T) {
	for _, tc := range []struct {
		name        string
		parse       parseFunc
		body        string
		param, code string
		msg         string
	}{
		{"message role number", (*parser).chatCompletion, `{"messages":[{"role":1,"content":"hi"}]}`,
			"messages[0].role", "invalid_type", "messages[0].role: expected a string, got a JSON number"},
		{"second message name", (*parser).chatCompletion, `{"messages":[{"role":"user","content":"hi"},{"role":"user","name":5}]}`,
			"messages[1].name", "invalid_type", "messages[1].name: expected a string, got a JSON number"},
		{"message null", (*parser).chatCompletion, `{"messages":[null]}`,
			"messages[0]", "invalid_type", "messages[0]: expected an object, got null"},
		{"message number", (*parser).chatCompletion, `{"messages":[{"role":"user"},7]}`,
			"messages[1]", "invalid_type", "messages[1]: expected an object, got a JSON number"},
		{"messages string", (*parser).chatCompletion, `{"messages":"hi"}`,
			"messages", "invalid_type", "messages: expected an array, got a JSON string"},
		{"too many messages", (*parser).chatCompletion, `{"messages":[` + strings.Repeat(`{"role":"user"},`, 64) + `{"role":"user"}]}`,
			"messages", "context_length_exceeded", "more than 64 messages"},
		{"chat temperature string", (*parser).chatCompletion, `{"messages":[{"role":"user"}],"temperature":"hot"}`,
			"temperature", "invalid_type", "temperature: expected a number, got a JSON string"},
		{"nested field", (*parser).completion, `{"prompt":"hi","stream":true,"stream_options":{"include_usage":1}}`,
			"stream_options.include_usage", "invalid_type", "stream_options.include_usage: expected a boolean, got a JSON number"},
		{"stop element number", (*parser).completion, `{"prompt":"hi","stop":["a",1]}`,
			"stop", "invalid_type", "stop[1]: expected a string, got a JSON number"},
		{"stop element null", (*parser).completion, `{"prompt":"hi","stop":[null]}`,
			"stop", "invalid_type", "stop[0]: expected a string, got null"},
		{"stop object", (*parser).completion, `{"prompt":"hi","stop":{}}`,
			"stop", "invalid_type", "stop: expected a string or a list of strings, got a JSON object"},
		{"stop_token_ids element string", (*parser).completion, `{"prompt":"hi","stop_token_ids":[1,"x"]}`,
			"stop_token_ids", "invalid_type", "stop_token_ids[1]: expected an integer, got a JSON string"},
		{"stop_token_ids element null", (*parser).chatCompletion, `{"messages":[{"role":"user"}],"stop_token_ids":[1,null]}`,
			"stop_token_ids", "invalid_type", "stop_token_ids[1]: expected an integer, got null"},
		{"stop_token_ids string", (*parser).completion, `{"prompt":"hi","stop_token_ids":"x"}`,
			"stop_token_ids", "invalid_type", "stop_token_ids: expected an array, got a JSON string"},
		{"prompt element number", (*parser).completion, `{"prompt":["a",1]}`,
			"prompt", "invalid_type", "prompt[1]: expected a string, got a JSON number"},
		{"prompt element null", (*parser).completion, `{"prompt":["a",null]}`,
			"prompt", "invalid_type", "prompt[1]: expected a string, got null"},
		{"prompt id fraction", (*parser).completion, `{"prompt":[1,2.5]}`,
			"prompt", "invalid_type", "prompt[0][1]: expected an integer, got a JSON number 2.5"},
		{"prompt id null", (*parser).completion, `{"prompt":[1,null]}`,
			"prompt", "invalid_type", "prompt[0][1]: expected an integer, got null"},
		{"prompt list id string", (*parser).completion, `{"prompt":[[1],[2,"x"]]}`,
			"prompt", "invalid_type", "prompt[1][1]: expected an integer, got a JSON string"},
		{"prompt list null", (*parser).completion, `{"prompt":[[1],null]}`,
			"prompt", "invalid_type", "prompt[1]: expected an array, got null"},
		{"prompt object", (*parser).completion, `{"prompt":{}}`,
			"prompt", "invalid_type", "got a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, e := tc.parse(testParser(t, ""), []byte(tc.body))
			requireRefused(t, j, e, tc.param, tc.code, tc.msg)
		})
	}
}
