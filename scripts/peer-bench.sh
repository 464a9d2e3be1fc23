#!/usr/bin/env bash
# peer-bench.sh: turnstile beside llama.cpp on this machine, same model files,
# same threads, interleaved rounds, medians and ratios.
#
#   1. Kernel table: synthetic GGUF models of one shape (default llama2.c's
#      110M: dim 768, 12 layers, FFN 2048) in each weight type, measured by
#      llama-bench / llama-batched-bench and by `turnstile bench decode` with
#      the same definitions: pp512, tg128, tg128@d512 (decode after a
#      512-token prompt), tg128x8 and tg128x32 (batched decode after a
#      128-token prompt each). Ratios are turnstile / llama.cpp tokens/s.
#   2. Serving: llama-server against `turnstile serve` on the Q8_0 model,
#      each loaded by `turnstile bench serve --url` (streaming clients, the
#      same prompts, --max-tokens 64) at 1, 16 and 64 clients, one server at
#      a time, with both servers' RSS.
#
# llama.cpp is built with ../shared/tools/build-llama-cpp.sh into $LLAMA_DIR
# when it is not there yet (about 5-8 minutes on 2 cores).
#
# Environment (defaults in brackets):
#   LLAMA_DIR [out/llama.cpp]  THREADS [2]  ROUNDS [3]
#   TYPES ["f32 f16 bf16 q8_0"]  DIM [768] LAYERS [12] HEADS [12] FFN [2048]
#   CLIENTS ["1 16 64"]  DURATION [30s]  SERVE_TYPE [q8_0]  SKIP_SERVE [0]
#   OUT [out/peer-bench]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_DIR=${LLAMA_DIR:-$ROOT/out/llama.cpp}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
TYPES=${TYPES:-"f32 f16 bf16 q8_0"}
DIM=${DIM:-768} LAYERS=${LAYERS:-12} HEADS=${HEADS:-12} FFN=${FFN:-2048}
CLIENTS=${CLIENTS:-"1 16 64"}
DURATION=${DURATION:-30s}
SERVE_TYPE=${SERVE_TYPE:-q8_0}
SKIP_SERVE=${SKIP_SERVE:-0}
OUT=${OUT:-$ROOT/out/peer-bench}
CTX=1024 # every test fits: 512 + 128 positions; 128 + 128 per batched sequence

BIN="$LLAMA_DIR/build/bin"
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

for t in $TYPES; do
  f="$OUT/models/synth-$DIM-$LAYERS-$t.gguf"
  [ -f "$f" ] || "$TS" model synth --dim "$DIM" --layers "$LAYERS" --heads "$HEADS" --kv-heads "$HEADS" --ffn "$FFN" \
    --context "$CTX" --type "$t" --vocab-from "$ROOT/testdata/models/stories260K.gguf" -o "$f" >/dev/null
done

# One round: every type on both engines, alternating, so slow phases of a
# shared machine hit both alike.
for r in $(seq 1 "$ROUNDS"); do
  for t in $TYPES; do
    f="$OUT/models/synth-$DIM-$LAYERS-$t.gguf"
    echo "peer-bench: round $r/$ROUNDS, $t"
    "$BIN/llama-bench" -m "$f" -t "$THREADS" -r 1 -p 512 -n 0 -o jsonl >"$RAW/lb-pp-$t-$r.jsonl" 2>/dev/null
    "$BIN/llama-bench" -m "$f" -t "$THREADS" -r 1 -p 0 -n 128 -d 0,512 -o jsonl >"$RAW/lb-tg-$t-$r.jsonl" 2>/dev/null
    "$BIN/llama-batched-bench" -m "$f" -t "$THREADS" -c 8192 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 8,32 \
      --output-format jsonl >"$RAW/lbb-$t-$r.jsonl" 2>/dev/null
    "$TS" bench decode --device cpu --model "$f" --workers "$THREADS" --rounds 1 \
      --tests pp512,tg128,tg128@d512,tg128x8,tg128x32 --batched-prompt 128 --out "$RAW/ts-$t-$r" >/dev/null
    python3 - "$RAW" "$t" "$r" >>"$RAW/rows.tsv" <<'EOF'
import csv, json, sys
raw, t, r = sys.argv[1:]
def jsonl(p):
    with open(p) as f:
        return [json.loads(l) for l in f if l.strip().startswith("{")]
for j in jsonl(f"{raw}/lb-pp-{t}-{r}.jsonl") + jsonl(f"{raw}/lb-tg-{t}-{r}.jsonl"):
    if j["n_gen"] == 0:
        name = f"pp{j['n_prompt']}"
    else:
        name = f"tg{j['n_gen']}" + (f"@d{j['n_depth']}" if j.get("n_depth", 0) else "")
    print("llama.cpp", t, name, r, j["avg_ts"], sep="\t")
for j in jsonl(f"{raw}/lbb-{t}-{r}.jsonl"):
    print("llama.cpp", t, f"tg{j['tg']}x{j['pl']}", r, j["speed_tg"], sep="\t")
with open(f"{raw}/ts-{t}-{r}/decode.csv") as f:
    for row in csv.DictReader(f):
        print("turnstile", t, row["test"], r, row["tokens_per_second"], sep="\t")
EOF
  done
done

python3 - "$RAW/rows.tsv" "$TYPES" >"$OUT/kernels.md" <<'EOF'
import statistics, sys
rows, types = sys.argv[1], sys.argv[2].split()
v = {}
for line in open(rows):
    eng, t, test, _, tps = line.rstrip("\n").split("\t")
    v.setdefault((eng, t, test), []).append(float(tps))
tests = [("tg128", "decode, 1 sequence, from empty"), ("tg128@d512", "decode after a 512-token prompt"),
         ("tg128x8", "batched decode, 8 sequences"), ("tg128x32", "batched decode, 32 sequences"),
         ("pp512", "prefill 512, warm")]
print("| tok/s, turnstile / llama.cpp (medians) | " + " | ".join(t.upper() for t in types) + " |")
print("|---|" + "---|" * len(types))
for test, label in tests:
    cells = []
    for t in types:
        a, b = v.get(("turnstile", t, test)), v.get(("llama.cpp", t, test))
        if not a or not b:
            cells.append("n/a")
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        cells.append(f"{ma / mb:.2f} ({ma:.0f} / {mb:.0f})")
    print(f"| {label} | " + " | ".join(cells) + " |")
EOF
cat "$OUT/kernels.md"

[ "$SKIP_SERVE" = 1 ] && exit 0

# Serving: one server at a time on its own port; each level gets a fresh
# server with as many slots (llama.cpp) / batch rows (turnstile) as clients.
f="$OUT/models/synth-$DIM-$LAYERS-$SERVE_TYPE.gguf"
[ -f "$f" ] || { echo "peer-bench: no $SERVE_TYPE model (add it to TYPES)" >&2; exit 1; }
PER_SEQ=$CTX # turnstile holds a full context per seat; llama-server gets the same
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
