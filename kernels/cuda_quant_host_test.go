package kernels

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/quant"
)

// quantHostShim lets the device decoders of quant.cu compile as host C++:
// no-op CUDA qualifiers, the _rn intrinsics as plain float operations (the
// harness is built with -ffp-contract=off, so they round as the device's
// do) and an exact f16 → f32 conversion standing in for cvt.f32.f16.
const quantHostShim = `#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#define __device__
#define __forceinline__ inline
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float ts_f16_to_f32(unsigned short h) {
	const unsigned s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float v;
	if (e == 31) {
		const uint32_t b = (s << 31) | 0x7f800000u | (m << 13);
		std::memcpy(&v, &b, 4);
		return v;
	}
	v = e == 0 ? std::ldexp((float)m, -24) : std::ldexp((float)(m | 0x400), (int)e - 25);
	return s ? -v : v;
}
`

// quantHostMain decodes every element of a row file (argv: type id, file,
// cols) with the type's ts_<type>_at and writes the float32 bits to stdout.
const quantHostMain = `
int main(int argc, char **argv) {
	if (argc != 4)
		return 2;
	const int type = std::atoi(argv[1]), cols = std::atoi(argv[3]);
	FILE *f = std::fopen(argv[2], "rb");
	if (!f)
		return 3;
	std::vector<unsigned char> row(1 << 20);
	const size_t n = std::fread(row.data(), 1, row.size(), f);
	std::fclose(f);
	if (n == 0)
		return 5;
	float (*at)(const unsigned char *, int) = 0;
	switch (type) {
	case 2: at = ts_q4_0_at; break;
	case 3: at = ts_q4_1_at; break;
	case 6: at = ts_q5_0_at; break;
	case 7: at = ts_q5_1_at; break;
	case 10: at = ts_q2_k_at; break;
	case 11: at = ts_q3_k_at; break;
	case 12: at = ts_q4_k_at; break;
	case 13: at = ts_q5_k_at; break;
	case 14: at = ts_q6_k_at; break;
	default: return 4;
	}
	for (int c = 0; c < cols; c++) {
		const float v = at(row.data(), c);
		std::fwrite(&v, 4, 1, stdout);
	}
	return 0;
}
`

// The decoders exactly as quant.cu writes them, built for the host, decode
// random blocks of every block type to internal/quant's float32 bit for bit:
// the kernel text itself is checked on machines without a GPU (the Go mirror
// CUDAQuantAt is checked separately; a GPU test checks the device's build).
// Skipped where no C++ compiler is installed.
func TestCUDAQuantSourceOnHost(t *testing.T) {
	cxx, err := exec.LookPath("c++")
	if err != nil {
		t.Skipf("no host C++ compiler (c++ on PATH), skipping the host build of quant.cu: %v", err)
	}
	src, err := cudaFS.ReadFile("quant.cu")
	require.NoError(t, err)
	// The decoders are everything before the kernels.
	const marker = "// The weight dequantisers"
	i := strings.Index(string(src), marker)
	require.Positive(t, i, "quant.cu lacks the marker %q", marker)
	dir := t.TempDir()
	cpp, bin := filepath.Join(dir, "quant_host.cpp"), filepath.Join(dir, "quant_host")
	require.NoError(t, os.WriteFile(cpp, []byte(quantHostShim+"#line 1 \"quant.cu\"\n"+string(src[:i])+quantHostMain), 0o644))
	out, err := exec.Command(cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-o", bin, cpp).CombinedOutput()
	require.NoError(t, err, "host build of quant.cu's decoders: %s", out)
	for _, dt := range Types {
		if dt.BlockElems() <= 1 || dt == Q8_0 {
			continue
		}
		t.Run(dt.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(dt), 11))
			cols := 16 * dt.BlockElems()
			row := randQuantRows(r, dt, 1, cols)
			want := make([]float32, cols)
			require.NoError(t, quant.Dequantize(quant.Type(dt), row, want))
			file := filepath.Join(dir, dt.String()+".bin")
			require.NoError(t, os.WriteFile(file, row, 0o644))
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, strconv.Itoa(int(dt)), file, strconv.Itoa(cols))
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "harness: %s", stderr.String())
			require.Equal(t, 4*cols, stdout.Len())
			for c, w := range want {
				got := binary.LittleEndian.Uint32(stdout.Bytes()[4*c:])
				require.Equal(t, math.Float32bits(w), got, "%v element %d: want %g, got %g", dt, c, w, math.Float32frombits(got))
			}
		})
	}
}
