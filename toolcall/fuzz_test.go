package toolcall

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// gen builds an output from fuzz bytes, piece by piece, and the Result it
// must parse to while every piece is clean (text that cannot be mistaken
// for syntax, whole calls, reasoning); a dirty piece (quotes, full markers,
// cut calls) leaves only the invariants to check.
type gen struct {
	data  []byte
	syn   *Syntax
	r     Reasoning
	text  strings.Builder
	seg   strings.Builder // clean text since the last call
	want  Result
	dirty bool
}

func (g *gen) next() byte {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return b
}

func (g *gen) pick(list []string) string { return list[int(g.next())%len(list)] }

// clean is text that never starts a marker or a call's key: no quote, no
// letters of a marker or key, no ';'.
func (g *gen) clean() string {
	var b strings.Builder
	for n := int(g.next() % 8); n > 0; n-- {
		b.WriteString(g.pick(cleanAlpha))
	}
	return b.String()
}

var (
	cleanAlpha = []string{"a", "b", " ", "é", "\n", "\t", "<", "{", "[", "]", "}", ":", "x", ","}
	fuzzNames  = []string{"f", "get_weather", "a.b-c", "g\u00e9"}
	fuzzArgs   = []string{
		`{}`, `{"city": "Paris"}`, `{"s": "</tool_call>\"}]"}`, `{"a": [1, {"b": null}], "c": -1.5e3}`,
		`{"s": "[TOOL_CALLS][{\"name\": \"x\"}]; {\"name\": \"y\", \"parameters\": {}}"}`, `[true, false]`, `"str\\"`, `42`,
	}
	fuzzMarkers = []string{"<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<think>", "</think>", `{"name": "`, `{"arguments": `, `{"parameters": `}
	fuzzJunk    = []string{`"`, ";", "; ", "{", "}", "[", "]", ",", ":", `\`, "\n", " ", "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "</think>", "<think>", `{"name": "f", "arguments": `, `"name"`, `"arguments"`, `"f"`, "1", "é"}
)

func (g *gen) write(s string, clean bool) {
	g.text.WriteString(s)
	if clean {
		g.seg.WriteString(s)
	} else {
		g.dirty = true
	}
}

// endSeg closes the clean text before a call (or at the end).
func (g *gen) endSeg() {
	g.want.Content += strings.Trim(g.seg.String(), " \t\r\n")
	g.seg.Reset()
}

func (g *gen) build() {
	g.syn = nil
	if i := int(g.next() % 5); i > 0 {
		s, _ := Known([]string{"hermes", "llama3", "mistral", "fallback"}[i-1])
		g.syn = &s
	}
	mode := g.next() % 4
	reasoning := ""
	switch mode {
	case 1:
		g.r = think
		if g.next()%2 == 1 {
			reasoning = g.clean()
			g.text.WriteString(g.pick([]string{"", "\n", "  "}) + "<think>" + reasoning + "</think>")
		}
	case 2, 3:
		g.r = Reasoning{Open: "<think>", Close: "</think>", StartsInside: true}
		reasoning = g.clean()
		g.text.WriteString(reasoning)
		if mode == 2 {
			g.text.WriteString("</think>")
		}
	}
	g.want.Reasoning = strings.Trim(reasoning, " \t\r\n")
	for n := 0; n < 10 && len(g.data) > 0; n++ {
		switch g.next() % 6 {
		case 0, 1:
			g.write(g.clean(), true)
		case 2:
			var cs []Call
			for k := 1 + int(g.next()%2); k > 0; k-- {
				cs = append(cs, Call{Name: g.pick(fuzzNames), Arguments: g.pick(fuzzArgs)})
			}
			if g.syn == nil {
				g.write(hermes.Format(cs), true)
				continue
			}
			g.endSeg()
			g.text.WriteString(g.syn.Format(cs))
			g.want.Calls = append(g.want.Calls, cs...)
		case 3:
			// A marker cut short, then text that cannot complete it.
			m := g.pick(fuzzMarkers)
			m = m[:int(g.next())%len(m)]
			g.write(m+" x", !strings.Contains(m, `"`) && (g.syn == nil || g.syn.tag != "" || !strings.HasPrefix(m, "{")))
		case 4:
			for k := 1 + int(g.next()%4); k > 0; k-- {
				g.write(g.pick(fuzzJunk), false)
			}
		case 5:
			// A call cut anywhere.
			s := Syntax{}
			if g.syn != nil {
				s = *g.syn
			}
			f := s.Format([]Call{{Name: g.pick(fuzzNames), Arguments: g.pick(fuzzArgs)}})
			if f == "" {
				f = hermes.Format([]Call{{Name: "f", Arguments: "{}"}})
			}
			g.write(f[:int(g.next())%len(f)], false)
		}
	}
	g.endSeg()
	if mode == 3 { // no Close: everything is reasoning
		g.want = Result{Reasoning: strings.Trim(g.text.String(), " \t\r\n")}
	}
}

// isSubsequence says whether every byte of sub appears in s in order.
func isSubsequence(sub, s string) bool {
	i := 0
	for j := 0; j < len(s) && i < len(sub); j++ {
		if s[j] == sub[i] {
			i++
		}
	}
	return i == len(sub)
}

// FuzzStream: an output fed in chunks of 1 to 8 bytes (split anywhere, even
// inside a UTF-8 character) parses as the whole does, its events are well
// formed, it invents no text, and clean outputs parse as built.
func FuzzStream(f *testing.F) {
	f.Add([]byte{1, 0, 0, 5, 2, 0, 1, 2, 0, 3, 0, 7}, []byte{3})
	f.Add([]byte{2, 1, 1, 4, 1, 2, 3, 2, 1, 1, 2}, []byte{0, 1, 2})
	f.Add([]byte{3, 2, 3, 1, 2, 2, 1, 4, 2, 0, 5, 2, 9}, []byte{7, 5})
	f.Add([]byte{4, 3, 5, 1, 2, 3, 4, 3, 6, 2}, []byte{1})
	f.Add([]byte{1, 0, 4, 3, 12, 0, 4, 1, 7, 5, 2, 0, 2, 30}, []byte{2, 6})
	f.Add([]byte{2, 0, 3, 7, 1, 4, 2, 21, 22, 2, 1, 4, 4, 5}, []byte{4})
	f.Fuzz(func(t *testing.T, data, split []byte) {
		g := &gen{data: data}
		g.build()
		text := g.text.String()
		whole := Parse(g.syn, g.r, text)

		p := NewParser(g.syn, g.r)
		var ev []Event
		for i, k := 0, 0; i < len(text); k++ {
			n := 1
			if len(split) > 0 {
				n = int(split[k%len(split)]%8) + 1
			}
			n = min(n, len(text)-i)
			ev = append(ev, p.Feed(text[i:i+n])...)
			i += n
		}
		ev = append(ev, p.Close()...)
		require.Equal(t, whole, Collect(ev), "text %q", text)

		var said strings.Builder
		begun := -1
		for _, e := range ev {
			switch e.Kind {
			case CallBegin:
				require.Equal(t, begun+1, e.Call, "calls are numbered in order")
				require.NotEmpty(t, e.Name)
				begun = e.Call
			case CallArgs:
				require.Equal(t, begun, e.Call, "arguments follow their CallBegin")
				fallthrough
			default:
				require.NotEmpty(t, e.Text)
				said.WriteString(e.Text)
			}
		}
		require.Equal(t, len(whole.Calls)-1, begun)
		require.True(t, isSubsequence(said.String(), text), "events invent no text: %q from %q", said.String(), text)
		for _, c := range whole.Calls {
			require.Contains(t, text, c.Arguments, "arguments are as written")
			require.Equal(t, strings.TrimSpace(c.Arguments), c.Arguments)
		}
		if !g.dirty {
			require.Equal(t, g.want, whole, "text %q", text)
		}
	})
}
