// Package grammar is structured output's grammar engine: it compiles JSON
// Schema, regular expressions, lists of choices, GBNF grammars and
// structural tags (free text and tagged JSON values: tool calls) into a
// Grammar, and a Matcher follows one generation through it, giving the
// mask of tokens allowed at each step. It is cgo-free and knows nothing of
// HTTP or the engine.
//
// # Representation
//
// A grammar is a set of rules; each rule is a deterministic automaton over
// bytes whose edges may also call other rules (a recursive transition
// network). Front ends build rules from expressions (Expr: byte sets,
// literals, sequences, alternatives, repetition, rule references, graphs);
// Build turns each into a minimal DFA (subset construction, then Valmari
// and Lehtinen's minimization), makes every rule but the outermost match
// only non-empty strings (its callers skip it instead), refuses left
// recursion, rules that can never finish and grammars past Limits, and
// numbers the states of all rules globally. Regular languages are closed
// under intersection and difference, which the JSON Schema compiler uses
// for patterns, formats, lengths, numeric ranges, multipleOf and keys.
//
// # Matching
//
// A parse is a stack of frames (a grammar state, and the frame to return
// to); a Matcher holds the set of parses alive after the accepted tokens
// (more than one only where the grammar is ambiguous), with a history for
// Rollback. Accept reads a token's bytes by exploring calls, returns and
// reads with backtracking.
//
// # Masks
//
// A mask is the union, over the parses, of what the top frame's position
// allows. For a position, a token table (built once per grammar and
// vocabulary, lazily, by walking the vocabulary's byte trie through a
// lazily determinized automaton of the position's local parses) lists the
// tokens read wholly inside the position's rule and what it calls —
// accepted whatever the callers are — and the tokens that leave the rule
// part-way, grouped by the bytes left after it returns; those bytes are
// checked against the real callers at mask time (a handful of short
// strings), and when the rule can return before reading anything, the
// caller's position contributes too. What a table holds apart from the
// callers is shared by every grammar over the vocabulary, keyed by what
// the position reads: its structure, when it reaches few states, or its
// automaton unrolled as deep as the vocabulary's short tokens (24 bytes;
// the few longer ones are walked per position), so every position of a
// string with maxLength 255 far from its bounds has one table. The
// vocabulary also keeps the trie's subtrees under each first byte, keyed
// alike, so a position that differs from a known one in a few first bytes
// (a key that must not be a declared name) walks only those. A JSON
// string is walked once per process. Control tokens are never allowed;
// the stop tokens exactly when the text so far is complete.
package grammar
