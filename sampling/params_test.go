package sampling

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		name  string
		edit  func(*Params)
		field string // "" = valid
	}{
		{"default", func(p *Params) {}, ""},
		{"all on", func(p *Params) {
			*p = Params{Temperature: 2.5, TopK: 40, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.3,
				PresencePenalty: -2, FrequencyPenalty: 2, Logprobs: true, TopLogprobs: MaxTopLogprobs}
		}, ""},
		{"top_k beyond vocab", func(p *Params) { p.TopK = 1 << 20 }, ""},
		{"min_p 1", func(p *Params) { p.MinP = 1 }, ""},
		{"temperature negative", func(p *Params) { p.Temperature = -0.1 }, "temperature"},
		{"temperature NaN", func(p *Params) { p.Temperature = nan }, "temperature"},
		{"temperature Inf", func(p *Params) { p.Temperature = inf }, "temperature"},
		{"top_p 0", func(p *Params) { p.TopP = 0 }, "top_p"},
		{"top_p above 1", func(p *Params) { p.TopP = 1.01 }, "top_p"},
		{"top_p NaN", func(p *Params) { p.TopP = nan }, "top_p"},
		{"top_k -2", func(p *Params) { p.TopK = -2 }, "top_k"},
		{"min_p negative", func(p *Params) { p.MinP = -0.01 }, "min_p"},
		{"min_p above 1", func(p *Params) { p.MinP = 1.5 }, "min_p"},
		{"min_p NaN", func(p *Params) { p.MinP = nan }, "min_p"},
		{"repetition 0", func(p *Params) { p.RepetitionPenalty = 0 }, "repetition_penalty"},
		{"repetition negative", func(p *Params) { p.RepetitionPenalty = -1 }, "repetition_penalty"},
		{"repetition Inf", func(p *Params) { p.RepetitionPenalty = inf }, "repetition_penalty"},
		{"presence low", func(p *Params) { p.PresencePenalty = -2.1 }, "presence_penalty"},
		{"presence high", func(p *Params) { p.PresencePenalty = 2.1 }, "presence_penalty"},
		{"presence NaN", func(p *Params) { p.PresencePenalty = nan }, "presence_penalty"},
		{"frequency low", func(p *Params) { p.FrequencyPenalty = -3 }, "frequency_penalty"},
		{"frequency high", func(p *Params) { p.FrequencyPenalty = 2.5 }, "frequency_penalty"},
		{"frequency NaN", func(p *Params) { p.FrequencyPenalty = nan }, "frequency_penalty"},
		{"top_logprobs negative", func(p *Params) { p.TopLogprobs = -1 }, "top_logprobs"},
		{"top_logprobs above max", func(p *Params) { p.TopLogprobs = MaxTopLogprobs + 1 }, "top_logprobs"},
		{"zero value", func(p *Params) { *p = Params{} }, "top_p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			tc.edit(&p)
			err := p.Validate(100)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.field)
		})
	}
}

func TestValidateNormalisesTopK(t *testing.T) {
	p := DefaultParams()
	p.TopK = -1
	require.NoError(t, p.Validate(10))
	require.Equal(t, 0, p.TopK)

	require.ErrorContains(t, p.Validate(0), "vocab 0")
	var nilp *Params
	require.Error(t, nilp.Validate(10))
}
