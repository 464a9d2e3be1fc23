#!/usr/bin/env bash
# peer-bench.sh: turnstile beside llama.cpp on this machine, same model files,
# same threads, interleaved rounds, medians and ratios.
#
#   1. Kernel table: synthetic GGUF models of one shape in each weight type,
#      measured by llama-bench / llama-batched-bench and by `turnstile bench
#      decode` with the same definitions: pp512, tgN (decode from empty),
#      tgN@d512 (decode after a 512-token prompt), tgNx8 and tgNx32 (batched
#      decode after a 128-token prompt each). Ratios are turnstile /
#      llama.cpp tokens/s. llama.cpp runs with its default mmap load and,
#      with LOAD_MODES="mmap none", also with `-lm none` / `--no-mmap`
#      (turnstile copies weights into huge pages, so the comparison must
#      not rest on page size alone); each mode gets its own column.
#   2. Serving: llama-server against `turnstile serve` on the SERVE_TYPE model,
#      each loaded by `turnstile bench serve --url` (streaming clients, the
#      same prompts, --max-tokens 64) at 1, 16 and 64 clients, one server at
#      a time, with both servers' RSS.
#
# Shapes (SHAPE):
#   110m  llama2.c's 110M (dim 768, 12 layers, FFN 2048), the 512-token
#         stories vocabulary, each type written by `turnstile model synth`.
#   1b    Llama-3.2-1B (dim 2048, 16 layers, 32/8 heads, FFN 8192), 3b
#         Llama-3.2-3B (dim 3072, 28 layers, 24/8 heads, FFN 8192): the
#         Llama 3 vocabulary (128,256 tokens, from llama.cpp's
#         models/ggml-vocab-llama-bpe.gguf), tied embeddings, Llama 3 RoPE;
#         synthesised in BF16, then Q4_K_M and Q8_0 made by llama-quantize so
#         both engines read identical bytes.
#
# llama.cpp is built with ../shared/tools/build-llama-cpp.sh into $LLAMA_DIR
# when it is not there yet (about 5-8 minutes on 2 cores).
#
# Environment (defaults in brackets):
#   LLAMA_DIR [out/llama.cpp]  LLAMA_BIN [$LLAMA_DIR/build/bin: another build's
#     binaries, e.g. one configured without AMX where the VM faults on its
#     tile instructions]  THREADS [2]  ROUNDS [3]  SHAPE [110m]
#   TYPES ["f32 f16 bf16 q8_0"; 1b/3b: "q4_k_m q8_0 bf16"]
#   TG [128; 1b/3b: 64]  TESTS ["pp512 tg tg@d512 tgx8 tgx32"]
#   LOAD_MODES ["mmap"]  CLIENTS ["1 16 64"]  DURATION [30s]
#   SERVE_TYPE [q8_0; 1b/3b: q4_k_m]  SKIP_SERVE [0]  SKIP_KERNELS [0]
#   OUT [out/peer-bench]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_DIR=${LLAMA_DIR:-$ROOT/out/llama.cpp}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
SHAPE=${SHAPE:-110m}
case "$SHAPE" in
  110m) SYNTH=(--dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048) TYPES=${TYPES:-"f32 f16 bf16 q8_0"}
    TG=${TG:-128} SERVE_TYPE=${SERVE_TYPE:-q8_0} CTX=1024 ;;
  1b) SYNTH=(--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192) TYPES=${TYPES:-"q4_k_m q8_0 bf16"}
    TG=${TG:-64} SERVE_TYPE=${SERVE_TYPE:-q4_k_m} CTX=4096 ;;
  3b) SYNTH=(--dim 3072 --layers 28 --heads 24 --kv-heads 8 --ffn 8192) TYPES=${TYPES:-"q4_k_m q8_0 bf16"}
    TG=${TG:-64} SERVE_TYPE=${SERVE_TYPE:-q4_k_m} CTX=4096 ;;
  *) echo "peer-bench: SHAPE=$SHAPE: want 110m, 1b or 3b" >&2; exit 1 ;;
esac
# CTX: 110m: every test fits (512 + 128 positions; 128 + 128 per batched
# sequence); 1b/3b: the models' context.
TESTS=${TESTS:-"pp512 tg tg@d512 tgx8 tgx32"}
LOAD_MODES=${LOAD_MODES:-mmap}
for m in $LOAD_MODES; do
  case "$m" in mmap | none) ;; *) echo "peer-bench: LOAD_MODES: $m: want mmap or none" >&2; exit 1 ;; esac
done
for t in $TESTS; do
  case "$t" in pp512 | tg | tg@d512 | tgx8 | tgx32) ;; *) echo "peer-bench: TESTS: $t: want pp512, tg, tg@d512, tgx8 or tgx32" >&2; exit 1 ;; esac
done
CLIENTS=${CLIENTS:-"1 16 64"}
DURATION=${DURATION:-30s}
SKIP_SERVE=${SKIP_SERVE:-0}
SKIP_KERNELS=${SKIP_KERNELS:-0}
OUT=${OUT:-$ROOT/out/peer-bench}

BIN=${LLAMA_BIN:-$LLAMA_DIR/build/bin}
if [ ! -x "$BIN/llama-bench" ] || [ ! -x "$BIN/llama-batched-bench" ] || [ ! -x "$BIN/llama-server" ]; then
  tool="$ROOT/../shared/tools/build-llama-cpp.sh"
  if [ ! -f "$tool" ]; then
    echo "peer-bench: no llama.cpp build in $LLAMA_DIR and no $tool to build one; set LLAMA_DIR" >&2
    exit 1
  fi
  echo "peer-bench: building llama.cpp into $LLAMA_DIR"
  bash "$tool" "$LLAMA_DIR"
fi
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

make -C "$ROOT" build model >/dev/null
TS="$ROOT/bin/turnstile"
mkdir -p "$OUT/models" "$OUT/raw"
RAW="$OUT/raw"
: >"$RAW/rows.tsv" # engine type test round tokens_per_second

model_file() { echo "$OUT/models/$SHAPE-$1.gguf"; }
if [ "$SHAPE" = 110m ]; then
  for t in $TYPES; do
    f=$(model_file "$t")
    [ -f "$f" ] || "$TS" model synth "${SYNTH[@]}" --context "$CTX" --type "$t" \
      --vocab-from "$ROOT/testdata/models/stories260K.gguf" -o "$f" >/dev/null
  done
else
  vocab="$LLAMA_DIR/models/ggml-vocab-llama-bpe.gguf"
  [ -f "$vocab" ] || { echo "peer-bench: no $vocab (the llama.cpp tree's vocabulary files)" >&2; exit 1; }
  base=$(model_file bf16)
  [ -f "$base" ] || "$TS" model synth "${SYNTH[@]}" --tied --vocab-from "$vocab" --context "$CTX" --type bf16 \
    --rope-theta 500000 --rope-scaling llama3 --rope-factor 32 --rope-high-freq-factor 4 \
    --rope-low-freq-factor 1 --rope-original-context 8192 -o "$base" >/dev/null
  for t in $TYPES; do
    f=$(model_file "$t")
    case "$t" in
      bf16) ;;
      q4_k_m | q4_k_s | q5_k_m | q6_k | q8_0) [ -f "$f" ] || "$BIN/llama-quantize" "$base" "$f" "${t^^}" >/dev/null 2>&1 ;;
      *) echo "peer-bench: SHAPE=$SHAPE: type $t: want bf16, q4_k_m, q4_k_s, q5_k_m, q6_k or q8_0" >&2; exit 1 ;;
    esac
  done
fi
has() { [[ " $TESTS " == *" $1 "* ]]; }

# One round: every type on both engines, alternating, so slow phases of a
# shared machine hit both alike.
[ "$SKIP_KERNELS" = 1 ] || for r in $(seq 1 "$ROUNDS"); do
  for t in $TYPES; do
    f=$(model_file "$t")
    echo "peer-bench: round $r/$ROUNDS, $SHAPE $t"
    ts_tests=() depths=() npl=()
    has pp512 && ts_tests+=(pp512)
    has tg && ts_tests+=("tg$TG") depths+=(0)
    has tg@d512 && ts_tests+=("tg$TG@d512") depths+=(512)
    has tgx8 && ts_tests+=("tg${TG}x8") npl+=(8)
    has tgx32 && ts_tests+=("tg${TG}x32") npl+=(32)
    for mode in $LOAD_MODES; do
      lm=() nommap=()
      if [ "$mode" = none ]; then lm=(-lm none) nommap=(--no-mmap); fi
      : >"$RAW/lb-$mode-$t-$r.jsonl"
      if has pp512; then
        "$BIN/llama-bench" -m "$f" -t "$THREADS" "${lm[@]}" -r 1 -p 512 -n 0 -o jsonl >>"$RAW/lb-$mode-$t-$r.jsonl" 2>/dev/null
      fi
      if [ ${#depths[@]} -gt 0 ]; then
        "$BIN/llama-bench" -m "$f" -t "$THREADS" "${lm[@]}" -r 1 -p 0 -n "$TG" -d "$(IFS=,; echo "${depths[*]}")" \
          -o jsonl >>"$RAW/lb-$mode-$t-$r.jsonl" 2>/dev/null
      fi
      : >"$RAW/lbb-$mode-$t-$r.jsonl"
      if [ ${#npl[@]} -gt 0 ]; then
        "$BIN/llama-batched-bench" -m "$f" -t "$THREADS" "${nommap[@]}" -c 8192 -b 2048 -ub 512 -npp 128 -ntg "$TG" \
          -npl "$(IFS=,; echo "${npl[*]}")" --output-format jsonl >"$RAW/lbb-$mode-$t-$r.jsonl" 2>/dev/null
      fi
    done
    "$TS" bench decode --device cpu --model "$f" --workers "$THREADS" --rounds 1 \
      --tests "$(IFS=,; echo "${ts_tests[*]}")" --batched-prompt 128 --out "$RAW/ts-$t-$r" >/dev/null
    python3 "$ROOT/scripts/peer-bench-rows.py" "$RAW" "$t" "$r" "$LOAD_MODES" >>"$RAW/rows.tsv"
  done
done

if [ "$SKIP_KERNELS" != 1 ]; then
  python3 "$ROOT/scripts/peer-bench-rows.py" --table "$RAW/rows.tsv" "$TYPES" "$TG" "$LOAD_MODES" "$SHAPE" >"$OUT/kernels.md"
  cat "$OUT/kernels.md"
fi

[ "$SKIP_SERVE" = 1 ] && exit 0

# Serving: one server at a time on its own port; each level gets a fresh
# server with as many slots (llama.cpp) / batch rows (turnstile) as clients.
f=$(model_file "$SERVE_TYPE")
[ -f "$f" ] || { echo "peer-bench: no $SERVE_TYPE model (add it to TYPES)" >&2; exit 1; }
PER_SEQ=1024 # turnstile holds a full context per seat; llama-server gets the same
rss_mib() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }
wait_ready() { # url
  for _ in $(seq 1 600); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "peer-bench: server at $1 never became healthy" >&2
  return 1
}
: >"$OUT/serve.tsv"
for n in $CLIENTS; do
  for eng in llama.cpp turnstile; do
    port=$((18000 + RANDOM % 1000))
    if [ "$eng" = llama.cpp ]; then
      "$BIN/llama-server" -m "$f" -t "$THREADS" --parallel "$n" -c $((n * PER_SEQ)) --port "$port" \
        >"$RAW/server-$eng-$n.log" 2>&1 &
    else
      "$TS" serve --device cpu --model "$f" --workers "$THREADS" --max-batch-size "$n" \
        --kv-cache-tokens $((n * PER_SEQ)) --port "$port" >"$RAW/server-$eng-$n.log" 2>&1 &
    fi
    pid=$!
    wait_ready "http://127.0.0.1:$port"
    "$TS" bench serve --url "http://127.0.0.1:$port" --clients "$n" --duration "$DURATION" --max-tokens 64 \
      --out "$RAW/serve-$eng-$n" --csv >"$RAW/serve-$eng-$n.txt"
    echo -e "$eng\t$n\t$(rss_mib $pid)" >>"$OUT/serve.tsv"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
  done
done
python3 - "$RAW" "$OUT/serve.tsv" "$CLIENTS" >"$OUT/serve.md" <<'EOF'
import csv, sys
raw, rss_file, clients = sys.argv[1], sys.argv[2], sys.argv[3].split()
rss = {}
for line in open(rss_file):
    eng, n, mib = line.split()
    rss[(eng, n)] = mib
def row(eng, n):
    with open(f"{raw}/serve-{eng}-{n}/bench-serve.csv") as f:
        return list(csv.DictReader(f))[-1]
print("\n| clients | output tok/s turnstile / llama.cpp | TTFT p50 ms turnstile / llama.cpp | RSS MiB turnstile / llama.cpp |")
print("|---|---|---|---|")
for n in clients:
    a, b = row("turnstile", n), row("llama.cpp", n)
    ta, tb = float(a["output_tokens_per_sec"]), float(b["output_tokens_per_sec"])
    print(f"| {n} | {ta / tb:.2f} ({ta:.0f} / {tb:.0f}) | {float(a['ttft_median_ms']):.1f} / {float(b['ttft_median_ms']):.1f} | "
          f"{rss[('turnstile', n)]} / {rss[('llama.cpp', n)]} |")
EOF
cat "$OUT/serve.md"
