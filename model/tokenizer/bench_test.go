package tokenizer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var benchText = strings.Repeat("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ", 4)

func BenchmarkEncodeSPM(b *testing.B) {
	tk := stories(b)
	b.SetBytes(int64(len(benchText)))
	b.ReportAllocs()
	for b.Loop() {
		tk.Encode(benchText, true)
	}
}

func BenchmarkDecoderAdd(b *testing.B) {
	tk := stories(b)
	ids := tk.Encode(benchText, true)
	b.ReportAllocs()
	d := tk.NewDecoder()
	i := 0
	for b.Loop() {
		d.Add(ids[i%len(ids)])
		i++
	}
}

// benchMixed is prose, code, numbers and CJK, about 1 KB.
var benchMixed = strings.Repeat("The year 1999 was 25 years ago; it's a fact. "+
	"func main() {\n\tfmt.Println(\"hi\")\n}\n東京は日本の首都です。 👍🏽\n", 8)

// BenchmarkEncodeHF encodes the same text again and again (warm: its
// words are in the word cache, as a repeated system prompt's are) and
// with the cache emptied before each encoding (cold: every word merged).
func BenchmarkEncodeHF(b *testing.B) {
	for _, name := range []string{"llama3", "qwen3"} {
		for _, cold := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/cold=%v", name, cold), func(b *testing.B) {
				tk, _ := hfFixture(b, name)
				b.SetBytes(int64(len(benchMixed)))
				b.ReportAllocs()
				for b.Loop() {
					if cold {
						tk.words.Purge()
					}
					tk.Encode(benchMixed, false)
				}
			})
		}
	}
}

func BenchmarkFromHFJSON(b *testing.B) {
	doc, err := loadFixture("llama3/tokenizer.json.gz")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		_, err := FromHFJSON(doc, nil)
		require.NoError(b, err)
	}
}
