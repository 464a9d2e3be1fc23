# llama-logits-lib.sh: sourced by the fixture scripts that run llama.cpp on
# turnstile's synthetic models (make-arch-fixtures.sh, make-matrix-fixtures.sh).
# Needs OUT set; checks the llama.cpp build in LLAMA_DIR (default /tmp/llama:
# bash ../shared/tools/build-llama-cpp.sh /tmp/llama), makes $tmp (removed on
# exit) and builds $tmp/turnstile and $tmp/llama-logits from
# scripts/llama-logits.cpp.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama}
[ -e "$LLAMA_DIR/build/bin/libllama.so" ] || { echo "no llama.cpp build in $LLAMA_DIR" >&2; exit 1; }
mkdir -p "$OUT"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/turnstile" ./cmd/turnstile
g++ -O2 -std=c++17 -o "$tmp/llama-logits" scripts/llama-logits.cpp -I"$LLAMA_DIR/include" \
  -I"$LLAMA_DIR/ggml/include" -L"$LLAMA_DIR/build/bin" -lllama -lggml -lggml-base \
  -Wl,-rpath,"$LLAMA_DIR/build/bin"
