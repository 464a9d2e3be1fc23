#!/usr/bin/env bash
# Regenerates testdata/arch: llama.cpp's teacher-forced logits and greedy
# continuation of one synthetic F32 model per architecture feature
# (model/gguf.ArchFixtures rebuilds the same models in Go; the flags here
# must give the same shapes):
#   llama3  llama, Llama 3.1 RoPE scaling (rope_freqs.weight; factor 8,
#           low 1, high 4, original context 32, theta 500000)
#   qwen2   qwen2: Q/K/V biases, NEOX RoPE, theta 1e6
#   qwen3   qwen3: per-head Q/K RMSNorm, head dim 64 ≠ dim/heads 32, NEOX,
#           tied output, theta 1e6
# All: dim 128, 2 layers, 4 heads, 2 kv heads, ffn 256, stories260K's
# tokenizer (vocab 512), seed 1. `make test` only reads the .bin files; this
# script needs a llama.cpp build (LLAMA_DIR, default /tmp/llama:
# bash /work/shared/tools/build-llama-cpp.sh /tmp/llama) and g++.
OUT=testdata/arch
source "$(dirname "$0")/llama-logits-lib.sh"

synth() { # NAME FLAGS...
  local name=$1; shift
  "$tmp/turnstile" model synth --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 \
    --seed 1 --vocab-from testdata/models/stories260K.gguf --type f32 -o "$tmp/$name.gguf" "$@"
}
synth llama3 --rope-theta 500000 --rope-scaling llama3 --rope-factor 8 \
  --rope-low-freq-factor 1 --rope-high-freq-factor 4 --rope-original-context 32
synth qwen2 --arch qwen2 --qkv-bias --rope-theta 1000000
synth qwen3 --arch qwen3 --head-dim 64 --tied --rope-theta 1000000

# 40 teacher-forced tokens, (37i + 11) mod 512, then 32 greedy ones.
toks=$(for i in $(seq 0 39); do echo $(( (i * 37 + 11) % 512 )); done)
for name in llama3 qwen2 qwen3; do
  "$tmp/llama-logits" -g 32 "$tmp/$name.gguf" "$OUT/$name.bin" $toks 2>"$tmp/$name.log" ||
    { cat "$tmp/$name.log" >&2; exit 1; }
done
{
  echo "llama.cpp: $(git -C "$LLAMA_DIR" describe --tags --always 2>/dev/null || cat "$LLAMA_DIR/VERSION" 2>/dev/null || echo unknown)"
  echo "written by scripts/make-arch-fixtures.sh; format in scripts/llama-logits.cpp (-g 32)"
} > "$OUT/README"
ls -l "$OUT"
