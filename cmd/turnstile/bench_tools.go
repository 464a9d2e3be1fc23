package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-llm/turnstile/bench/serveload"
)

// This file is bench serve's chat mode with tools (--tools N): the tools
// every request offers, and the baseline's padding (--tools-baseline): a
// system message lengthened with neutral text to the prompt tokens the
// tools' rendering takes, so that both arms prefill the same length.

// maxBenchTools bounds --tools (the server's bound on a request's tools).
const maxBenchTools = 128

// benchSystem is the system message of every chat request of bench serve.
const benchSystem = "You are a helpful assistant."

// benchToolFunctions are the function tools --tools draws from: the shapes
// agents offer (a few properties each, enums, a nested object, arrays,
// bounds), each with a description.
var benchToolFunctions = []string{
	`{"name":"get_weather","description":"Get the current weather and a short forecast for a city.","parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name, e.g. Paris"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7,"description":"Forecast days"}},"required":["city"]}}`,
	`{"name":"search_flights","description":"Search one-way or return flights between two airports.","parameters":{"type":"object","properties":{"origin":{"type":"string","description":"IATA code of the departure airport"},"destination":{"type":"string","description":"IATA code of the arrival airport"},"date":{"type":"string","description":"Departure date, YYYY-MM-DD"},"cabin":{"type":"string","enum":["economy","premium_economy","business","first"]},"passengers":{"type":"object","properties":{"adults":{"type":"integer","minimum":1,"maximum":9},"children":{"type":"integer","minimum":0,"maximum":8}},"required":["adults"]}},"required":["origin","destination","date"]}}`,
	`{"name":"create_calendar_event","description":"Create an event in the user's calendar.","parameters":{"type":"object","properties":{"title":{"type":"string"},"start":{"type":"string","description":"Start time, ISO 8601"},"duration_minutes":{"type":"integer","minimum":5,"maximum":1440},"attendees":{"type":"array","items":{"type":"string","description":"Email address"}},"reminder":{"type":"string","enum":["none","5m","15m","1h","1d"]}},"required":["title","start"]}}`,
	`{"name":"send_email","description":"Send an email on the user's behalf.","parameters":{"type":"object","properties":{"to":{"type":"array","items":{"type":"string"},"minItems":1},"subject":{"type":"string"},"body":{"type":"string"},"priority":{"type":"string","enum":["low","normal","high"]}},"required":["to","subject","body"]}}`,
	`{"name":"lookup_order","description":"Look up an order's status and shipping details by its number.","parameters":{"type":"object","properties":{"order_id":{"type":"string","description":"The order number, e.g. A-10234"},"include_items":{"type":"boolean"},"fields":{"type":"array","items":{"type":"string","enum":["status","carrier","tracking","eta","address"]}}},"required":["order_id"]}}`,
	`{"name":"convert_currency","description":"Convert an amount from one currency to another at today's rate.","parameters":{"type":"object","properties":{"amount":{"type":"number","minimum":0},"from":{"type":"string","enum":["USD","EUR","GBP","JPY","CHF","CAD"]},"to":{"type":"string","enum":["USD","EUR","GBP","JPY","CHF","CAD"]}},"required":["amount","from","to"]}}`,
	`{"name":"search_web","description":"Search the web and return the top results with snippets.","parameters":{"type":"object","properties":{"query":{"type":"string"},"max_results":{"type":"integer","minimum":1,"maximum":20},"recency":{"type":"string","enum":["any","day","week","month","year"]},"site":{"type":"string","description":"Restrict to one domain"}},"required":["query"]}}`,
	`{"name":"get_stock_quote","description":"Get the latest quote for a stock ticker.","parameters":{"type":"object","properties":{"ticker":{"type":"string","description":"Ticker symbol, e.g. AAPL"},"exchange":{"type":"string","enum":["NASDAQ","NYSE","LSE","TSE"]},"include_history":{"type":"boolean"}},"required":["ticker"]}}`,
	`{"name":"book_restaurant","description":"Reserve a table at a restaurant.","parameters":{"type":"object","properties":{"restaurant":{"type":"string"},"date":{"type":"string"},"time":{"type":"string","description":"HH:MM, 24-hour"},"party_size":{"type":"integer","minimum":1,"maximum":20},"seating":{"type":"string","enum":["indoor","outdoor","bar","no_preference"]},"contact":{"type":"object","properties":{"name":{"type":"string"},"phone":{"type":"string"}},"required":["name","phone"]}},"required":["restaurant","date","time","party_size"]}}`,
	`{"name":"translate_text","description":"Translate text into another language.","parameters":{"type":"object","properties":{"text":{"type":"string"},"target_language":{"type":"string","enum":["en","fr","de","es","it","ja","zh","pt"]},"formality":{"type":"string","enum":["default","formal","informal"]}},"required":["text","target_language"]}}`,
	`{"name":"create_ticket","description":"Open a support ticket in the issue tracker.","parameters":{"type":"object","properties":{"title":{"type":"string","maxLength":120},"description":{"type":"string"},"severity":{"type":"string","enum":["low","medium","high","critical"]},"labels":{"type":"array","items":{"type":"string"},"maxItems":5},"assignee":{"type":"object","properties":{"team":{"type":"string","enum":["backend","frontend","infra","support"]},"user":{"type":"string"}},"required":["team"]}},"required":["title","severity"]}}`,
	`{"name":"get_directions","description":"Get directions between two places.","parameters":{"type":"object","properties":{"from":{"type":"string"},"to":{"type":"string"},"mode":{"type":"string","enum":["driving","walking","cycling","transit"]},"avoid":{"type":"array","items":{"type":"string","enum":["tolls","highways","ferries"]}}},"required":["from","to"]}}`,
	`{"name":"set_thermostat","description":"Set a room's thermostat target temperature and mode.","parameters":{"type":"object","properties":{"room":{"type":"string","enum":["living_room","bedroom","kitchen","office"]},"temperature":{"type":"number","minimum":10,"maximum":30},"mode":{"type":"string","enum":["heat","cool","auto","off"]}},"required":["room","temperature"]}}`,
	`{"name":"query_database","description":"Run a read-only query against the analytics database.","parameters":{"type":"object","properties":{"table":{"type":"string","enum":["users","orders","events","invoices"]},"filters":{"type":"object","properties":{"field":{"type":"string"},"op":{"type":"string","enum":["eq","ne","lt","gt","contains"]},"value":{"type":"string"}},"required":["field","op","value"]},"limit":{"type":"integer","minimum":1,"maximum":1000},"order_by":{"type":"string"}},"required":["table"]}}`,
	`{"name":"summarize_document","description":"Summarize a document from the user's drive.","parameters":{"type":"object","properties":{"document_id":{"type":"string"},"length":{"type":"string","enum":["short","medium","long"]},"focus":{"type":"string","description":"What the summary should focus on"},"bullet_points":{"type":"boolean"}},"required":["document_id"]}}`,
	`{"name":"play_music","description":"Play music on the user's speakers.","parameters":{"type":"object","properties":{"query":{"type":"string","description":"Song, artist, album or playlist"},"shuffle":{"type":"boolean"},"volume":{"type":"integer","minimum":0,"maximum":100},"device":{"type":"string","enum":["kitchen","living_room","bedroom","all"]}},"required":["query"]}}`,
}

// benchTools is --tools N's tools array: N function tools of
// benchToolFunctions in an order drawn from seed (beyond their number,
// copies with a numbered name).
func benchTools(n int, seed uint64) (json.RawMessage, error) {
	rng := rand.New(rand.NewPCG(seed, 0x7001))
	order := rng.Perm(len(benchToolFunctions))
	tools := make([]map[string]any, 0, n)
	for i := range n {
		var fn map[string]any
		if err := json.Unmarshal([]byte(benchToolFunctions[order[i%len(order)]]), &fn); err != nil {
			return nil, fmt.Errorf("bench serve: tool %d: %w", i, err)
		}
		if k := i / len(order); k > 0 {
			fn["name"] = fmt.Sprintf("%s_%d", fn["name"], k+1)
		}
		tools = append(tools, map[string]any{"type": "function", "function": fn})
	}
	return json.Marshal(tools)
}

// benchPadding is the baseline's neutral text: sentences that say nothing
// about tools, cycled word by word.
var benchPadding = strings.Fields("The library opens at nine in the morning and closes at six in the evening. " +
	"Visitors are asked to return borrowed books within three weeks. " +
	"The reading room on the second floor is quiet and has large windows facing the park. " +
	"Newspapers from the region are kept near the entrance, next to the catalogue terminals. " +
	"On weekends the staff organise short talks about local history and gardening. " +
	"Children can join the story hour every Wednesday afternoon.")

// padWords is the first n words of the padding, cycled.
func padWords(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(benchPadding[i%len(benchPadding)])
	}
	return b.String()
}

// benchToolsInfo is what bench serve measured of the tools' prompt before
// the load: prompt tokens of one request with the system message alone,
// with the tools, and (baseline) with the padded system message.
type benchToolsInfo struct {
	Tools          int  `json:"tools"`
	Baseline       bool `json:"baseline"`
	PromptNoTools  int  `json:"prompt_tokens_no_tools"`
	PromptTools    int  `json:"prompt_tokens_tools"`
	PromptPadded   int  `json:"prompt_tokens_padded,omitempty"`
	PadWords       int  `json:"pad_words,omitempty"`
	CalibrateCalls int  `json:"calibration_requests"`
	// FirstToolsMS and SecondToolsMS are the latency of the first and
	// second of those requests with the tools (max_tokens 1): the first
	// compiles the tools' grammar, the second finds it cached.
	FirstToolsMS  float64 `json:"first_tools_request_ms"`
	SecondToolsMS float64 `json:"second_tools_request_ms"`
	// GrammarCompileMS and GrammarCompiles are the server's
	// turnstile_grammar_compile_seconds_total and
	// turnstile_grammar_compiles_total after those requests (0 where the
	// server has no such metrics).
	GrammarCompileMS float64 `json:"grammar_compile_ms"`
	GrammarCompiles  int     `json:"grammar_compiles"`
}

// toolsChat measures the tools' prompt tokens at url and returns the
// load's conversation: the tools (tool_choice auto), or for the baseline
// no tools and the system message padded to the same prompt tokens
// (within padTolerance, else the closest found).
func (o *benchServeOptions) toolsChat(ctx context.Context, url string) (*serveload.Chat, benchToolsInfo, error) {
	info := benchToolsInfo{Tools: o.tools, Baseline: o.toolsBaseline}
	tools, err := benchTools(o.tools, o.seed)
	if err != nil {
		return nil, info, err
	}
	c := &http.Client{Timeout: o.timeout}
	user := serveload.DefaultPrompts()[0]
	probe := func(system string, tools json.RawMessage) (int, error) {
		info.CalibrateCalls++
		return promptTokens(ctx, c, url, system, user, tools)
	}
	if info.PromptNoTools, err = probe(benchSystem, nil); err != nil {
		return nil, info, err
	}
	for i, ms := range []*float64{&info.FirstToolsMS, &info.SecondToolsMS} {
		t0 := time.Now()
		n, err := probe(benchSystem, tools)
		if err != nil {
			return nil, info, err
		}
		*ms = float64(time.Since(t0).Microseconds()) / 1000
		if i > 0 && n != info.PromptTools {
			return nil, info, fmt.Errorf("bench serve: the same request with tools rendered %d then %d prompt tokens", info.PromptTools, n)
		}
		info.PromptTools = n
	}
	want := info.PromptTools - info.PromptNoTools
	if want < 1 {
		return nil, info, fmt.Errorf("bench serve: --tools %d adds %d prompt tokens (%d with, %d without): the template does not render them",
			o.tools, want, info.PromptTools, info.PromptNoTools)
	}
	info.GrammarCompileMS, info.GrammarCompiles = grammarCompiles(ctx, c, url)
	if !o.toolsBaseline {
		return &serveload.Chat{System: benchSystem, Tools: tools}, info, nil
	}
	// The padding's tokens grow with its words; correct the word count by
	// the measured tokens per word until the lengths match, starting
	// short (a word is at least one token) so no probe exceeds the
	// context the tools' prompt fits.
	words, bestWords, bestErr := max(1, want/4), 0, want
	for range padRounds {
		got, err := probe(benchSystem+"\n\n"+padWords(words), nil)
		if err != nil {
			return nil, info, err
		}
		added := got - info.PromptNoTools
		if e := want - added; abs(e) < abs(bestErr) {
			bestWords, bestErr = words, e
		}
		if abs(want-added) <= padTolerance {
			break
		}
		perWord := float64(max(added, 1)) / float64(words)
		step := int(float64(want-added) / perWord)
		if step == 0 {
			step = 1
			if want < added {
				step = -1
			}
		}
		words = max(1, words+step)
	}
	info.PadWords, info.PromptPadded = bestWords, info.PromptTools-bestErr
	return &serveload.Chat{System: benchSystem + "\n\n" + padWords(bestWords)}, info, nil
}

// padRounds bounds the baseline's calibration probes; padTolerance is the
// prompt tokens by which the padded prompt may differ from the tools'.
const (
	padRounds    = 12
	padTolerance = 1
)

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// promptTokens sends one non-streaming chat request of max_tokens 1 and
// returns its usage.prompt_tokens.
func promptTokens(ctx context.Context, c *http.Client, url, system, user string, tools json.RawMessage) (int, error) {
	body := map[string]any{"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}},
		"max_tokens": 1, "seed": 1}
	if len(tools) > 0 {
		body["tools"], body["tool_choice"] = tools, "auto"
	}
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("bench serve: measuring the prompt: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("bench serve: measuring the prompt: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("bench serve: measuring the prompt: status %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	var r struct {
		Usage *struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.Usage == nil || r.Usage.PromptTokens < 1 {
		return 0, errors.New("bench serve: measuring the prompt: the answer has no usage.prompt_tokens")
	}
	return r.Usage.PromptTokens, nil
}

// startCPUProfile starts the process's CPU profile into path; the
// function it returns stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench serve: --cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench serve: --cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// grammarCompiles reads a turnstile server's grammar compile time (ms) and
// count from /metrics; zeros where they are absent.
func grammarCompiles(ctx context.Context, c *http.Client, url string) (ms float64, n int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0, 0
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "turnstile_grammar_compile_seconds_total":
			ms = v * 1000
		case "turnstile_grammar_compiles_total":
			n = int(v)
		}
	}
	return ms, n
}
