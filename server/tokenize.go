package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// This file serves vLLM's POST /tokenize and POST /detokenize: the
// model's tokenizer (and chat template) without the engine.

// tokenizeRequest is the body of POST /tokenize: a prompt, or chat
// messages rendered as /v1/chat/completions renders them.
type tokenizeRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	AddSpecialTokens    *bool           `json:"add_special_tokens"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	Tools               json.RawMessage `json:"tools"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	ReturnTokenStrs     bool            `json:"return_token_strs"`
}

// tokenizeResponse is /tokenize's answer; token_strs (the tokens'
// vocabulary strings) only when asked.
type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int32  `json:"tokens"`
	TokenStrs   []string `json:"token_strs,omitempty"`
}

type detokenizeRequest struct {
	Model  string          `json:"model"`
	Tokens json.RawMessage `json:"tokens"`
}

type detokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// textDecoder is what a Tokenizer may offer to turn ids into text as a
// whole (model/tokenizer's Decode drops the space prefix SentencePiece
// adds); without it the pieces are joined.
type textDecoder interface {
	Decode(ids []int32) string
}

// tokenize parses and answers a /tokenize body. A prompt is encoded with
// the BOS the tokenizer adds unless add_special_tokens is false. Messages
// are parsed as chat completions parses them and rendered through the
// chat template (add_generation_prompt, default true, ends them with the
// assistant's cue); with add_special_tokens false (the default for
// messages) the tokens are exactly the prompt chat completions submits,
// with true a BOS is put first when they do not start with one.
func (p *parser) tokenize(body []byte) (*tokenizeResponse, *APIError) {
	var r tokenizeRequest
	if e := decode(body, &r); e != nil {
		return nil, e
	}
	if e := p.checkModel(r.Model); e != nil {
		return nil, e
	}
	var toks []int32
	switch hasPrompt, hasMsgs := present(r.Prompt), present(r.Messages); {
	case hasPrompt && hasMsgs:
		return nil, badRequest("messages", "invalid_value", "give prompt or messages, not both")
	case hasPrompt:
		if r.AddGenerationPrompt != nil || present(r.Tools) || present(r.ChatTemplateKwargs) {
			return nil, badRequest("prompt", "invalid_value", "add_generation_prompt, tools and chat_template_kwargs apply to messages, not to a prompt")
		}
		var text string
		if e := unmarshalAt(r.Prompt, &text, "prompt"); e != nil {
			return nil, e
		}
		if e := p.checkBytes("prompt", "prompt", len(text)); e != nil {
			return nil, e
		}
		special := r.AddSpecialTokens == nil || *r.AddSpecialTokens
		toks = p.tok.Encode(text, special && p.tok.AddBOS())
	case hasMsgs:
		msgs, e := p.messages(r.Messages)
		if e != nil {
			return nil, e
		}
		tools, e := openAITools(r.Tools)
		if e != nil {
			return nil, e
		}
		kwargs, e := parseKwargs(r.ChatTemplateKwargs, "chat_template_kwargs")
		if e != nil {
			return nil, e
		}
		c := &convo{msgs: msgs, tools: tools, choice: toolChoice{Mode: toolsNone}, parallel: true, kwargs: kwargs,
			msgsParam: "messages", toolsParam: "tools", choiceParam: "tool_choice",
			nameField: "function.name", schemaField: "function.parameters"}
		cue := r.AddGenerationPrompt == nil || *r.AddGenerationPrompt
		if toks, _, e = p.renderConvo(c, cue); e != nil {
			return nil, e
		}
		if r.AddSpecialTokens != nil && *r.AddSpecialTokens && p.tok.BOS() >= 0 && toks[0] != p.tok.BOS() {
			toks = append([]int32{p.tok.BOS()}, toks...)
		}
	default:
		return nil, badRequest("prompt", "missing", "prompt (a string) or messages is required")
	}
	if toks == nil {
		toks = []int32{}
	}
	out := &tokenizeResponse{Count: len(toks), MaxModelLen: p.lim.maxContext, Tokens: toks}
	if r.ReturnTokenStrs {
		out.TokenStrs = make([]string, len(toks))
		for i, t := range toks {
			out.TokenStrs[i] = p.tok.Token(t)
		}
	}
	return out, nil
}

// detokenize parses and answers a /detokenize body.
func (p *parser) detokenize(body []byte) (*detokenizeResponse, *APIError) {
	var r detokenizeRequest
	if e := decode(body, &r); e != nil {
		return nil, e
	}
	if e := p.checkModel(r.Model); e != nil {
		return nil, e
	}
	raw := bytes.TrimSpace(r.Tokens)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("tokens", "missing", "tokens (a list of token ids) is required")
	}
	ids, e := tokenIDs(raw, "tokens")
	if e != nil {
		return nil, e
	}
	for k, t := range ids {
		if t < 0 || int(t) >= p.lim.vocab {
			at := fmt.Sprintf("tokens[%d]", k)
			return nil, badRequest(at, "invalid_value", "%s: token %d outside the vocabulary [0, %d)", at, t, p.lim.vocab)
		}
	}
	if d, ok := p.tok.(textDecoder); ok {
		return &detokenizeResponse{Prompt: d.Decode(ids)}, nil
	}
	var b strings.Builder
	for _, t := range ids {
		b.Write(p.tok.Piece(t))
	}
	return &detokenizeResponse{Prompt: strings.ToValidUTF8(b.String(), "\uFFFD")}, nil
}

// serveTool reads, authenticates and answers one tokenizer request (no
// engine), holding a parsing place meanwhile, as readJob does.
func serveTool[T any](s *Server, w http.ResponseWriter, r *http.Request, parse func([]byte) (*T, *APIError)) {
	var out *T
	j, e := s.readJob(w, r, func(body []byte) (*job, *APIError) {
		var e *APIError
		if out, e = parse(body); e != nil {
			return nil, e
		}
		return &job{}, nil
	})
	switch {
	case e != nil:
		writeError(w, e)
	case j == nil:
		clientGone(w)
	default:
		writeJSON(w, out)
	}
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	serveTool(s, w, r, s.parse.tokenize)
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	serveTool(s, w, r, s.parse.detokenize)
}
