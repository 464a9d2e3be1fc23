#!/usr/bin/env bash
# Regenerates testdata/quant: small GGUF files quantised by llama.cpp itself
# and ggml-ref.txt, what ggml's own dequantisers decode from them (and from
# pseudo-random blocks, and from the blocks turnstile's quantisers write).
# `make test` only reads these files; this script needs a llama.cpp build
# (LLAMA_DIR, default /tmp/llama: bash /work/shared/tools/build-llama-cpp.sh
# /tmp/llama) and gcc.
#
# The synthetic model: llama, dim 256, 1 layer, 4 heads, 1 kv head, ffn 96,
# tied output, stories260K's tokenizer (vocab 512), seed 1. ffn 96 is not a
# multiple of 256, so ffn_down (96 columns) takes llama.cpp's fallback type
# under every K-quant; model/gguf's tests rebuild the same F32 model in Go.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama}
Q=$LLAMA_DIR/build/bin/llama-quantize
[ -x "$Q" ] || { echo "no $Q: build llama.cpp first (build-llama-cpp.sh $LLAMA_DIR)" >&2; exit 1; }
OUT=testdata/quant
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/turnstile" ./cmd/turnstile
gcc -O2 -std=c11 -o "$tmp/quant-ref" scripts/quant-ref.c -I"$LLAMA_DIR/ggml/include" \
  -L"$LLAMA_DIR/build/bin" -lggml-base -Wl,-rpath,"$LLAMA_DIR/build/bin"
g++ -O2 -std=c++17 -o "$tmp/llama-logits" scripts/llama-logits.cpp -I"$LLAMA_DIR/include" \
  -I"$LLAMA_DIR/ggml/include" -L"$LLAMA_DIR/build/bin" -lllama -lggml -lggml-base \
  -Wl,-rpath,"$LLAMA_DIR/build/bin"

synth() { # TYPE FFN OUT
  "$tmp/turnstile" model synth --dim 256 --layers 1 --heads 4 --kv-heads 1 --ffn "$2" --tied \
    --seed 1 --vocab-from testdata/models/stories260K.gguf --type "$1" -o "$3"
}
synth f32 96 "$tmp/f32.gguf"

rm -f "$OUT"/llama-*.gguf
ref=$OUT/ggml-ref.txt
{
  echo "# ggml dequantisation reference: $(cat "$LLAMA_DIR/VERSION" 2>/dev/null || echo llama.cpp)"
  echo "# written by scripts/make-quant-fixtures.sh; format in scripts/quant-ref.c"
  "$tmp/quant-ref" random
  # Q5_0 and Q5_1 come as the fallbacks of Q4_K and Q5_K (and Q4_0 as
  # Q2_K's and Q3_K's, Q8_0 as Q6_K's); their own files would only add size.
  for t in Q4_0 Q4_1 Q2_K Q3_K Q4_K Q5_K Q6_K; do
    "$Q" --pure "$tmp/f32.gguf" "$OUT/llama-$t.gguf" "$t" >/dev/null 2>&1
    "$tmp/quant-ref" file "llama-$t" "$OUT/llama-$t.gguf"
  done
  # Q4_K_M: llama.cpp's own per-tensor mix (the end-to-end test's model).
  "$Q" "$tmp/f32.gguf" "$OUT/llama-Q4_K_M.gguf" Q4_K_M >/dev/null 2>&1
  "$tmp/quant-ref" file llama-Q4_K_M "$OUT/llama-Q4_K_M.gguf"
  # turnstile's quantisers (not committed: the tests rebuild the bytes).
  for t in Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K; do
    synth "$t" 256 "$tmp/ours-$t.gguf"
    "$tmp/quant-ref" file "ours-$t" "$tmp/ours-$t.gguf"
  done
} > "$ref"

# llama.cpp's teacher-forced logits of 24 tokens, (37i + 11) mod 512, on the
# F32 model and on its Q4_K_M file.
toks=$(for i in $(seq 0 23); do echo $(( (i * 37 + 11) % 512 )); done)
"$tmp/llama-logits" "$tmp/f32.gguf" "$OUT/llama-logits-F32.bin" $toks 2>/dev/null
"$tmp/llama-logits" "$OUT/llama-Q4_K_M.gguf" "$OUT/llama-logits-Q4_K_M.bin" $toks 2>/dev/null
ls -l "$OUT"; du -ch "$OUT"/* | tail -1
