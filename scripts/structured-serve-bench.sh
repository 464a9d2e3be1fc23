#!/usr/bin/env bash
# structured-serve-bench.sh: what structured output costs a serving engine.
# `turnstile bench serve` at 16 clients on the 110M-shape Q8_0 model, three
# runs side by side in each round: unconstrained (--ignore-eos), every
# request constrained by one JSON schema, and by 16 different schemas in
# turn. The schemas need at least 40 array items, so no constrained JSON
# ends inside --max-tokens: every request generates exactly --max-tokens
# tokens in all three runs (equal work). Ratios are constrained /
# unconstrained output tokens/s per round, and their median.
#
# Environment (defaults in brackets): VOCAB [testdata/models/stories260K.gguf]
#   (the tokenizer the synthetic model copies: a real model's, such as
#   llama.cpp's models/ggml-vocab-llama-bpe.gguf, makes masks realistic)
#   ROUNDS [3]  REQUESTS [256]  CLIENTS [16]  MAX_TOKENS [64]  OUT [out/structured-serve]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VOCAB=${VOCAB:-$ROOT/testdata/models/stories260K.gguf}
ROUNDS=${ROUNDS:-3} REQUESTS=${REQUESTS:-256} CLIENTS=${CLIENTS:-16} MAX_TOKENS=${MAX_TOKENS:-64}
OUT=${OUT:-$ROOT/out/structured-serve}
make -C "$ROOT" -s build model >/dev/null
TS="$ROOT/bin/turnstile"
mkdir -p "$OUT/schemas" "$OUT/raw"
MODEL="$OUT/synth-110m-q8_0-$(basename "$VOCAB" .gguf).gguf"
[ -f "$MODEL" ] || "$TS" model synth --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 \
  --context 1024 --type q8_0 --vocab-from "$VOCAB" -o "$MODEL" >/dev/null

# 16 schemas of the shapes agents send: arrays of strings with a bound,
# integers with a range, enums, and records with required fields.
items=(
  '{"type":"string","maxLength":24}'
  '{"type":"integer","minimum":0,"maximum":100000}'
  '{"enum":["red","green","blue","amber","violet"]}'
  '{"type":"object","properties":{"name":{"type":"string"},"score":{"type":"number"}},"required":["name","score"],"additionalProperties":false}'
)
files=()
for i in $(seq 0 15); do
  f="$OUT/schemas/schema-$i.json"
  printf '{"type":"object","properties":{"id":{"type":"integer"},"list_%d":{"type":"array","items":%s,"minItems":40}},"required":["id","list_%d"],"additionalProperties":false}\n' \
    "$i" "${items[$((i % 4))]}" "$i" >"$f"
  files+=("$f")
done
many=$(IFS=,; echo "${files[*]}")

run() { # name, extra flags...
  local name=$1 dir="$OUT/raw/$1-$r"
  shift
  "$TS" bench serve --model "$MODEL" --clients "$CLIENTS" --duration 30m --max-requests "$REQUESTS" --max-tokens "$MAX_TOKENS" \
    --seed "$r" --out "$dir" "$@" >"$dir.txt" 2>&1 || { echo "structured-serve-bench: $name failed, see $dir.txt" >&2; exit 1; }
  python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["levels"][0]; print(sys.argv[2], l["output_tokens_per_sec"], l["successes"], l["errors"], l["output_tokens"] / max(1, l["successes"]))' \
    "$dir/bench-serve.json" "$name" >>"$OUT/raw/rows-$r.txt"
}
for r in $(seq 1 "$ROUNDS"); do
  : >"$OUT/raw/rows-$r.txt"
  echo "structured-serve-bench: round $r/$ROUNDS"
  run free
  run one --json-schema "${files[0]}"
  run many --json-schema "$many"
done
python3 - "$OUT" "$ROUNDS" "$MAX_TOKENS" <<'PY'
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
tp = {"free": [], "one": [], "many": []}
for r in range(1, rounds + 1):
    for line in open(f"{out}/raw/rows-{r}.txt"):
        name, t, ok, err, per = line.split()
        tp[name].append(float(t))
        if int(err) or abs(float(per) - float(sys.argv[3])) > 0.5:
            print(f"round {r} {name}: {err} errors, {float(per):.1f} tokens per request (want {sys.argv[3]})")
print("run   output tok/s per round        median   ratio to free (per round, median)")
for name in ("free", "one", "many"):
    ratios = [a / b for a, b in zip(tp[name], tp["free"])]
    print(f"{name:5s} {' '.join(f'{x:8.1f}' for x in tp[name]):30s} {statistics.median(tp[name]):8.1f}   "
          f"{' '.join(f'{x:.3f}' for x in ratios)}  median {statistics.median(ratios):.3f}")
PY
