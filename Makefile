# turnstile: every set-up step a fresh Debian machine with Go and gcc needs
# lives here, so `make run` and `make test` work from a clean clone.

GO        ?= go
# go-nvml's cgo preamble uses deprecated NVML declarations; its warnings are noise.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
MODEL_DIR := testdata/models
MODEL     := $(MODEL_DIR)/stories260K.gguf
BIN       := bin/turnstile
# The model ships inside this Go module (file testdata/stories260K.gguf); we
# only download the module, never import it.
MODEL_MOD := github.com/mutablelogic/go-llama@v0.0.11
MODEL_SHA := 270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d

.PHONY: all build run test bench bench-peer lint fmt deps model clean

all: build

## model: fetch stories260K.gguf (the real tiny model used by tests and `make run`).
model: $(MODEL)

$(MODEL):
	@mkdir -p $(MODEL_DIR)
	@dir=$$($(GO) mod download -json $(MODEL_MOD) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$$/\1/p'); \
	  test -n "$$dir" || { echo "make: could not download $(MODEL_MOD)"; exit 1; }; \
	  cp "$$dir/testdata/stories260K.gguf" $@.tmp && chmod 644 $@.tmp
	@echo "$(MODEL_SHA)  $@.tmp" | sha256sum -c --quiet - || { rm -f $@.tmp; echo "make: stories260K.gguf checksum mismatch"; exit 1; }
	@mv $@.tmp $@

## deps: system packages and files the build and tests need.
deps: model
	@./scripts/install-deps.sh

build:
	$(GO) build -o $(BIN) ./cmd/turnstile

## run: the main job.
run: deps build
	./$(BIN) serve

# Tests that skip under -race (the detector allocates, or would make them too
# slow): the zero-allocation tests, the weight type × architecture matrix
# the overlap arms of the program-policy workload and the long grammar
# conformance and hostile-input tests. The non-race pass of
# `make test` runs exactly these.
NORACE_MODEL    := ^(TestZeroAllocs|TestCUDAHostZeroAllocs|TestMatrixMatchesLlamaCpp)$$
NORACE_EXECUTOR := ^TestProgramPolicyWorkload$$/^overlaptrue/
NORACE_GRAMMAR  := ^(TestJSTS|TestNumberRange|TestHostileSchemas|TestGBNFMaskBruteForce)$$

## test: formatting check, vet, the module-wide tests of internal/archtest
## (the import boundaries, uncached: they read `go list -deps`, which the
## test cache does not track; and the names comments and docs cite), every
## test with the race detector, then what -race skips without it.
test: deps
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 ./internal/archtest/
	$(GO) test -race -timeout 15m ./...
	$(GO) test -timeout 5m -run '$(NORACE_MODEL)' ./model/
	$(GO) test -timeout 5m -run '$(NORACE_EXECUTOR)' ./executor/
	$(GO) test -timeout 5m -run '$(NORACE_GRAMMAR)' ./grammar/

## bench: the microbenchmarks with allocation counts, then short campaigns:
## the CPU runner's cost-model fit, seed 000's A/B/C on the simulated H200 and,
## scaled down, on the CPU runner beside the fitted simulator's prediction, and
## seed 004's attention-DP ladder. Everything lands in out/.
bench: deps build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	./$(BIN) bench calibrate --max-batch-size 32 --out out/bench-calibrate
	./$(BIN) bench agentic --blocks 4 --secondary-blocks 2 --out out/bench-agentic/seed000
	./$(BIN) bench adp --out out/bench-adp
	./$(BIN) bench agentic --device sim,cpu --profile out/bench-calibrate/profile.json --blocks 4 --secondary-blocks 2 \
	  --out out/bench-agentic/small

## bench-peer: turnstile beside llama.cpp on this machine (builds llama.cpp into
## out/llama.cpp first if needed, ~5-8 minutes): the kernel table (llama-bench,
## llama-batched-bench vs bench decode on synthetic GGUF files of the 110M
## shape; SHAPE=1b or 3b: the Llama-3.2 shapes) and llama-server vs turnstile
## serve at 1, 16 and 64 clients, into
## out/peer-bench/ (scripts/peer-bench.sh states its knobs).
bench-peer: deps build $(MODEL)
	bash scripts/peer-bench.sh

lint: fmt
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')

clean:
	rm -rf bin
