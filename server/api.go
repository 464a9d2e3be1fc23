package server

import "encoding/json"

// This file holds the wire types of the OpenAI API subset turnstile serves.
// Request fields are pointers where "absent" differs from the zero value;
// unknown fields are ignored, as OpenAI does.

// sharedFields are the request fields /v1/completions and
// /v1/chat/completions have in common (embedded, so JSON sees them flat).
type sharedFields struct {
	Model             string          `json:"model"`
	MaxTokens         *int            `json:"max_tokens"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	Seed              *int64          `json:"seed"`
	Stop              json.RawMessage `json:"stop"` // string or list of strings
	N                 *int            `json:"n"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	User              string          `json:"user"`
	Stream            bool            `json:"stream"`
	StreamOptions     *streamOptions  `json:"stream_options"`
	// turnstile (and vLLM) extensions.
	IgnoreEOS    bool    `json:"ignore_eos"`
	StopTokenIDs []int32 `json:"stop_token_ids"`
	CacheSalt    string  `json:"cache_salt"`
	// ProgramID groups the requests of one agentic program (also the
	// X-Program-Id header); ProgramRelease ends the program when this
	// request completes (also the X-Program-Release header).
	ProgramID      string `json:"program_id"`
	ProgramRelease bool   `json:"program_release"`
	// Structured output (response_format and vLLM's extensions).
	constraintFields
	// Fields refused until implemented (refused.go).
	refusedShared
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	sharedFields
	Prompt   json.RawMessage `json:"prompt"` // string, [string], [int] or [[int]]
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	refusedCompletion
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	sharedFields
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`
	// Tools (chattools.go): tools, tool_choice, parallel_tool_calls, and
	// the template variables chat_template_kwargs (e.g. enable_thinking).
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	// ReasoningEffort none or minimal turns a thinking template's
	// thinking off (parser.reasoningEffort).
	ReasoningEffort *string `json:"reasoning_effort"`
	refusedChat
}

// chatMessage is one message; Content is a string, null, or a list of
// content parts of which only {"type": "text"} are accepted.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name"`
	// ToolCalls are an assistant's calls, ToolCallID the call a tool
	// message answers; ReasoningContent an assistant's reasoning.
	ToolCalls        json.RawMessage `json:"tool_calls"`
	ToolCallID       *string         `json:"tool_call_id"`
	ReasoningContent *string         `json:"reasoning_content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// usage is OpenAI's usage object.
type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails *promptDetail `json:"prompt_tokens_details,omitempty"`
}

type promptDetail struct {
	CachedTokens int `json:"cached_tokens"`
}

// completionResponse is a /v1/completions answer or stream chunk (object
// "text_completion" in both, as OpenAI sends).
type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// completionLogprobs is the legacy completions log-probability layout.
// TopLogprobs[k] maps the piece of each of the k-th position's most likely
// tokens, and of the chosen token, to its log-probability (so up to
// logprobs+1 entries, as OpenAI documents); null when logprobs is 0.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// chatResponse is a /v1/chat/completions answer (object "chat.completion")
// or stream chunk ("chat.completion.chunk"). Usage is a pointer that is
// serialised as null in chunks when include_usage asks for it.
type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      *chatMessageOut `json:"message,omitempty"`
	Delta        *chatOut        `json:"delta,omitempty"`
	Logprobs     *chatLogprobs   `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// chatOut is a choice's message (whole answers) or delta (chunks). A
// whole answer always has content (null when the message is only tool
// calls); a delta omits what it does not carry.
type chatOut struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
}

// chatMessageOut is a whole answer's message: content is null, not
// absent, when the model only called tools.
type chatMessageOut struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
}

// chatToolCall is a call in a message (id, type and name set; index
// absent) or a delta's fragment of one (index set; id, type and name only
// in the call's first fragment).
type chatToolCall struct {
	Index    *int             `json:"index,omitempty"`
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function chatFunctionCall `json:"function"`
}

type chatFunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

// chatTokenLogprob is one chosen token with its top_logprobs most likely
// alternatives (empty when top_logprobs is 0).
type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

// chatTopLogprob is one alternative: the token's piece as text and bytes.
type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// modelList is GET /v1/models.
type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Created   int64  `json:"created"`
	OwnedBy   string `json:"owned_by"`
	MaxLength int    `json:"max_model_len"`
}
