package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// hfTokenizer is the part of a Hugging Face tokenizer.json this package
// reads.
type hfTokenizer struct {
	AddedTokens []hfAddedToken `json:"added_tokens"`
	Normalizer  *hfComponent   `json:"normalizer"`
	PreTok      *hfComponent   `json:"pre_tokenizer"`
	PostProc    *hfComponent   `json:"post_processor"`
	Decoder     *hfComponent   `json:"decoder"`
	Model       struct {
		Type         string           `json:"type"`
		Vocab        map[string]int64 `json:"vocab"`
		Merges       json.RawMessage  `json:"merges"`
		IgnoreMerges bool             `json:"ignore_merges"`
		ByteFallback bool             `json:"byte_fallback"`
		Dropout      *float64         `json:"dropout"`
		UnkToken     *string          `json:"unk_token"`
		ContPrefix   *string          `json:"continuing_subword_prefix"`
		EndSuffix    *string          `json:"end_of_word_suffix"`
	} `json:"model"`
}

type hfAddedToken struct {
	ID         int64  `json:"id"`
	Content    string `json:"content"`
	Special    bool   `json:"special"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
	SingleWord bool   `json:"single_word"`
}

// hfComponent is a normalizer, pre-tokenizer, post-processor or decoder:
// a type and the fields the supported types have.
type hfComponent struct {
	Type           string        `json:"type"`
	PreTokenizers  []hfComponent `json:"pretokenizers"`
	Normalizers    []hfComponent `json:"normalizers"`
	Pattern        *struct{ Regex, String *string }
	Behavior       string          `json:"behavior"`
	Invert         bool            `json:"invert"`
	AddPrefixSpace bool            `json:"add_prefix_space"`
	UseRegex       *bool           `json:"use_regex"`
	Single         json.RawMessage `json:"single"`
}

// hfConfig is the part of tokenizer_config.json this package reads.
type hfConfig struct {
	BOS    json.RawMessage `json:"bos_token"`
	EOS    json.RawMessage `json:"eos_token"`
	UNK    json.RawMessage `json:"unk_token"`
	AddBOS *bool           `json:"add_bos_token"`
}

// FromHFJSON builds a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2/3)
// from a Hugging Face tokenizer.json and, when config is non-nil, its
// tokenizer_config.json. Read from tokenizer.json: model (type "BPE",
// vocab, merges as "a b" strings or [a, b] pairs, ignore_merges), the
// added tokens (special ones become control tokens, the others
// user-defined), the normalizer (none or NFC), the pre_tokenizer
// (ByteLevel with its GPT-2 regex, or a Sequence of a Split with the GPT-2,
// Llama 3 or Qwen2 regex and a ByteLevel without one) and the decoder (none
// or ByteLevel). From tokenizer_config.json: bos_token, eos_token,
// unk_token (a string or an {"content": ...} object) and add_bos_token;
// without add_bos_token, BOS is added when the post_processor is a
// TemplateProcessing that starts with a special token, as transformers
// does (that token is the BOS when the config names none). Anything else that would change the encoding is refused by name.
func FromHFJSON(tokenizer, config []byte) (*Tokenizer, error) {
	var h hfTokenizer
	if err := json.Unmarshal(tokenizer, &h); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	t := &Tokenizer{kind: BPE, bos: -1, eos: -1, unk: -1}
	m := &h.Model
	switch {
	case m.Type != "BPE":
		return nil, fmt.Errorf("tokenizer: tokenizer.json model.type = %q is not supported (accepted: BPE)", m.Type)
	case m.ByteFallback:
		return nil, errors.New("tokenizer: tokenizer.json model.byte_fallback = true is not supported (byte-level BPE only)")
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("tokenizer: tokenizer.json model.dropout = %v is not supported", *m.Dropout)
	case m.ContPrefix != nil && *m.ContPrefix != "":
		return nil, fmt.Errorf("tokenizer: tokenizer.json model.continuing_subword_prefix = %q is not supported", *m.ContPrefix)
	case m.EndSuffix != nil && *m.EndSuffix != "":
		return nil, fmt.Errorf("tokenizer: tokenizer.json model.end_of_word_suffix = %q is not supported", *m.EndSuffix)
	}
	t.ignoreMerges = m.IgnoreMerges
	var err error
	if t.nfc, err = hfNormalizer(h.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = hfPreTokenizer(h.PreTok); err != nil {
		return nil, err
	}
	if h.Decoder != nil && h.Decoder.Type != "ByteLevel" {
		return nil, fmt.Errorf("tokenizer: tokenizer.json decoder type %q is not supported (accepted: ByteLevel)", h.Decoder.Type)
	}
	types, err := t.hfVocab(&h)
	if err != nil {
		return nil, err
	}
	merges, err := hfMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	if err := t.build(types, merges); err != nil {
		return nil, err
	}
	if m.UnkToken != nil {
		if t.unk, err = t.lookup("tokenizer.json model.unk_token", *m.UnkToken); err != nil {
			return nil, err
		}
	}
	var addBOS *bool
	if config != nil {
		if addBOS, err = t.hfConfig(config); err != nil {
			return nil, err
		}
	}
	if first, ok := startsWithSpecial(h.PostProc); ok {
		if t.bos < 0 {
			if t.bos, err = t.lookup("tokenizer.json post_processor special token", first); err != nil {
				return nil, err
			}
		}
		t.addBOS = true
	}
	if addBOS != nil {
		t.addBOS = *addBOS
	}
	if t.addBOS && t.bos < 0 {
		return nil, errors.New("tokenizer: BOS is to be added but tokenizer_config.json names no bos_token")
	}
	return t, nil
}

// hfVocab fills t.tokens from the vocabulary and added tokens and returns
// the token types. Ids must cover [0, n) exactly once.
func (t *Tokenizer) hfVocab(h *hfTokenizer) ([]int32, error) {
	n := int64(0)
	for s, id := range h.Model.Vocab {
		if id < 0 || id >= 1<<31-1 {
			return nil, fmt.Errorf("tokenizer: tokenizer.json vocab %q has id %d", s, id)
		}
		n = max(n, id+1)
	}
	for _, a := range h.AddedTokens {
		if a.ID < 0 || a.ID >= 1<<31-1 {
			return nil, fmt.Errorf("tokenizer: tokenizer.json added token %q has id %d", a.Content, a.ID)
		}
		n = max(n, a.ID+1)
	}
	if n == 0 {
		return nil, errors.New("tokenizer: tokenizer.json has an empty vocabulary")
	}
	// Dense ids cannot exceed the entries; checked before allocating so a
	// stray huge id is an error, not an allocation of gigabytes.
	if entries := int64(len(h.Model.Vocab) + len(h.AddedTokens)); n > entries {
		return nil, fmt.Errorf("tokenizer: tokenizer.json ids reach %d but there are only %d tokens (ids must be 0..n-1)", n-1, entries)
	}
	t.tokens = make([]string, n)
	set := make([]bool, n)
	types := make([]int32, n)
	for s, id := range h.Model.Vocab {
		if set[id] {
			return nil, fmt.Errorf("tokenizer: tokenizer.json vocab id %d is both %q and %q", id, t.tokens[id], s)
		}
		t.tokens[id], set[id], types[id] = s, true, typeNormal
	}
	for _, a := range h.AddedTokens {
		switch {
		case a.Content == "":
			return nil, fmt.Errorf("tokenizer: tokenizer.json added token %d is empty", a.ID)
		case a.Lstrip || a.Rstrip || a.SingleWord:
			return nil, fmt.Errorf("tokenizer: tokenizer.json added token %q: lstrip, rstrip and single_word are not supported", a.Content)
		case set[a.ID] && t.tokens[a.ID] != a.Content:
			return nil, fmt.Errorf("tokenizer: tokenizer.json added token %q has id %d, which the vocabulary gives %q", a.Content, a.ID, t.tokens[a.ID])
		}
		t.tokens[a.ID], set[a.ID] = a.Content, true
		types[a.ID] = typeUserDefined
		if a.Special {
			types[a.ID] = typeControl
		}
	}
	for id, ok := range set {
		if !ok {
			return nil, fmt.Errorf("tokenizer: tokenizer.json has no token with id %d (ids must be 0..%d)", id, n-1)
		}
	}
	t.scores = make([]float32, n)
	return types, nil
}

// hfMerges reads model.merges in either form: ["a b", ...] or [["a", "b"], ...].
func hfMerges(raw json.RawMessage) ([]pair, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, errors.New("tokenizer: tokenizer.json model.merges is missing")
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		out := make([]pair, len(strs))
		for i, m := range strs {
			l, r, ok := strings.Cut(m, " ")
			if !ok || l == "" || r == "" || strings.Contains(r, " ") {
				return nil, fmt.Errorf("tokenizer: tokenizer.json model.merges[%d] = %q is not \"left right\"", i, m)
			}
			out[i] = pair{l, r}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json model.merges is neither strings nor pairs of strings: %w", err)
	}
	out := make([]pair, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || p[0] == "" || p[1] == "" {
			return nil, fmt.Errorf("tokenizer: tokenizer.json model.merges[%d] = %q is not a pair of non-empty strings", i, p)
		}
		out[i] = pair{p[0], p[1]}
	}
	return out, nil
}

// hfNormalizer accepts no normalizer or NFC and reports whether it is NFC.
func hfNormalizer(c *hfComponent) (bool, error) {
	if c == nil {
		return false, nil
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		if len(c.Normalizers) == 0 {
			return false, nil
		}
		if len(c.Normalizers) == 1 {
			return hfNormalizer(&c.Normalizers[0])
		}
		return false, fmt.Errorf("tokenizer: tokenizer.json normalizer Sequence of %d is not supported (accepted: none, NFC)", len(c.Normalizers))
	}
	return false, fmt.Errorf("tokenizer: tokenizer.json normalizer type %q is not supported (accepted: none, NFC)", c.Type)
}

// hfPreTokenizer maps the pre_tokenizer to a split: ByteLevel alone (with
// its GPT-2 regex), or a Sequence of Split(regex, Isolated) and a
// ByteLevel that applies no regex of its own.
func hfPreTokenizer(c *hfComponent) (preTokenizer, error) {
	if c == nil {
		return 0, errors.New("tokenizer: tokenizer.json has no pre_tokenizer (a byte-level BPE needs ByteLevel)")
	}
	byteLevel := func(c *hfComponent, wantRegex bool) error {
		if c.Type != "ByteLevel" {
			return fmt.Errorf("tokenizer: tokenizer.json pre_tokenizer type %q is not supported here (accepted: ByteLevel)", c.Type)
		}
		if c.AddPrefixSpace {
			return errors.New("tokenizer: tokenizer.json pre_tokenizer ByteLevel add_prefix_space = true is not supported")
		}
		if useRegex := c.UseRegex == nil || *c.UseRegex; useRegex != wantRegex {
			return fmt.Errorf("tokenizer: tokenizer.json pre_tokenizer ByteLevel use_regex = %v is not supported here", useRegex)
		}
		return nil
	}
	switch c.Type {
	case "ByteLevel":
		return preGPT2, byteLevel(c, true)
	case "Sequence":
		if len(c.PreTokenizers) != 2 {
			return 0, fmt.Errorf("tokenizer: tokenizer.json pre_tokenizer Sequence of %d is not supported (accepted: Split, ByteLevel)", len(c.PreTokenizers))
		}
		sp := &c.PreTokenizers[0]
		switch {
		case sp.Type != "Split":
			return 0, fmt.Errorf("tokenizer: tokenizer.json pre_tokenizer Sequence starts with %q (accepted: Split)", sp.Type)
		case sp.Pattern == nil || sp.Pattern.Regex == nil:
			return 0, errors.New("tokenizer: tokenizer.json pre_tokenizer Split has no Regex pattern")
		case sp.Behavior != "Isolated" || sp.Invert:
			return 0, fmt.Errorf("tokenizer: tokenizer.json pre_tokenizer Split behavior %q invert %v is not supported (accepted: Isolated, false)", sp.Behavior, sp.Invert)
		}
		p, err := preForRegex(*sp.Pattern.Regex)
		if err != nil {
			return 0, err
		}
		return p, byteLevel(&c.PreTokenizers[1], false)
	}
	return 0, fmt.Errorf("tokenizer: tokenizer.json pre_tokenizer type %q is not supported (accepted: ByteLevel, Sequence)", c.Type)
}

// startsWithSpecial returns the special token a TemplateProcessing
// post-processor's single-sequence template starts with (BOS), ok false if
// there is none.
func startsWithSpecial(c *hfComponent) (string, bool) {
	if c == nil || c.Type != "TemplateProcessing" || len(c.Single) == 0 {
		return "", false
	}
	var single []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		}
	}
	if json.Unmarshal(c.Single, &single) != nil || len(single) == 0 || single[0].SpecialToken == nil {
		return "", false
	}
	return single[0].SpecialToken.ID, true
}

// hfConfig applies tokenizer_config.json's special tokens and returns its
// add_bos_token (nil when absent).
func (t *Tokenizer) hfConfig(config []byte) (*bool, error) {
	var c hfConfig
	if err := json.Unmarshal(config, &c); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
	}
	for _, k := range []struct {
		name string
		raw  json.RawMessage
		dst  *int32
	}{{"bos_token", c.BOS, &t.bos}, {"eos_token", c.EOS, &t.eos}, {"unk_token", c.UNK, &t.unk}} {
		s, ok, err := tokenText(k.raw)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer_config.json %s: %w", k.name, err)
		}
		if !ok {
			continue
		}
		if *k.dst, err = t.lookup("tokenizer_config.json "+k.name, s); err != nil {
			return nil, err
		}
	}
	return c.AddBOS, nil
}

// tokenText reads a special token named in tokenizer_config.json: absent
// or null (ok false), a string, or an object with "content".
func tokenText(raw json.RawMessage) (string, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, fmt.Errorf("%s is neither a string nor an object with content", raw)
	}
	return *obj.Content, true, nil
}

// lookup is the id of token text s.
func (t *Tokenizer) lookup(what, s string) (int32, error) {
	id, ok := t.index[s]
	if !ok {
		return -1, fmt.Errorf("tokenizer: %s %q is not in the vocabulary", what, s)
	}
	return id, nil
}
