#!/usr/bin/env bash
# Regenerates testdata/tokenizer/llamacpp/: the ids llama.cpp's
# llama-tokenize gives every line of testdata/tokenizer/corpus.json, without
# BOS, both with special tokens parsed (llama-tokenize's default; the
# "special" ids, EncodeSpecial's counterpart) and with --no-parse-special
# (the "ids", Encode's counterpart), for
#   stories260K  testdata/models/stories260K.gguf (SentencePiece, "llama")
#   llama3       the real Llama 3 vocabulary as a GGUF (gpt2, pre llama-bpe)
#   qwen3        the real Qwen3 vocabulary as a GGUF (gpt2, pre qwen2)
# The two BPE GGUFs are written into SCRATCH by the tokenizer tests
# (TestWriteLlamaCppGGUF -write-gguf, from testdata/tokenizer/*/tokenizer.json
# the way llama.cpp's converter lays a vocabulary out); they are 3-9 MB and
# never committed. Each line goes to llama-tokenize as a file (-f, read
# verbatim) with --no-escape, so whitespace, newlines and backslashes are
# exact. stories260K's fixture has extra cases after the corpus lines: its
# SentencePiece special tokens (<s>, </s>, <unk>) in text, which only that
# vocabulary has as control tokens.
#
#   [VOCABS="stories260K ..."] scripts/make-llama-tokenize-fixtures.sh [SCRATCH]
#
# VOCABS (default all three) rewrites only the fixtures named.
#
# Needs a llama.cpp build (LLAMA_DIR, default /tmp/llama:
# bash /work/shared/tools/build-llama-cpp.sh /tmp/llama), go and python3.
# `make test` only reads the fixtures. Each of the 768 llama-tokenize calls
# reloads its vocabulary (about 2 s for Llama 3 and Qwen3), so a run takes
# about 18 minutes on 2 cores.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama}
bin=$LLAMA_DIR/build/bin
[ -x "$bin/llama-tokenize" ] || { echo "no llama-tokenize in $bin" >&2; exit 1; }
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
scratch=${1:-/tmp/tokref-llamacpp}
mkdir -p "$scratch"
scratch=$(cd "$scratch" && pwd)
out=$repo/testdata/tokenizer/llamacpp
mkdir -p "$out"
[ -f "$repo/testdata/models/stories260K.gguf" ] || make -C "$repo" model
VOCABS=${VOCABS:-stories260K llama3 qwen3}
[ "$VOCABS" = stories260K ] || (cd "$repo" && go test ./model/tokenizer -run '^TestWriteLlamaCppGGUF$' -count=1 -write-gguf "$scratch")
python3 - "$bin/llama-tokenize" "$repo/testdata/tokenizer/corpus.json" "$scratch" "$out" "$VOCABS" \
  "stories260K=$repo/testdata/models/stories260K.gguf=stories260K.gguf" \
  "llama3=$scratch/llama3.gguf=testdata/tokenizer/llama3/tokenizer.json as GGUF, pre llama-bpe" \
  "qwen3=$scratch/qwen3.gguf=testdata/tokenizer/qwen3/tokenizer.json as GGUF, pre qwen2" <<'EOF'
import json, os, subprocess, sys

tok, corpus, scratch, out, vocabs = sys.argv[1:6]
# SentencePiece's control tokens written as text: alone, around words, next
# to each other, and broken (not tokens), with and without spaces.
extra = {"stories260K": [
    "<s>", "</s>", "<unk>", "<s>Hello</s>", " <s> Once upon a time</s> ",
    "a<unk>b", "<s><s></s></s>", "</s>\n<s>", "<s", "s>", "< s>", "</s",
    "<S>", "<unk><s>x</s><unk>", "Lily said <s> and </s>.",
]}
lines = json.load(open(corpus, encoding="utf-8"))
version = subprocess.run([tok, "--version"], capture_output=True, text=True)
version = (version.stdout + version.stderr).strip().splitlines()[0]
prompt = os.path.join(scratch, "line.txt")

def ids(model, special):
    cmd = [tok, "-m", model, "-f", prompt, "--ids", "--no-bos", "--no-escape", "--log-disable"]
    if not special:
        cmd.append("--no-parse-special")
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])

for spec in sys.argv[6:]:
    name, model, desc = spec.split("=", 2)
    if name not in vocabs.split():
        continue
    cases = []
    for text in lines + extra.get(name, []):
        with open(prompt, "wb") as f:
            f.write(text.encode("utf-8"))
        cases.append({"text": text, "ids": ids(model, False), "special": ids(model, True)})
    with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
        f.write('{\n "llama_cpp": %s,\n "model": %s,\n "cases": [\n' % (json.dumps(version), json.dumps(desc)))
        f.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n ]\n}\n")
    print(name, len(cases), "lines", file=sys.stderr)
EOF
ls -l "$out"
