// Package server is turnstile's OpenAI-compatible HTTP API (with
// Anthropic's Messages API and vLLM's tokenizer endpoints): it parses and
// validates requests, submits them to the engine through the Engine
// interface it defines, and answers JSON or server-sent events.
//
// # Endpoints
//
//	POST   /v1/completions       prompt: string, [string], [token ids] or [[token ids]]
//	POST   /v1/chat/completions  messages rendered by the chat template
//	POST   /v1/responses         OpenAI's Responses API (see below)
//	GET    /v1/responses/{id}    a stored response
//	DELETE /v1/responses/{id}    delete a stored response
//	POST   /v1/messages          Anthropic's Messages API (messages_answer.go)
//	POST   /v1/messages/count_tokens  the Messages request's prompt tokens
//	POST   /tokenize             vLLM's: a prompt or chat messages to token ids
//	POST   /detokenize           vLLM's: token ids to text
//	GET    /v1/models            the one served model
//	DELETE /v1/programs/{id}     end an agentic program
//	GET    /health               200 while serving, 503 while draining
//	GET    /metrics              Prometheus text format, names prefixed turnstile_
//
// Supported request fields: model, max_tokens (chat also
// max_completion_tokens), temperature, top_p, top_k, min_p, seed, stop
// (string or list), n, logprobs (completions: 0..5 alternatives per token,
// rendered as OpenAI's legacy tokens/token_logprobs/top_logprobs/text_offset;
// chat: true, with top_logprobs 0..20, which needs logprobs: true),
// presence_penalty, frequency_penalty, repetition_penalty, user, stream,
// stream_options.include_usage; extensions: ignore_eos, stop_token_ids,
// cache_salt, program_id, program_release. Unknown fields are ignored, as
// OpenAI does. Absent sampling fields take OpenAI's defaults (temperature
// 1, top_p 1); absent max_tokens means up to the model's context.
//
// # Anthropic's Messages API
//
// POST /v1/messages maps Anthropic's request onto the conversation chat
// completions renders (convo): system (a string or text blocks) first;
// a user message's tool_result blocks become tool messages answering
// tool_use_id, placed before its other text (is_error: true prefixes the
// result's text with "Error: ", as templates render results as text); an
// assistant's tool_use blocks become its calls (the input's JSON as the
// arguments), its thinking blocks its reasoning; redacted_thinking is
// accepted and dropped (Anthropic's encrypted reasoning no other model
// reads). Image, document and other non-text blocks, tools of a type other
// than custom (Anthropic's server tools), and a final assistant message
// (a prefill, which the template would render as a finished turn) are 400
// unsupported naming the field. max_tokens is required; temperature is in
// [0, 1] (Anthropic's range); tool_choice auto, any, tool and none map to
// auto, required, named and none, disable_parallel_tool_use allows one
// call; thinking {type: enabled|disabled} sets the template variable
// enable_thinking, and budget_tokens is validated as Anthropic does
// (≥ 1024, < max_tokens) but not enforced: only max_tokens bounds the
// reasoning. The answer's blocks are thinking (signature ""), text and
// tool_use (ids toolu_…); stop_reason is tool_use when the output called
// tools, max_tokens at the length limit, stop_sequence with the matched
// string (executor.Delta.StopString) or end_turn. usage.input_tokens are
// the prompt tokens not read from the prefix cache, which
// cache_read_input_tokens counts; cache_creation_input_tokens is 0. A
// stream sends message_start (input_tokens: the whole prompt, as the
// cache's share is known only at the end), ping, each block's
// content_block_start, _delta and _stop (a block starts with its first
// output and stops when another kind starts or at the end), message_delta
// (stop reason and the final usage) and message_stop. Every failure on
// these routes, authentication and parsing included, is Anthropic's
// {"type": "error", "error": {"type", "message"}} with the status below
// (in a stream an error event). POST /v1/messages/count_tokens takes the
// same body (max_tokens and stream not read) and answers {"input_tokens"}:
// the rendered prompt, tools included, without the engine.
//
// # Tokenizer endpoints
//
// POST /tokenize takes {prompt, add_special_tokens (default true: the BOS
// the tokenizer adds)} or {messages, add_generation_prompt (default true),
// tools, chat_template_kwargs, add_special_tokens (default false: exactly
// the prompt chat completions submits; true puts a BOS first when it is
// missing)}, messages parsed and rendered as chat completions does; it
// answers {count, max_model_len, tokens, token_strs (the vocabulary strings,
// when return_token_strs)}. POST /detokenize takes {tokens} and answers
// {prompt}; an id outside the vocabulary is 400 naming tokens[k].
//
// # Validation
//
// Every check runs before anything is submitted, so a refused request
// leaves the engine untouched. Errors are OpenAI's JSON
// {"error": {"message", "type", "param", "code"}}: malformed JSON, wrong
// types (naming the element: messages[0].role), invalid UTF-8, a body that
// is not a JSON object or is over Config.MaxBodyBytes, max_tokens ≤ 0 or
// beyond the context, a prompt that leaves no room in the context and
// sampling values outside OpenAI's ranges (temperature [0, 2], top_k at
// most the vocabulary, stop strings at most 1024 bytes) are 400
// invalid_request_error; a body that is not Content-Type application/json
// is 415 (browsers send text/plain, form and multipart bodies cross-site
// without a preflight); an unknown model is 404; a missing or wrong API key
// 401 authentication_error (the key comes as Authorization: Bearer or
// x-api-key), two Authorization or x-api-key headers, or both headers with
// different keys, 400; more than
// Config.MaxInFlight engine requests in flight (Config.MaxProgramInFlight
// for program turns, a bound of their own) 429 rate_limit_error with
// Retry-After. A text prompt is bounded in bytes before it is tokenised
// (context × the longest token piece), so refusing an oversized prompt
// costs O(context) memory, not O(body).
//
// # Bounds on clients
//
// No client can hold what it does not use. A request's place in flight is
// freed when the engine finishes it (executor.Stream.Ended), before its
// client has read the answer. Headers, and again the body, must arrive
// within Config.ReadTimeout (408 otherwise); each write of an answer must
// be taken within Config.WriteTimeout, or the client is dropped and its
// requests aborted; connections are bounded by Config.MaxConnections and
// requests being read, parsed and tokenised at once by Config.MaxParsing. A
// client that goes away before its answer is complete is logged and
// counted as 499, never as a server error.
//
// # Chat template
//
// With Config.ChatTemplate (the GGUF's tokenizer.chat_template) messages
// are rendered by a Jinja-compatible engine (github.com/ardanlabs/jinja)
// with messages, add_generation_prompt=true, bos_token and eos_token; a BOS
// written at the very start is dropped because the prompt is encoded with a
// BOS token. The special-token text the template writes (e.g.
// "<|im_start|>") becomes those tokens (the tokenizer's EncodeSpecial);
// message content and names are escaped first (EscapeSpecial), so text a
// client sends, "<|im_end|>" included, is always encoded as text. Without a template the fallback format is one line per
// message, "Role: content", with roles System (also for developer), User,
// Assistant and Tool, followed by the cue "Assistant:":
//
//	System: You are terse.
//	User: Hi!
//	Assistant:
//
// # Tools and reasoning
//
// tools (function tools with JSON Schema parameters), tool_choice (none,
// auto, required or a named function) and parallel_tool_calls reach the
// model through its chat template: the tools variable, an assistant's
// tool_calls with arguments as objects (members in the client's order) and
// tool messages with tool_call_id. How the model writes a call (Hermes'
// <tool_call> tags for Qwen, Llama 3.1's JSON, Mistral's [TOOL_CALLS]) is
// read off the template at start-up by rendering a conversation with and
// without a call (package toolcall knows the syntaxes). A template without
// tool support gets the fallback: the tools described in the system
// message, calls written as <tool_call> JSON in the assistant's content,
// tool results rendered in the template's tool role.
//
// required and a named function are enforced by the guided decoder: a
// structural-tag grammar of the model's call syntax around each tool's
// parameter schema; auto lets the model write text and constrains a call
// from its opening marker on; parallel_tool_calls false bounds the grammar
// to one call, so generation stops after it. Without the grammar engine
// (structured output off), auto is parsed only and required or named is a
// 400. The output is parsed back into message.tool_calls (ids unique per
// call) with finish_reason "tool_calls"; streamed, the first delta of a
// call carries index, id, type and name, later ones argument fragments,
// and text that may begin a call marker is held back until decided.
//
// Templates that mark reasoning with <think>…</think> (Qwen3, DeepSeek-R1)
// return it as reasoning_content, apart from content, including when the
// template opens the block in the prompt; a JSON-schema constraint or a
// tool grammar applies after the reasoning ends. chat_template_kwargs
// passes template variables (enable_thinking: false turns Qwen3's thinking
// off); reasoning_effort none or minimal does the same, low to xhigh leave
// thinking on (turnstile has no thinking budget between them).
//
// # Programs and tenants
//
// The X-Program-Id header or program_id field tags a request with its
// agentic program (executor.Request.ProgramID, for the admission policy);
// program_release (or X-Program-Release: true) ends the program when the
// request completes, as DELETE /v1/programs/{id} does at once. An engine
// with a program policy (executor.Config.Programs, `turnstile serve
// --admission`) runs a program's requests one turn at a time, so the n
// choices of a request with a program id run one after another. cache_salt
// keeps prefix caches apart; with API keys every key adds its own salt, so
// tenants never share KV blocks.
//
// # Responses
//
// POST /v1/responses serves the subset of OpenAI's Responses API the
// official clients and the OpenAI Agents SDK send. input is a string (one
// user message) or a list of items: messages ({role, content} with or
// without "type": "message"; roles user, assistant, system, developer;
// content a string or input_text/output_text parts), function_call items
// (joined, in order, to the assistant message before them),
// function_call_output items (tool messages answering a call by call_id)
// and reasoning items, whose text (reasoning_text content, else the
// summary's text) becomes the next assistant message's reasoning; an
// encrypted_content is dropped. instructions is a system message first, for
// this turn only: it is not carried to the responses that continue this
// one, as OpenAI documents. Also served: tools (flat function tools; other
// types are 400 naming tools[i].type), tool_choice, parallel_tool_calls,
// text.format (text, json_object, json_schema: the constraint of chat's
// response_format, errors naming text.format), max_output_tokens,
// temperature, top_p, stream, store (default true), previous_response_id,
// metadata (stored and echoed), user, truncation "disabled" (auto is 400),
// reasoning.effort (none and minimal turn a thinking template's
// enable_thinking off). include values that ask for items turnstile never
// makes are accepted, the others (reasoning.encrypted_content,
// message.output_text.logprobs) are 400; service_tier, safety_identifier
// and prompt_cache_key (OpenAI's routing hint; the prefix cache needs none)
// are accepted and ignored; background, conversation, prompt,
// max_tool_calls and top_logprobs are 400. n is always 1.
//
// The answer is a response object whose output holds a reasoning item
// (when the model reasoned), a message (when it wrote text, or did nothing
// else) and a function_call per call, status "completed" or "incomplete"
// (incomplete_details.reason max_output_tokens). Streamed, it is OpenAI's
// typed events with sequence numbers: response.created,
// response.in_progress, per item output_item.added, content_part.added,
// output_text.delta (reasoning_text.delta; function_call_arguments.delta
// for calls), the matching .done events, output_item.done, then
// response.completed or response.incomplete carrying the whole response; no
// [DONE]. A failure mid-stream sends an error event and response.failed;
// one before the stream began is OpenAI's JSON error body.
//
// A completed response is stored unless store is false: GET
// /v1/responses/{id} returns it, DELETE removes it, and
// previous_response_id continues it: the new turn's conversation is the
// stored one (its input and output) followed by the new input. The turns
// of a chain run as one agentic program, "resp-chain-" and the chain's
// first response id (or the first turn's X-Program-Id; a later turn's
// X-Program-Id must agree), so the admission policy sees one program and
// each turn's prompt starts with the previous turn's prompt and output,
// whose KV blocks the prefix cache reuses. When the chain's last stored
// response goes (deleted, evicted or expired) and none of its turns is in
// flight, its program is released, as DELETE /v1/programs/{id} would; a
// chain that was never stored is released when its turn ends. The store
// holds at most Config.ResponsesMax responses and
// Config.ResponsesMaxBytes bytes (each response is charged its JSON and
// its whole conversation's text, which the responses of a chain share in
// memory, so the bound is an upper bound on what is held), evicting the
// least recently used first; a response unused (neither read nor
// continued) for Config.ResponsesTTL expires, checked at every store
// operation. A response larger than the byte bound alone is answered but
// not stored. An unknown, evicted or expired previous_response_id is 404
// previous_response_not_found; GET and DELETE of such an id are 404
// response_not_found. /metrics exports turnstile_responses_stored and
// turnstile_responses_stored_bytes.
//
// # Lifecycle
//
// A client that disconnects cancels its request's context, which aborts it
// in the engine by the next step boundary. Serve drains on shutdown: it
// stops accepting, lets requests in flight finish up to a deadline, then
// aborts the rest (a cut stream ends with an error event and [DONE]; a
// whole answer is 503), closes the connections still open 2 s later and
// returns at most 2 s after that, whatever the clients do.
//
// Without a program policy in the engine, the server's table of program
// ids (for /metrics) is the program: DELETE /v1/programs/{id} ends an id it
// knows (200) or answers 404 program_not_found, and ids idle for
// Config.ProgramIdleTTL are forgotten.
package server
