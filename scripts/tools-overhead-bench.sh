#!/usr/bin/env bash
# tools-overhead-bench.sh: what offering tools costs a chat request.
# `turnstile bench serve` at 16 clients, two runs side by side in each round
# (their order alternating from round to round): streaming chat requests
# offering 16 tools with tool_choice auto (--tools 16: the template renders
# them into the prompt and a lazy grammar waits for a call's opening
# marker), and the same requests without tools whose system message is
# padded with neutral text to the same prompt tokens (--tools-baseline;
# bench serve measures both prompts first and prints them). The server
# refuses ignore_eos with a grammar, so both runs generate until EOS or
# --max-tokens; the per-token metrics (TTFT, TPOT) compare whatever the
# lengths, and the output tokens per request of both runs are printed so
# that output tokens/s can be read as equal work or not. Ratios are tools /
# baseline per round, and their median; the acceptance asks ≤ 1.1.
#
# Models (MODELS, default "stories llama3"): stories: a synthetic model of
# stories260K's shape and 512-token vocabulary (the real stories260K's
# context, 2048, cannot hold 16 tools, which its vocabulary spells in about
# 6,400 tokens) with 8192 tokens of context, f32, with the Qwen2.5 template;
# llama3: dim 256, 4 layers, Q8_0, with Llama 3's 128,256-token vocabulary
# (llama.cpp's models/ggml-vocab-llama-bpe.gguf, LLAMA3_VOCAB) and the Llama
# 3.1 template.
#
# Environment (defaults in brackets): ROUNDS [3]  DURATION [15s]  CLIENTS [16]
#   TOOLS [16]  MAX_TOKENS [64]  OUT [out/tools-overhead]  MODELS [stories llama3]
#   LLAMA3_VOCAB [/work/ref/llama.cpp/models/ggml-vocab-llama-bpe.gguf]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-15s} CLIENTS=${CLIENTS:-16} TOOLS=${TOOLS:-16} MAX_TOKENS=${MAX_TOKENS:-64}
OUT=${OUT:-$ROOT/out/tools-overhead}
MODELS=${MODELS:-stories llama3}
LLAMA3_VOCAB=${LLAMA3_VOCAB:-/work/ref/llama.cpp/models/ggml-vocab-llama-bpe.gguf}
TEMPLATES=$ROOT/server/testdata/templates
make -C "$ROOT" -s build >/dev/null
TS="$ROOT/bin/turnstile"
mkdir -p "$OUT/raw"

for m in $MODELS; do
  case $m in
  stories)
    MODEL="$OUT/synth-stories260k-ctx8192.gguf" TEMPLATE=$TEMPLATES/qwen2.5.jinja
    [ -f "$MODEL" ] || "$TS" model synth --dim 64 --layers 5 --heads 8 --kv-heads 4 --ffn 172 --context 8192 \
      --vocab-from "$ROOT/testdata/models/stories260K.gguf" -o "$MODEL" >/dev/null ;;
  llama3)
    MODEL="$OUT/synth-d256-l4-q8_0-llama3.gguf" TEMPLATE=$TEMPLATES/llama3.1.jinja
    [ -f "$MODEL" ] || "$TS" model synth --dim 256 --layers 4 --heads 4 --kv-heads 4 --ffn 768 --context 8192 \
      --type q8_0 --vocab-from "$LLAMA3_VOCAB" -o "$MODEL" >/dev/null ;;
  *) echo "tools-overhead-bench: unknown model $m (stories or llama3)" >&2; exit 2 ;;
  esac

  run() { # arm, extra flags...
    local arm=$1 dir="$OUT/raw/$m-$1-$r"
    shift
    "$TS" bench serve --model "$MODEL" --chat-template "$TEMPLATE" --clients "$CLIENTS" --duration "$DURATION" \
      --warmup 2s --max-tokens "$MAX_TOKENS" --tools "$TOOLS" --seed "$r" --out "$dir" "$@" >"$dir.txt" 2>&1 ||
      { echo "tools-overhead-bench: $m $arm failed, see $dir.txt" >&2; exit 1; }
    python3 -c 'import json,sys
r=json.load(open(sys.argv[1])); l=r["levels"][0]; ok=max(1, l["successes"])
print(sys.argv[2], l["ttft"]["median_ns"]/1e6, l["tpot"]["median_ns"]/1e6, l["output_tokens_per_sec"], l["successes"], l["errors"],
      l["output_tokens"]/ok, l["input_tokens"]/ok, l.get("tool_call_requests", 0), r["tools"]["first_tools_request_ms"], r["tools"]["second_tools_request_ms"], l["cached_tokens"]/ok,
      r["tools"]["grammar_compile_ms"])' \
      "$dir/bench-serve.json" "$arm" >>"$OUT/raw/$m-rows-$r.txt"
  }
  for r in $(seq 1 "$ROUNDS"); do
    : >"$OUT/raw/$m-rows-$r.txt"
    echo "tools-overhead-bench: $m round $r/$ROUNDS"
    if [ $((r % 2)) -eq 1 ]; then run tools; run base --tools-baseline; else run base --tools-baseline; run tools; fi
  done
  echo "== $m: $(basename "$MODEL"), $(basename "$TEMPLATE"), $CLIENTS clients, $TOOLS tools, max_tokens $MAX_TOKENS, $DURATION per run"
  python3 - "$OUT/raw" "$m" "$ROUNDS" <<'PY'
import statistics, sys
raw, m, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = {"tools": [], "base": []}
for r in range(1, rounds + 1):
    for line in open(f"{raw}/{m}-rows-{r}.txt"):
        f = line.split()
        rows[f[0]].append([float(x) for x in f[1:]])
print("arm    TTFT p50 ms  TPOT p50 ms  out tok/s  requests errors  out tok/req  prompt tok/req  cached tok/req  tool-call reqs  (per round)")
for arm in ("tools", "base"):
    for x in rows[arm]:
        print(f"{arm:5s}  {x[0]:11.2f}  {x[1]:11.3f}  {x[2]:9.1f}  {int(x[3]):8d} {int(x[4]):6d}  {x[5]:11.1f}  {x[6]:14.1f}  {x[10]:14.1f}  {int(x[7]):14d}")
t = rows["tools"][0]
print(f"tools arm, round 1, idle server, max_tokens 1: first request with the tools {t[8]:.1f} ms (prefill not cached, grammar compile "
      f"{t[11]:.1f} ms of it), second {t[9]:.1f} ms")
print("ratio tools/base  per round                 median")
for name, k in (("TTFT p50", 0), ("TPOT p50", 1), ("out tok/s", 2)):
    ratios = [a[k] / b[k] for a, b in zip(rows["tools"], rows["base"])]
    print(f"{name:16s}  {' '.join(f'{x:6.3f}' for x in ratios):24s}  {statistics.median(ratios):6.3f}")
PY
done
