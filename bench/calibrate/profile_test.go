package calibrate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func validProfile(t *testing.T) Profile {
	t.Helper()
	res, err := Run(context.Background(), Config{Device: Sim(truth(), 1024), MaxBatchSize: 2, MaxContext: 1024, Requests: 8, Seed: 1})
	require.NoError(t, err)
	p := res.Profile("sim-h200", "sim", 0)
	p.MaxBatchSize, p.Requests, p.Seed = 2, 8, 1
	return p
}

func TestProfileRoundTrip(t *testing.T) {
	p := validProfile(t)
	require.Positive(t, p.TrainSamples)
	require.Equal(t, p.HeldOutSamples, p.HeldOutPrefill.Samples+p.HeldOutDecode.Samples)
	path := filepath.Join(t.TempDir(), "profile.json")
	require.NoError(t, p.WriteProfile(path))
	got, err := ReadProfile(path)
	require.NoError(t, err)
	require.Equal(t, p, got)
}

func TestProfileRefusesBadFields(t *testing.T) {
	good := validProfile(t)
	for _, tc := range []struct {
		name string
		edit func(p *Profile)
		want string
	}{
		{"model", func(p *Profile) { p.Model = "" }, "field model"},
		{"runner", func(p *Profile) { p.Runner = "tpu" }, `field runner = "tpu"`},
		{"workers", func(p *Profile) { p.Workers = -1 }, "field workers = -1"},
		{"batch", func(p *Profile) { p.MaxBatchSize = 0 }, "field max_batch_size = 0"},
		{"requests", func(p *Profile) { p.Requests = 0 }, "field requests = 0"},
		{"train", func(p *Profile) { p.TrainSamples = 0 }, "field train_samples = 0"},
		{"held out", func(p *Profile) { p.HeldOutSamples = 0 }, "field held_out_samples = 0"},
		{"held out sum", func(p *Profile) { p.HeldOutSamples++ }, "field held_out_samples"},
		{"median", func(p *Profile) { p.MedianRelErr = -0.1 }, "field median_rel_err = -0.1"},
		{"p90", func(p *Profile) { p.MedianRelErr, p.P90RelErr = 0.2, 0.1 }, "field p90_rel_err = 0.1"},
		{"r2", func(p *Profile) { p.R2 = 1.5 }, "field r2 = 1.5"},
		{"rms", func(p *Profile) { p.RMS = -1 }, "field rms_s = -1"},
		{"class", func(p *Profile) { p.HeldOutDecode.Samples = -1 }, "field held_out_decode.samples = -1"},
		{"class p90", func(p *Profile) { p.HeldOutPrefill.Median = 0.5 }, "field held_out_prefill.p90_rel_err"},
		{"linear", func(p *Profile) { p.Linear.PerContextToken = -1 }, "field linear: sim: cost coefficient per context token is -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			tc.edit(&p)
			path := filepath.Join(t.TempDir(), "p.json")
			require.ErrorContains(t, p.WriteProfile(path), tc.want, "write refuses it")
			_, err := os.Stat(path)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing written")
			// Written without the check, ReadProfile must refuse it too.
			require.NoError(t, writeJSON(path, p))
			_, err = ReadProfile(path)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, path)
		})
	}
}

func TestReadProfileRefusesMalformedFiles(t *testing.T) {
	dir := t.TempDir()
	good := validProfile(t)
	path := filepath.Join(dir, "good.json")
	require.NoError(t, good.WriteProfile(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, text, want string
	}{
		{"unknown field", strings.Replace(string(b), `"model"`, `"modle"`, 1), `unknown field "modle"`},
		{"trailing data", string(b) + "{}", "data after the profile object"},
		{"not json", "fixed = 1", "invalid character"},
		{"wrong type", strings.Replace(string(b), `"workers": 0`, `"workers": "two"`, 1), "workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".json")
			require.NoError(t, os.WriteFile(p, []byte(tc.text), 0o644))
			_, err := ReadProfile(p)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err = ReadProfile(filepath.Join(dir, "missing.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
