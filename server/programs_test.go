package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/policy"
)

// labelled is the sample of family name whose label key is val (0 if none).
func labelled(fams map[string]*dto.MetricFamily, name, key, val string) float64 {
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == key && l.GetValue() == val {
				if m.Gauge != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestProgramPolicyWiring: an executor engine with a program policy serves
// the program header, the release flag and DELETE /v1/programs/{id}, and
// /metrics exports the policy's program states, pauses, resumes, forced
// resumes, used tokens per accounting and capacity.
func TestProgramPolicyWiring(t *testing.T) {
	pc := policy.DefaultConfig(policy.BlockAccounting, 0)
	e := newSimEnv(t, simOpts{programs: &pc})
	waitActive := func(want float64) map[string]*dto.MetricFamily {
		t.Helper()
		var fams map[string]*dto.MetricFamily
		require.Eventually(t, func() bool { // releases apply at the engine's next step
			fams = scrape(t, e)
			return labelled(fams, "turnstile_programs", "state", "active") == want
		}, 5*time.Second, time.Millisecond)
		return fams
	}
	prompt := strings.Repeat("a big red ball. ", 8) // several full KV blocks
	resp := e.post(t, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 4}, "X-Program-Id", "agent-1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	resp = e.post(t, "/v1/completions", `{"prompt":"a small dog","max_tokens":4,"program_id":"agent-2","program_release":true}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()

	fams := waitActive(1) // agent-2 asked for its release; agent-1 stays, pinned
	require.Equal(t, float64(512*16), value(t, fams, "turnstile_program_admission_capacity_tokens"))
	require.Positive(t, value(t, fams, "turnstile_program_admission_used_tokens"))
	require.Positive(t, labelled(fams, "turnstile_program_admission_accounted_tokens", "accounting", "tokens"))
	require.Positive(t, labelled(fams, "turnstile_program_admission_accounted_tokens", "accounting", "blocks"))
	require.Equal(t, 2.0, value(t, fams, "turnstile_program_admission_waits_total"))
	for _, name := range []string{"turnstile_program_pauses_total", "turnstile_program_resumes_total",
		"turnstile_program_forced_resumes_total", "turnstile_program_pins_dropped_total"} {
		require.Zero(t, value(t, fams, name), name)
	}
	require.Zero(t, labelled(fams, "turnstile_programs", "state", "paused")+labelled(fams, "turnstile_programs", "state", "waiting"))
	require.Positive(t, value(t, fams, "turnstile_kv_blocks_used"), "agent-1's context is pinned")

	del := func(id string) int {
		req, err := http.NewRequest(http.MethodDelete, e.ts.URL+"/v1/programs/"+id, nil)
		require.NoError(t, err)
		resp, err := e.ts.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusNotFound, del("agent-2"), "released by its flag")
	require.Equal(t, http.StatusOK, del("agent-1"))
	fams = waitActive(0)
	require.Zero(t, value(t, fams, "turnstile_kv_blocks_used"), "nothing pinned once both programs ended")
}
