package launch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// envOf is an env lookup over a fixed map.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDetect(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want Launch
		err  string // substring of the error; "" for none
	}{
		{name: "not launched", env: nil, want: Launch{}},
		{name: "unrelated variables", env: map[string]string{"PATH": "/bin", "OMPI_MCA_foo": "1"}, want: Launch{}},
		{
			name: "open mpi",
			env:  map[string]string{EnvOMPIRank: "2", EnvOMPISize: "4", EnvOMPILocalRank: "0", EnvOMPILocalSize: "2"},
			want: Launch{Launched: true, Source: EnvOMPIRank, Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2},
		},
		{
			name: "open mpi without local rank",
			env:  map[string]string{EnvOMPIRank: "0", EnvOMPISize: "1"},
			want: Launch{Launched: true, Source: EnvOMPIRank, Rank: 0, Size: 1, LocalRank: Unknown, LocalSize: Unknown},
		},
		{
			name: "open mpi wins over pmi",
			env:  map[string]string{EnvOMPIRank: "1", EnvOMPISize: "2", EnvPMIRank: "7", EnvPMISize: "9"},
			want: Launch{Launched: true, Source: EnvOMPIRank, Rank: 1, Size: 2, LocalRank: Unknown, LocalSize: Unknown},
		},
		{
			name: "pmix rank only",
			env:  map[string]string{EnvPMIxRank: "3"},
			want: Launch{Launched: true, Source: EnvPMIxRank, Rank: 3, Size: Unknown, LocalRank: Unknown, LocalSize: Unknown},
		},
		{
			name: "pmix with pmi size and mpich local rank",
			env:  map[string]string{EnvPMIxRank: "1", EnvPMISize: "2", EnvMPILocalRank: "1"},
			want: Launch{Launched: true, Source: EnvPMIxRank, Rank: 1, Size: 2, LocalRank: 1, LocalSize: Unknown},
		},
		{
			name: "generic pmi",
			env:  map[string]string{EnvPMIRank: "0", EnvPMISize: "3"},
			want: Launch{Launched: true, Source: EnvPMIRank, Rank: 0, Size: 3, LocalRank: Unknown, LocalSize: Unknown},
		},
		{name: "rank not a number", env: map[string]string{EnvOMPIRank: "one", EnvOMPISize: "2"}, err: `OMPI_COMM_WORLD_RANK="one" is not a decimal integer`},
		{name: "rank with space", env: map[string]string{EnvOMPIRank: " 1", EnvOMPISize: "2"}, err: `OMPI_COMM_WORLD_RANK=" 1"`},
		{name: "negative rank", env: map[string]string{EnvOMPIRank: "-1", EnvOMPISize: "2"}, err: `OMPI_COMM_WORLD_RANK="-1" is below 0`},
		{name: "zero size", env: map[string]string{EnvOMPIRank: "0", EnvOMPISize: "0"}, err: `OMPI_COMM_WORLD_SIZE="0" is below 1`},
		{name: "size missing", env: map[string]string{EnvOMPIRank: "0"}, err: "OMPI_COMM_WORLD_RANK=0 is set but OMPI_COMM_WORLD_SIZE is not"},
		{name: "pmi size missing", env: map[string]string{EnvPMIRank: "0"}, err: "PMI_RANK=0 is set but PMI_SIZE is not"},
		{name: "rank past size", env: map[string]string{EnvOMPIRank: "4", EnvOMPISize: "4"}, err: "OMPI_COMM_WORLD_RANK=4 is outside [0, OMPI_COMM_WORLD_SIZE=4)"},
		{name: "local rank past size", env: map[string]string{EnvOMPIRank: "0", EnvOMPISize: "2", EnvOMPILocalRank: "2"}, err: "OMPI_COMM_WORLD_LOCAL_RANK=2 is outside [0, OMPI_COMM_WORLD_SIZE=2)"},
		{name: "local rank past local size", env: map[string]string{EnvOMPIRank: "1", EnvOMPISize: "4", EnvOMPILocalRank: "1", EnvOMPILocalSize: "1"}, err: "OMPI_COMM_WORLD_LOCAL_RANK=1 is outside [0, OMPI_COMM_WORLD_LOCAL_SIZE=1)"},
		{name: "local size zero", env: map[string]string{EnvOMPIRank: "0", EnvOMPISize: "2", EnvOMPILocalSize: "0"}, err: `OMPI_COMM_WORLD_LOCAL_SIZE="0" is below 1`},
		{name: "local rank malformed", env: map[string]string{EnvOMPIRank: "0", EnvOMPISize: "2", EnvOMPILocalRank: "0x1"}, err: `OMPI_COMM_WORLD_LOCAL_RANK="0x1" is not a decimal integer`},
		{name: "pmix rank malformed", env: map[string]string{EnvPMIxRank: "1.5"}, err: `PMIX_RANK="1.5" is not a decimal integer`},
		{name: "size overflows", env: map[string]string{EnvOMPIRank: "0", EnvOMPISize: "99999999999999999999"}, err: `OMPI_COMM_WORLD_SIZE="99999999999999999999" is not a decimal integer`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Detect(envOf(tc.env))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.Equal(t, Launch{}, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestValidateWorld(t *testing.T) {
	launched := func(size int) Launch {
		return Launch{Launched: true, Source: EnvOMPIRank, Size: size, LocalRank: Unknown}
	}
	cases := []struct {
		name     string
		dp       int
		l        Launch
		err      string
		mismatch bool
	}{
		{name: "one process dp 1", dp: 1, l: Launch{}},
		{name: "one process dp 4", dp: 4, l: Launch{}},
		{name: "launched matching", dp: 3, l: launched(3)},
		{name: "launched more ranks than dp", dp: 2, l: launched(4), err: "--dp 2 but the MPI world has 4 ranks", mismatch: true},
		{name: "launched fewer ranks than dp", dp: 4, l: launched(1), err: "--dp 4 but the MPI world has 1 ranks", mismatch: true},
		{name: "dp zero", dp: 0, l: Launch{}, err: "--dp 0: must be at least 1"},
		{name: "size unknown", dp: 2, l: Launch{Launched: true, Source: EnvPMIxRank, Size: Unknown}, err: "--dp 2: the launcher (PMIX_RANK) published no world size"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateWorld(tc.dp, tc.l)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			if tc.mismatch {
				require.ErrorIs(t, err, ErrWorldMismatch)
			} else {
				require.NotErrorIs(t, err, ErrWorldMismatch)
			}
		})
	}
}

// FuzzDetect: whatever the launcher variables hold, Detect either errors naming
// one of them or returns a launch whose fields are in range.
func FuzzDetect(f *testing.F) {
	f.Add("0", "1", "0", "", "", "")
	f.Add("3", "4", "1", "", "", "")
	f.Add("", "", "", "2", "", "")
	f.Add("", "", "", "", "1", "2")
	f.Add("x", "-1", "9", "1", "a", "")
	f.Fuzz(func(t *testing.T, ompiRank, ompiSize, ompiLocal, pmixRank, pmiRank, pmiSize string) {
		env := map[string]string{
			EnvOMPIRank: ompiRank, EnvOMPISize: ompiSize, EnvOMPILocalRank: ompiLocal,
			EnvPMIxRank: pmixRank, EnvPMIRank: pmiRank, EnvPMISize: pmiSize,
		}
		l, err := Detect(envOf(env))
		if err != nil {
			require.Equal(t, Launch{}, l)
			named := false
			for k := range env {
				named = named || strings.Contains(err.Error(), k)
			}
			require.True(t, named, "error names no variable: %v", err)
			return
		}
		if !l.Launched {
			require.Equal(t, Launch{}, l)
			require.Empty(t, ompiRank+pmixRank+pmiRank)
			return
		}
		require.NotEmpty(t, env[l.Source])
		require.GreaterOrEqual(t, l.Rank, 0)
		require.True(t, l.Size == Unknown || l.Size >= 1)
		if l.Size != Unknown {
			require.Less(t, l.Rank, l.Size)
			require.NoError(t, ValidateWorld(l.Size, l))
		}
		require.True(t, l.LocalRank == Unknown || l.LocalRank >= 0)
	})
}
