#!/usr/bin/env bash
# Structured output end to end with the official OpenAI Node client (npm
# `openai`) and an independent validator (npm `ajv` + `ajv-formats`):
# starts `turnstile serve` on stories260K, runs scripts/structured-e2e.mjs
# against it, stops the server. Needs node and npm (the packages install
# into out/npm). Usage: scripts/structured-e2e.sh [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${1:-18080}
make -s model build >/dev/null
mkdir -p out/npm
[ -d out/npm/node_modules/openai ] || npm install --silent --prefix out/npm openai@7 ajv@8 ajv-formats@3 >/dev/null
./bin/turnstile serve --host 127.0.0.1 --port "$PORT" > out/structured-e2e-server.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  sleep 0.1
done
# ES modules resolve packages from the script's own directory.
cp scripts/structured-e2e.mjs out/npm/
node out/npm/structured-e2e.mjs "http://127.0.0.1:$PORT"
