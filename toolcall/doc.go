// Package toolcall knows how model families write tool calls and reasoning
// in their output, and parses an output into content, reasoning and calls,
// whole (Parse) or as it streams (Parser). It imports only the standard
// library.
//
// # Syntaxes
//
// A Syntax is one family's way of writing calls: hermes (Qwen2.5, Qwen3,
// Hermes: each call a JSON object in <tool_call> tags), llama3 (a bare JSON
// object with "parameters", several joined by "; "), mistral (a JSON array
// of calls after [TOOL_CALLS]) and fallback, which is hermes under the name
// turnstile uses for models whose template writes no calls. Its Prefix,
// Begin, End, Sep and Suffix compose the text of a run of calls (Format),
// and Triggers are what a lazy grammar watches for. FromTemplate finds the
// syntax a chat template writes from the template's rendering of one call.
//
// The parser accepts more than the exact text: any JSON whitespace, the keys
// in either order, "arguments" or "parameters" in every syntax, extra
// members after the arguments. A call's first key must be "name",
// "arguments" or "parameters", so that ordinary JSON in text (and, for
// llama3, every '{') is released as content as soon as its first key is read.
//
// # Streaming and held-back text
//
// The parser reads bytes and decides each as soon as it can; what it cannot
// decide yet is held back rather than emitted and taken back: a suffix that may
// be the start of a marker (<think>, </think>, a tag), a run of whitespace
// (content is trimmed around calls, see below), and a call from its start
// until its name is known and its arguments' value starts. At that point
// CallBegin is emitted and the arguments stream as CallArgs fragments; a
// JSON scanner follows strings, escapes and nesting, so a marker or a brace
// inside an argument string does not end the call. Arguments written before
// the name are kept and emitted with CallBegin when the call's object ends.
//
// A call ends with its object's '}'; a close tag (hermes' </tool_call>) is
// read when it follows and not required. A call not begun that turns out
// not to be a call (malformed JSON, no name or no arguments, the output
// ending) becomes content exactly as written, and reading resumes at the
// byte that broke it. A begun call cannot be taken back: it keeps the
// arguments it got (cut short if the output ended or its JSON broke; whitespace
// at the cut is dropped), and the text after its arguments up to where its
// object broke becomes content.
//
// # The invariant
//
// Parse(s, r, text) is the parser fed text in one piece, and the parser's
// decisions depend only on the bytes read so far, never on where the chunks
// split; so for any split of text, Collect of the events of Feed on each
// chunk and Close equals Parse(s, r, text). FuzzStream checks it, with the
// events' shape and that no text is invented. Chunks may split anywhere,
// even inside a UTF-8 character; events then split it where the input did.
//
// # Whitespace
//
// Whitespace means ASCII space, tab, CR and LF. Content is the text outside
// calls with each piece between calls trimmed: whitespace at the start of
// content (of the output or after </think>), at its end, and next to a call
// is dropped, and for llama3 one ';' right after a call too (its
// separator). Reasoning is trimmed at both ends. Arguments are trimmed.
//
// # Reasoning
//
// With Reasoning.Open set, an output that starts (after whitespace) with
// Open is reasoning until Close; with StartsInside it is reasoning from the
// start until Close (an Open written anyway at the start is dropped), and
// all reasoning if Close never comes. Calls are only
// looked for after reasoning ends.
package toolcall
