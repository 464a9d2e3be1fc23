package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBenchServeFlagErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	schemaFile := func(name, body string) string {
		f := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(f, []byte(body), 0o644))
		return f
	}
	arraySchema := schemaFile("array.json", `[1, 2]`)
	mbNoSchema := schemaFile("mb.json", `{"tests": []}`)
	okSchema := schemaFile("ok.json", `{"type": "object"}`)
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"clients 0", []string{"--clients", "1,0"}, "bench serve: --clients 0: must be in [1, 4096]"},
		{"clients huge", []string{"--clients", "5000"}, "bench serve: --clients 5000"},
		{"clients not a number", []string{"--clients", "x"}, `"x"`},
		{"clients empty", []string{"--clients", ""}, `invalid argument "" for "--clients" flag`},
		{"duration", []string{"--duration", "0s"}, "bench serve: --duration 0s: must be > 0"},
		{"warmup", []string{"--warmup", "-1s"}, "bench serve: --warmup -1s: must be >= 0"},
		{"max tokens", []string{"--max-tokens", "0"}, "bench serve: --max-tokens 0: must be >= 1"},
		{"max requests", []string{"--max-requests", "-2"}, "bench serve: --max-requests -2"},
		{"batch", []string{"--max-batch-size", "0"}, "bench serve: --max-batch-size 0"},
		{"kv", []string{"--kv-cache-tokens", "-1"}, "bench serve: --kv-cache-tokens -1"},
		{"workers", []string{"--workers", "-1"}, "bench serve: --workers -1"},
		{"timeout", []string{"--request-timeout", "0s"}, "bench serve: --request-timeout 0s"},
		{"url without scheme", []string{"--url", "localhost:8080"}, `bench serve: --url "localhost:8080": must start with http:// or https://`},
		{"dp 0", []string{"--dp", "0"}, "serve: --dp 0: must be in [1, 64]"},
		{"model", []string{"--model", ""}, "bench serve: --model is empty"},
		{"missing model", []string{"--model", "/no/such.gguf"}, "/no/such.gguf"},
		{"out is a file", []string{"--out", filepath.Join(file, "sub")}, "bench serve: --out"},
		{"kv below context", []string{"--kv-cache-tokens", "100"}, "bench serve: --kv-cache-tokens 112 is less than the model context"},
		{"rate 0", []string{"--request-rate", "4,0"}, "bench serve: --request-rate 0: must be a finite number > 0"},
		{"rate negative", []string{"--request-rate", "-1"}, "bench serve: --request-rate -1"},
		{"rate inf", []string{"--request-rate", "inf"}, "bench serve: --request-rate +Inf: must be a finite number > 0"},
		{"rate NaN", []string{"--request-rate", "NaN"}, "bench serve: --request-rate NaN"},
		{"rate not a number", []string{"--request-rate", "fast"}, `"fast"`},
		{"rate and clients", []string{"--request-rate", "2", "--clients", "4"}, "bench serve: --clients and --request-rate exclude each other"},
		{"concurrency closed loop", []string{"--max-concurrency", "8"}, "bench serve: --max-concurrency 8: only with --request-rate"},
		{"concurrency negative", []string{"--request-rate", "2", "--max-concurrency", "-1"}, "bench serve: --max-concurrency -1: must be in [0, 4096]"},
		{"concurrency huge", []string{"--request-rate", "2", "--max-concurrency", "5000"}, "bench serve: --max-concurrency 5000"},
		{"slo metric", []string{"--slo", "ttft:200ms,itl:5ms"}, `bench serve: --slo "ttft:200ms,itl:5ms": "itl:5ms": unknown metric "itl"`},
		{"slo bound", []string{"--slo", "tpot:0"}, `bench serve: --slo "tpot:0": "tpot:0": bound "0": must be > 0`},
		{"slo form", []string{"--slo", "200ms"}, `bench serve: --slo "200ms": "200ms": want metric:bound`},
		{"prompt len dist", []string{"--prompt-len", "zipf:3"}, `bench serve: --prompt-len "zipf:3": distribution "zipf"`},
		{"prompt len range", []string{"--prompt-len", "uniform:256-16"}, `bench serve: --prompt-len "uniform:256-16": length 256-16 words`},
		{"prompt len form", []string{"--prompt-len", "32"}, `bench serve: --prompt-len "32": want fixed:N or uniform:MIN-MAX`},
		{"csv without out", []string{"--csv"}, "bench serve: --csv needs --out DIR"},
		{"schema missing", []string{"--json-schema", "/no/such.json"}, "bench serve: --json-schema /no/such.json: open /no/such.json"},
		{"schema not JSON", []string{"--json-schema", file}, "bench serve: --json-schema " + file + ": not JSON"},
		{"schema an array", []string{"--json-schema", arraySchema}, "bench serve: --json-schema " + arraySchema + ": a schema is a JSON object or boolean, not []interface {}"},
		{"schema maskbench", []string{"--json-schema", mbNoSchema}, "bench serve: --json-schema " + mbNoSchema + `: a MaskBench file without "schema"`},
		{"schema ignore eos", []string{"--json-schema", okSchema, "--ignore-eos"}, "bench serve: --ignore-eos with --json-schema: a constrained request ends where its JSON does"},
		{"tools negative", []string{"--tools", "-1"}, "bench serve: --tools -1: must be in [0, 128]"},
		{"tools many", []string{"--tools", "129"}, "bench serve: --tools 129: must be in [0, 128]"},
		{"tools baseline alone", []string{"--tools-baseline"}, "bench serve: --tools-baseline needs --tools N"},
		{"tools and schema", []string{"--tools", "2", "--json-schema", okSchema}, "bench serve: --tools and --json-schema exclude each other"},
		{"tools ignore eos", []string{"--tools", "2", "--ignore-eos"}, "bench serve: --ignore-eos with --tools"},
		{"template with url", []string{"--url", "http://127.0.0.1:1", "--chat-template", file}, "bench serve: --chat-template is the in-process server's"},
		{"admission", []string{"--admission", "D"}, `bench serve: --admission "D": must be tokens, blocks or pausing`},
		{"admission reserve", []string{"--admission", "blocks", "--admission-reserve", "-5"}, "bench serve: --admission-reserve -5: policy: reserve -5 tokens: must be ≥ 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, append([]string{"bench", "serve", "--duration", "1s"}, tc.args...)...)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestBenchServeJSONSchema: --json-schema constrains the in-process
// server's requests (a MaskBench file and a bare schema, in turn), with
// --ignore-eos off, and every request succeeds.
func TestBenchServeJSONSchema(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.json")
	b := filepath.Join(dir, "b.json")
	require.NoError(t, os.WriteFile(a, []byte(`{"schema": {"type": "array", "items": {"type": "integer"}}, "tests": []}`), 0o644))
	require.NoError(t, os.WriteFile(b, []byte(`{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}`), 0o644))
	out, err := runCLI(t, "bench", "serve", "--duration", "300ms", "--clients", "2", "--warmup", "0s",
		"--max-tokens", "8", "--workers", "1", "--json-schema", a+","+b, "--out", dir)
	require.NoError(t, err, out)
	data, err := os.ReadFile(filepath.Join(dir, benchServeFile))
	require.NoError(t, err)
	var rep benchServeReport
	require.NoError(t, json.Unmarshal(data, &rep))
	require.False(t, rep.IgnoreEOS)
	require.Equal(t, []string{a, b}, rep.JSONSchemas)
	require.NotEmpty(t, rep.Levels)
	require.Positive(t, rep.Levels[0].Successes)
	require.Zero(t, rep.Levels[0].Errors)
}

// TestBenchServeTools: --tools sends chat requests offering the tools
// through the Qwen2.5 template on stories260K, and --tools-baseline the
// same requests without them, the system message padded to within a few
// prompt tokens of the tools' prompt; every request succeeds in both, and
// --cpuprofile writes a profile.
func TestBenchServeTools(t *testing.T) {
	tmpl := filepath.Join("..", "..", "server", "testdata", "templates", "qwen2.5.jinja")
	var infos []benchToolsInfo
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	for _, arm := range [][]string{{"--cpuprofile", prof}, {"--tools-baseline"}} {
		dir := t.TempDir()
		args := append([]string{"bench", "serve", "--duration", "300ms", "--clients", "2", "--warmup", "0s", "--max-tokens", "8",
			"--workers", "1", "--tools", "2", "--chat-template", tmpl, "--out", dir}, arm...)
		out, err := runCLI(t, args...)
		require.NoError(t, err, out)
		require.Regexp(t, `chat: .*; one request's prompt: [0-9]+ tokens without tools, [0-9]+ with 2 tools`, out)
		data, err := os.ReadFile(filepath.Join(dir, benchServeFile))
		require.NoError(t, err)
		var rep benchServeReport
		require.NoError(t, json.Unmarshal(data, &rep))
		require.False(t, rep.IgnoreEOS)
		require.Equal(t, tmpl, rep.ChatTemplate)
		require.NotNil(t, rep.Tools)
		l := rep.Levels[0]
		require.Positive(t, l.Successes)
		require.Zero(t, l.Errors)
		require.Greater(t, rep.Tools.PromptTools, rep.Tools.PromptNoTools+100, "the tools are rendered into the prompt")
		require.Equal(t, 1, rep.Tools.GrammarCompiles, "the tools' grammar is compiled once, then cached")
		// The requests' prompts are the story openings after the
		// measured prompt's system message (and tools or padding).
		perReq := float64(l.InputTokens) / float64(l.Successes)
		require.InDelta(t, rep.Tools.PromptTools, perReq, 40)
		infos = append(infos, *rep.Tools)
	}
	st, err := os.Stat(prof)
	require.NoError(t, err)
	require.Positive(t, st.Size(), "--cpuprofile wrote a profile")
	require.False(t, infos[0].Baseline)
	require.True(t, infos[1].Baseline)
	require.Equal(t, infos[0].PromptTools, infos[1].PromptTools)
	require.Positive(t, infos[1].PadWords)
	require.InDelta(t, infos[1].PromptTools, infos[1].PromptPadded, 4, "the padded prompt matches the tools' within a few tokens")
}

// TestBenchTools: the tools are valid function tools, deterministic from
// the seed, named uniquely beyond the list's length.
func TestBenchTools(t *testing.T) {
	a, err := benchTools(20, 1)
	require.NoError(t, err)
	b, err := benchTools(20, 1)
	require.NoError(t, err)
	require.Equal(t, a, b)
	c, err := benchTools(20, 2)
	require.NoError(t, err)
	require.NotEqual(t, a, c, "another seed, another order")
	var tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string         `json:"name"`
			Parameters map[string]any `json:"parameters"`
		} `json:"function"`
	}
	require.NoError(t, json.Unmarshal(a, &tools))
	require.Len(t, tools, 20)
	names := map[string]bool{}
	for _, tool := range tools {
		require.Equal(t, "function", tool.Type)
		require.Equal(t, "object", tool.Function.Parameters["type"])
		require.False(t, names[tool.Function.Name], tool.Function.Name)
		names[tool.Function.Name] = true
	}
	require.Equal(t, "The library", padWords(2))
}

// TestBenchServeProgramPolicy: the program policy's flags are engine
// flags, so the in-process server takes them as serve does.
func TestBenchServeProgramPolicy(t *testing.T) {
	out, err := runCLI(t, "bench", "serve", "--duration", "200ms", "--clients", "1", "--warmup", "0s",
		"--max-tokens", "4", "--workers", "1", "--max-batch-size", "4", "--admission", "blocks", "--admission-reserve", "64")
	require.NoError(t, err, out)
	require.Contains(t, out, "admission    blocks for requests with a program id: distinct blocks + reserve 64 per program")
	require.Contains(t, out, "at most 4 ACTIVE programs")
}

// TestBenchServeRuns: two short levels on stories260K print the table,
// write the JSON report and fail nothing.
func TestBenchServeRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	out, err := runCLI(t, "bench", "serve", "--duration", "1s", "--clients", "1,2", "--warmup", "200ms",
		"--max-tokens", "16", "--workers", "1", "--out", dir)
	require.NoError(t, err, out)
	require.Contains(t, out, "seats        16 = max-batch-size 8")
	require.Regexp(t, `clients +requests +req/s +out tok/s +TTFT p50 ms +TTFT p99 ms +TPOT p50 ms +ITL p50 ms +E2E p50 ms +errors +RSS before MiB +RSS after MiB`, out)
	require.Regexp(t, `(?m)^ +1 +[1-9][0-9]* .* 0 +[0-9.]+ +[0-9.]+$`, out)
	require.Regexp(t, `(?m)^ +2 +[1-9][0-9]* .* 0 +[0-9.]+ +[0-9.]+$`, out)
	require.Contains(t, out, "warm-up: 2 clients")

	b, err := os.ReadFile(filepath.Join(dir, benchServeFile))
	require.NoError(t, err)
	var rep benchServeReport
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, 16, rep.MaxTokens)
	require.NotNil(t, rep.Warmup)
	require.Len(t, rep.Levels, 2)
	for i, l := range rep.Levels {
		require.Equal(t, []int{1, 2}[i], l.Clients)
		require.Positive(t, l.Successes)
		require.Zero(t, l.Errors)
		require.Equal(t, int64(16*l.Successes), l.OutputTokens)
		require.Positive(t, l.TTFTP50)
		require.Positive(t, l.RSSBeforeMiB)
		require.Positive(t, l.RSSAfterMiB)
	}
}

// TestBenchServeFailsOnErrors: requests the server refuses (max_tokens
// beyond the context) make the command fail with the server's message,
// after printing the table.
func TestBenchServeFailsOnErrors(t *testing.T) {
	out, err := runCLI(t, "bench", "serve", "--duration", "1s", "--clients", "2", "--warmup", "0s",
		"--max-tokens", "5000", "--max-requests", "4", "--workers", "1")
	require.ErrorContains(t, err, "bench serve: 4 of 4 requests failed at --clients 2 (first: status 400")
	require.ErrorContains(t, err, "max_tokens")
	require.Regexp(t, `(?m)^ +2 +4 +0\.0 .* 4 +[0-9.]+ +[0-9.]+$`, out)
}

// sseServer is a fake OpenAI-compatible server streaming n one-token
// chunks per request.
func sseServer(t *testing.T, n int) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			fin := "null"
			if i == n-1 {
				fin = `"length"`
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\",\"finish_reason\":%s}]}\n\n", i, fin)
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", n)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestBenchServeURLModes: closed and open loop against a fake server at
// --url print TPOT, ITL and goodput, and write the JSON and CSV reports.
func TestBenchServeURLModes(t *testing.T) {
	url := sseServer(t, 6)
	for _, tc := range []struct {
		name   string
		args   []string
		header string
		mode   string
		levels []float64 // clients or rates
	}{
		{"closed", []string{"--clients", "1,3"}, `clients +requests`, "closed", []float64{1, 3}},
		{"open", []string{"--request-rate", "2000,5000", "--max-concurrency", "4"}, `rate req/s +requests`, "open", []float64{2000, 5000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			args := append([]string{"bench", "serve", "--url", url, "--duration", "1m", "--max-requests", "20",
				"--warmup", "0s", "--max-tokens", "6", "--prompt-len", "uniform:3-12", "--slo", "ttft:1m,tpot:1m",
				"--out", dir, "--csv"}, tc.args...)
			out, err := runCLI(t, args...)
			require.NoError(t, err, out)
			require.Regexp(t, tc.header+` +req/s +out tok/s +TTFT p50 ms +TTFT p99 ms +TPOT p50 ms +ITL p50 ms +E2E p50 ms +goodput req/s +errors +RSS before MiB +RSS after MiB`, out)
			require.Contains(t, out, "prompts uniform:3-12, SLO ttft:1m0s,tpot:1m0s")
			require.NotContains(t, out, "\r", "no progress bar when stderr is not a terminal")

			b, err := os.ReadFile(filepath.Join(dir, benchServeFile))
			require.NoError(t, err)
			var rep benchServeReport
			require.NoError(t, json.Unmarshal(b, &rep))
			require.Equal(t, "ttft:1m0s,tpot:1m0s", rep.SLO)
			require.Equal(t, "uniform:3-12", rep.Prompts)
			require.Len(t, rep.Levels, 2)
			for i, l := range rep.Levels {
				require.Equal(t, tc.mode, l.Mode)
				if tc.mode == "open" {
					require.Equal(t, tc.levels[i], l.RequestRate)
					require.LessOrEqual(t, l.MaxInFlight, 4)
				} else {
					require.Equal(t, int(tc.levels[i]), l.Clients)
				}
				require.Equal(t, 20, l.Successes)
				require.Equal(t, int64(20*6), l.OutputTokens)
				require.Equal(t, int64(20*4), l.InputTokens)
				require.Equal(t, 20, l.TPOT.N)
				require.Equal(t, 20*5, l.ITL.N)
				require.Equal(t, 20, l.SLOMet)
				require.InDelta(t, l.RequestsPerSec, l.Goodput, 1e-9)
				require.Zero(t, l.RSSBeforeMiB, "--url: RSS not measured")
			}

			f, err := os.Open(filepath.Join(dir, benchServeCSV))
			require.NoError(t, err)
			defer f.Close()
			rows, err := csv.NewReader(f).ReadAll()
			require.NoError(t, err)
			require.Len(t, rows, 3, "a header and one row per level")
			require.Equal(t, benchServeCSVHeader, rows[0])
			col := func(name string) int { return slices.Index(rows[0], name) }
			for _, row := range rows[1:] {
				require.Len(t, row, len(rows[0]))
				require.Equal(t, tc.mode, row[col("mode")])
				require.Equal(t, "20", row[col("successes")])
				require.Equal(t, "20", row[col("slo_met")])
				require.Equal(t, "uniform:3-12 words", row[col("prompts")])
				tpot, err := strconv.ParseFloat(row[col("tpot_median_ms")], 64)
				require.NoError(t, err)
				require.Positive(t, tpot)
			}
		})
	}
}

// TestBenchServeProgressBar: a level's bar shows the further along of the
// requests done and the time passed.
func TestBenchServeProgressBar(t *testing.T) {
	for _, tc := range []struct {
		done, total int
		elapsed     time.Duration
		want        string
	}{
		{0, 100, 0, "   0% "},
		{50, 100, time.Second, "  50% "},     // requests lead
		{1, 1000, 5 * time.Second, "  50% "}, // time leads
		{9, 10, 20 * time.Second, " 100% "},  // capped
	} {
		var buf bytes.Buffer
		now := time.Unix(0, 0)
		bar := progressBar(&buf, "--clients 4", 10*time.Second, func() time.Time { return now })
		now = now.Add(tc.elapsed)
		bar(tc.done, tc.total)
		require.Contains(t, buf.String(), tc.want, "%+v", tc)
		require.Contains(t, buf.String(), fmt.Sprintf("--clients 4: %d requests", tc.done))
	}
}

// TestBenchServeOpenLoopInProcess: an open-loop level with a warm-up at
// its rate against the in-process server, with goodput.
func TestBenchServeOpenLoopInProcess(t *testing.T) {
	out, err := runCLI(t, "bench", "serve", "--duration", "300ms", "--request-rate", "40", "--max-concurrency", "2",
		"--warmup", "100ms", "--max-tokens", "8", "--workers", "1", "--slo", "e2e:1m", "--prompt-len", "fixed:5")
	require.NoError(t, err, out)
	require.Regexp(t, `rate req/s +requests +.* +goodput req/s +errors`, out)
	require.Regexp(t, `(?m)^ +40 +[1-9][0-9]* .* 0 +[0-9.]+ +[0-9.]+$`, out)
	require.Contains(t, out, "warm-up: 40 req/s, ")
}
