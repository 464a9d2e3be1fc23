#!/usr/bin/env bash
# Regenerates testdata/matrix: llama.cpp's teacher-forced logits and greedy
# continuation for every weight type × architecture (model/matrix_test.go),
# and two of llama.cpp's own quantisation mixes (below).
# The GGUF files are turnstile's own (`turnstile model synth --type T`), so
# the test rebuilds the same bytes in Go and only llama.cpp's output is
# committed; llama.cpp reading turnstile's blocks also checks the writer.
#   llama   plain llama, untied output
#   llama3  llama with Llama 3.1 RoPE scaling (rope_freqs.weight)
#   qwen2   Q/K/V biases, NEOX RoPE, theta 1e6
#   qwen3   per-head Q/K RMSNorm, 8 heads of 64 (Heads·HeadDim = 512 ≠ dim),
#           tied output, theta 1e6
# All: dim 256, 2 layers, 2 kv heads, ffn 256, stories260K's tokenizer
# (vocab 512), seed 1. Every matrix has a multiple of 256 columns, so the
# K-quants' super-blocks are used in every tensor (no fallback type).
# Logits are binary16 (llama-logits -h) except for F32, whose tolerance is
# 1e-5 of the spread; binary16 rounds by at most 2^-11 of a logit, far
# below the other types' tolerances. `make test` only reads the .bin files;
# this script needs a llama.cpp build (LLAMA_DIR, default /tmp/llama) and g++.
OUT=testdata/matrix
source "$(dirname "$0")/llama-logits-lib.sh"

# The flags of each architecture; model/matrix_test.go's matrixArchs must
# give the same configurations.
arch_flags() {
  case $1 in
  llama) echo "--heads 4" ;;
  llama3) echo "--heads 4 --rope-theta 500000 --rope-scaling llama3 --rope-factor 8 \
    --rope-low-freq-factor 1 --rope-high-freq-factor 4 --rope-original-context 32" ;;
  qwen2) echo "--heads 4 --arch qwen2 --qkv-bias --rope-theta 1000000" ;;
  qwen3) echo "--heads 8 --arch qwen3 --head-dim 64 --tied --rope-theta 1000000" ;;
  esac
}

# 40 teacher-forced tokens, (37i + 11) mod 512, then 32 greedy ones.
toks=$(for i in $(seq 0 39); do echo $(( (i * 37 + 11) % 512 )); done)
rm -f "$OUT"/*.bin
for arch in llama llama3 qwen2 qwen3; do
  for t in F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K; do
    lt=$(echo "$t" | tr 'A-Z' 'a-z')
    # shellcheck disable=SC2046
    "$tmp/turnstile" model synth --dim 256 --layers 2 --kv-heads 2 --ffn 256 --seed 1 \
      --vocab-from testdata/models/stories260K.gguf --type "$lt" -o "$tmp/m.gguf" $(arch_flags "$arch")
    half=-h
    [ "$t" = F32 ] && half=
    "$tmp/llama-logits" -g 32 $half "$tmp/m.gguf" "$OUT/$arch-$t.bin" $toks 2>"$tmp/log" ||
      { cat "$tmp/log" >&2; exit 1; }
  done
done
# llama.cpp's own per-tensor mixes of the llama model (its quantiser, so
# the GGUFs are committed, 1.4 MB): Q4_K_M is Q4_K with Q6_K for output,
# blk.1.attn_v and blk.1.ffn_down; Q5_K_M the same with Q5_K. No tensor
# falls back (every row is a whole number of super-blocks).
"$tmp/turnstile" model synth --dim 256 --layers 2 --kv-heads 2 --ffn 256 --seed 1 \
  --vocab-from testdata/models/stories260K.gguf --type f32 -o "$tmp/m.gguf" $(arch_flags llama)
rm -f "$OUT"/*.gguf
for mix in Q4_K_M Q5_K_M; do
  "$LLAMA_DIR/build/bin/llama-quantize" "$tmp/m.gguf" "$OUT/llama-$mix.gguf" "$mix" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log" >&2; exit 1; }
  "$tmp/llama-logits" -g 32 -h "$OUT/llama-$mix.gguf" "$OUT/llama-$mix.bin" $toks 2>"$tmp/log" ||
    { cat "$tmp/log" >&2; exit 1; }
done
{
  echo "llama.cpp: $(git -C "$LLAMA_DIR" describe --tags --always 2>/dev/null || cat "$LLAMA_DIR/VERSION" 2>/dev/null || echo unknown)"
  echo "written by scripts/make-matrix-fixtures.sh; format in scripts/llama-logits.cpp (-g 32, -h except F32)"
} > "$OUT/README"
du -ch "$OUT"/* | tail -1
