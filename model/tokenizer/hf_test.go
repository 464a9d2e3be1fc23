package tokenizer

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// tinyHF is a Llama-3-shaped tokenizer.json over the tiny GPT-2
// vocabulary: the 256 byte characters, the merges' tokens, then added
// tokens.
func tinyHF() map[string]any {
	vocab := map[string]any{}
	for i, r := range byteToRune() {
		vocab[string(r)] = i
	}
	for i, m := range gpt2Merges {
		l, r := splitMerge(m)
		vocab[l+r] = 256 + i
	}
	n := 256 + len(gpt2Merges)
	return map[string]any{
		"added_tokens": []any{
			map[string]any{"id": n, "content": "<|begin_of_text|>", "special": true},
			map[string]any{"id": n + 1, "content": "<|eot_id|>", "special": true},
			map[string]any{"id": n + 2, "content": "<think>", "special": false},
		},
		"normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": regexLlama3}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "TemplateProcessing", "single": []any{
			map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}},
			map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": append([]string(nil), gpt2Merges...),
			"ignore_merges": true, "byte_fallback": false, "dropout": nil, "unk_token": nil},
	}
}

func splitMerge(m string) (string, string) {
	for i := 0; i < len(m); i++ {
		if m[i] == ' ' {
			return m[:i], m[i+1:]
		}
	}
	return m, ""
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestFromHFJSON(t *testing.T) {
	config := []byte(`{"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"}}`)
	tk, err := FromHFJSON(marshal(t, tinyHF()), config)
	require.NoError(t, err)
	n := int32(256 + len(gpt2Merges))
	require.Equal(t, n, tk.BOS())
	require.Equal(t, n+1, tk.EOS())
	require.True(t, tk.AddBOS(), "TemplateProcessing starts with a special token")
	require.Equal(t, preLlama3, tk.pre)
	require.True(t, tk.ignoreMerges)
	require.Equal(t, []string{"<|begin_of_text|>", "hello", "Ġworld"}, pieces(tk, tk.Encode("hello world", true)))
	require.Equal(t, []int32{n + 1, n + 2}, tk.EncodeSpecial("<|eot_id|><think>", false))

	// Merges as pairs, add_bos_token from the config, no post-processor.
	h := tinyHF()
	var pairs [][]string
	for _, m := range gpt2Merges {
		l, r := splitMerge(m)
		pairs = append(pairs, []string{l, r})
	}
	h["model"].(map[string]any)["merges"] = pairs
	h["post_processor"] = nil
	tk2, err := FromHFJSON(marshal(t, h), nil)
	require.NoError(t, err)
	require.False(t, tk2.AddBOS())
	require.Equal(t, tk.Encode("the hello world's", false), tk2.Encode("the hello world's", false))
	tk3, err := FromHFJSON(marshal(t, h), []byte(`{"add_bos_token": true, "bos_token": "<|begin_of_text|>"}`))
	require.NoError(t, err)
	require.True(t, tk3.AddBOS())

	// GPT-2's own form: ByteLevel with its regex, NFC normalizer.
	h = tinyHF()
	h["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false}
	h["normalizer"] = map[string]any{"type": "NFC"}
	tk4, err := FromHFJSON(marshal(t, h), nil)
	require.NoError(t, err)
	require.Equal(t, preGPT2, tk4.pre)
	require.True(t, tk4.nfc)
	require.Equal(t, n, tk4.BOS(), "the template's first special token")
	require.True(t, tk4.AddBOS())
	tk5, err := FromHFJSON(marshal(t, h), []byte(`{"add_bos_token": false}`))
	require.NoError(t, err)
	require.False(t, tk5.AddBOS(), "the config's add_bos_token wins")
}

func TestFromHFJSONErrors(t *testing.T) {
	model := func(h map[string]any) map[string]any { return h["model"].(map[string]any) }
	pre := func(h map[string]any, i int) map[string]any {
		return h["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[i].(map[string]any)
	}
	added := func(h map[string]any, i int) map[string]any { return h["added_tokens"].([]any)[i].(map[string]any) }
	for _, tc := range []struct {
		name   string
		change func(h map[string]any)
		config string
		want   string
	}{
		{"not JSON", nil, "", "tokenizer.json"},
		{"model type", func(h map[string]any) { model(h)["type"] = "Unigram" }, "", `model.type = "Unigram"`},
		{"byte fallback", func(h map[string]any) { model(h)["byte_fallback"] = true }, "", "byte_fallback"},
		{"dropout", func(h map[string]any) { model(h)["dropout"] = 0.1 }, "", "dropout = 0.1"},
		{"subword prefix", func(h map[string]any) { model(h)["continuing_subword_prefix"] = "##" }, "", `"##"`},
		{"no merges", func(h map[string]any) { delete(model(h), "merges") }, "", "merges is missing"},
		{"bad merge string", func(h map[string]any) { model(h)["merges"] = []string{"ab"} }, "", `merges[0] = "ab"`},
		{"bad merge pair", func(h map[string]any) { model(h)["merges"] = [][]string{{"a", "b", "c"}} }, "", "merges[0]"},
		{"merges of numbers", func(h map[string]any) { model(h)["merges"] = []int{1} }, "", "neither strings nor pairs"},
		{"normalizer", func(h map[string]any) { h["normalizer"] = map[string]any{"type": "NFKC"} }, "", `normalizer type "NFKC"`},
		{"unknown regex", func(h map[string]any) { pre(h, 0)["pattern"] = map[string]any{"Regex": `\w+`} }, "", `regex "\\w+" is not supported`},
		{"string pattern", func(h map[string]any) { pre(h, 0)["pattern"] = map[string]any{"String": " "} }, "", "no Regex pattern"},
		{"split behavior", func(h map[string]any) { pre(h, 0)["behavior"] = "Removed" }, "", `behavior "Removed"`},
		{"prefix space", func(h map[string]any) { pre(h, 1)["add_prefix_space"] = true }, "", "add_prefix_space = true"},
		{"byte level regex twice", func(h map[string]any) { pre(h, 1)["use_regex"] = true }, "", "use_regex = true"},
		{"pre type", func(h map[string]any) { h["pre_tokenizer"] = map[string]any{"type": "Whitespace"} }, "", `type "Whitespace"`},
		{"no pre", func(h map[string]any) { h["pre_tokenizer"] = nil }, "", "no pre_tokenizer"},
		{"decoder", func(h map[string]any) { h["decoder"] = map[string]any{"type": "WordPiece"} }, "", `decoder type "WordPiece"`},
		{"duplicate id", func(h map[string]any) { model(h)["vocab"].(map[string]any)["zz"] = 3 }, "", "vocab id 3 is both"},
		{"hole", func(h map[string]any) {
			// An added token repeating a vocabulary entry counts twice.
			added(h, 2)["id"] = 272
			h["added_tokens"] = append(h["added_tokens"].([]any), map[string]any{"id": 0, "content": string(byteToRune()[0])})
		}, "", "no token with id 271"},
		{"huge id", func(h map[string]any) { added(h, 2)["id"] = 1 << 30 }, "", "ids reach 1073741824 but there are only 272 tokens"},
		{"negative id", func(h map[string]any) { added(h, 0)["id"] = -1 }, "", `"<|begin_of_text|>" has id -1`},
		{"added clashes", func(h map[string]any) { added(h, 0)["id"] = 5 }, "", `added token "<|begin_of_text|>" has id 5`},
		{"lstrip", func(h map[string]any) { added(h, 1)["lstrip"] = true }, "", `"<|eot_id|>": lstrip`},
		{"unk", func(h map[string]any) { model(h)["unk_token"] = "<unk>" }, "", `unk_token "<unk>" is not in the vocabulary`},
		{"config not JSON", nil, "{", "tokenizer_config.json"},
		{"config bos", nil, `{"bos_token": "<s>"}`, `bos_token "<s>" is not in the vocabulary`},
		{"config eos shape", nil, `{"eos_token": 3}`, "eos_token: 3 is neither"},
		{"bos needed", func(h map[string]any) { h["post_processor"] = nil }, `{"add_bos_token": true}`, "names no bos_token"},
		{"template bos unknown", func(h map[string]any) {
			h["post_processor"].(map[string]any)["single"].([]any)[0].(map[string]any)["SpecialToken"].(map[string]any)["id"] = "<s>"
		}, "", `special token "<s>" is not in the vocabulary`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var doc []byte
			if tc.change == nil && tc.name == "not JSON" {
				doc = []byte("{")
			} else {
				h := tinyHF()
				if tc.change != nil {
					tc.change(h)
				}
				doc = marshal(t, h)
			}
			var config []byte
			if tc.config != "" {
				config = []byte(tc.config)
			}
			_, err := FromHFJSON(doc, config)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// FuzzFromHFJSON: any document either loads or is refused with an error;
// what loads encodes and decodes without panicking.
func FuzzFromHFJSON(f *testing.F) {
	f.Add(marshal(f, tinyHF()), []byte(`{"bos_token": "<|begin_of_text|>"}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, doc, config []byte) {
		tk, err := FromHFJSON(doc, config)
		if err != nil {
			return
		}
		s := "the hello world's <|eot_id|> 123"
		tk.Decode(tk.Encode(s, tk.AddBOS()))
		tk.Decode(tk.EncodeSpecial(tk.EscapeSpecial(s), false))
	})
}
