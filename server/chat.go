package server

import (
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// message is one chat message after parsing: its role and its text.
type message struct {
	Role    string
	Content string
	Name    string
}

// chatTemplate turns a conversation into prompt text: through the model's
// Jinja chat template when it has one, else through the fallback format
// described in the package documentation. Safe for concurrent use.
type chatTemplate struct {
	tmpl     *jinja.Template // nil: the fallback format
	bos, eos string          // the BOS and EOS tokens' text, for templates
	// special, when set, encodes rendered templates: the template's own
	// special-token text becomes those tokens, message text is escaped
	// so that it stays text.
	special specialEncoder
}

// specialEncoder is what a Tokenizer may also offer for chat templates
// (model/tokenizer's does): EncodeSpecial reads special-token text (e.g.
// "<|eot_id|>") as the tokens, and EscapeSpecial changes text so that
// EncodeSpecial encodes it as Encode would.
type specialEncoder interface {
	EncodeSpecial(text string, addBOS bool) []int32
	EscapeSpecial(s string) string
}

// withSpecial makes c encode through tok's special-token support when tok
// has it and c renders a template (the fallback format writes no special
// tokens).
func (c *chatTemplate) withSpecial(tok Tokenizer) *chatTemplate {
	if se, ok := tok.(specialEncoder); ok && c.tmpl != nil {
		c.special = se
	}
	return c
}

// encode tokenizes a prompt render returned.
func (c *chatTemplate) encode(tok Tokenizer, text string, addBOS bool) []int32 {
	if c.special != nil {
		return c.special.EncodeSpecial(text, addBOS)
	}
	return tok.Encode(text, addBOS)
}

// newChatTemplate compiles src ("" selects the fallback). bos and eos are
// the text of the tokenizer's BOS and EOS tokens (templates use them as
// bos_token and eos_token).
func newChatTemplate(src, bos, eos string) (*chatTemplate, error) {
	c := &chatTemplate{bos: bos, eos: eos}
	if src == "" {
		return c, nil
	}
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("server: chat template (%d bytes): %w", len(src), err)
	}
	c.tmpl = t
	return c, nil
}

// fallbackRoles names roles in the fallback format.
var fallbackRoles = map[string]string{
	"system": "System", "developer": "System", "user": "User", "assistant": "Assistant", "tool": "Tool",
}

// render returns the prompt text for msgs, ending with the cue for the
// assistant's reply. A BOS the template writes at the very start is removed
// from the text and reported as bos, for the caller to encode as the BOS
// token. With special set, message content and names are escaped before
// rendering, so encode turns only the template's special-token text into
// tokens.
func (c *chatTemplate) render(msgs []message) (text string, bos bool, err error) {
	if c.tmpl == nil {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(fallbackRoles[m.Role])
			b.WriteString(": ")
			b.WriteString(m.Content)
			b.WriteByte('\n')
		}
		b.WriteString("Assistant:")
		return b.String(), false, nil
	}
	list := make([]any, len(msgs))
	esc := func(s string) string { return s }
	if c.special != nil {
		esc = c.special.EscapeSpecial
	}
	for i, m := range msgs {
		d := map[string]any{"role": m.Role, "content": esc(m.Content)}
		if m.Name != "" {
			d["name"] = esc(m.Name)
		}
		list[i] = d
	}
	out, err := c.tmpl.Render(map[string]any{
		"messages":              list,
		"add_generation_prompt": true,
		"bos_token":             c.bos,
		"eos_token":             c.eos,
	})
	if err != nil {
		return "", false, fmt.Errorf("chat template: %w", err)
	}
	if c.bos != "" && strings.HasPrefix(out, c.bos) {
		return out[len(c.bos):], true, nil
	}
	return out, false, nil
}
