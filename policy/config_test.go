package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseAccounting(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Accounting
		err  string
	}{
		{"A", TokenAccounting, ""}, {"b", BlockAccounting, ""}, {" C ", PausingAccounting, ""}, {"D", 0, `"D"`}, {"", 0, `""`},
		{"tokens", TokenAccounting, ""}, {"Blocks", BlockAccounting, ""}, {"pausing", PausingAccounting, ""}, {"shared", 0, `"shared"`},
	} {
		got, err := ParseAccounting(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
		require.Equal(t, tc.want, must(ParseAccounting(got.String())))
	}
}

func must(a Accounting, err error) Accounting {
	if err != nil {
		panic(err)
	}
	return a
}

func TestDefaultConfig(t *testing.T) {
	for _, arm := range []Accounting{TokenAccounting, BlockAccounting, PausingAccounting} {
		c := DefaultConfig(arm, 8)
		require.NoError(t, c.Validate())
		require.Equal(t, 100, c.Buffer)
		require.Equal(t, 512, c.Reserve)
		require.Equal(t, 1800*time.Second, c.ForcedResume)
		require.Equal(t, 30*time.Minute, c.Lease)
		if arm == PausingAccounting {
			require.Equal(t, [3]float64{0.95, 0.80, 0.10}, [3]float64{c.PauseThreshold, c.PauseTarget, c.ResumeHysteresis})
		} else {
			require.Equal(t, [3]float64{1, 1, 0}, [3]float64{c.PauseThreshold, c.PauseTarget, c.ResumeHysteresis})
		}
	}
}

// TestConfigRefused: bad parameters are refused at start-up (New), naming
// the offending value.
func TestConfigRefused(t *testing.T) {
	pool := newPool(t, 64)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"target above threshold", func(c *Config) { c.PauseTarget = 0.97 }, "pause target 0.97 exceeds pause threshold 0.95"},
		{"negative reserve", func(c *Config) { c.Reserve = -5 }, "reserve -5"},
		{"hysteresis above threshold", func(c *Config) { c.ResumeHysteresis = 0.99 }, "resume hysteresis 0.99"},
		{"hysteresis equal to threshold", func(c *Config) { c.ResumeHysteresis = 0.95 }, "resume hysteresis 0.95"},
		{"negative buffer", func(c *Config) { c.Buffer = -1 }, "buffer -1"},
		{"no seats", func(c *Config) { c.MaxActive = 0 }, "max active programs 0"},
		{"bad arm", func(c *Config) { c.Accounting = 9 }, "Accounting(9)"},
		{"weight above 1", func(c *Config) { c.ActingTokenWeight = 1.5 }, "acting token weight 1.5"},
		{"threshold above 1", func(c *Config) { c.PauseThreshold = 1.2 }, "pause threshold 1.2"},
		{"zero target", func(c *Config) { c.PauseTarget = 0 }, "pause target 0"},
		{"negative hysteresis", func(c *Config) { c.ResumeHysteresis = -0.1 }, "resume hysteresis -0.1"},
		{"negative tau", func(c *Config) { c.AgingTau = -time.Second }, "aging tau -1s"},
		{"zero forced resume", func(c *Config) { c.ForcedResume = 0 }, "forced resume timeout 0s"},
		{"zero lease", func(c *Config) { c.Lease = 0 }, "program lease 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(PausingAccounting, 8)
			tc.edit(&cfg)
			c, err := New(cfg, pool)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, c)
		})
	}
	_, err := New(DefaultConfig(TokenAccounting, 1), nil)
	require.ErrorContains(t, err, "nil kvpool")
}
