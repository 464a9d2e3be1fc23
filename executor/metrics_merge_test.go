package executor

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fillOnes sets every numeric leaf of v to 1 (Durations to 1ns).
func fillOnes(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fillOnes(v.Field(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			fillOnes(v.Index(i))
		}
	case reflect.Int, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint8, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float64:
		v.SetFloat(1)
	}
}

// checkDoubled asserts every numeric leaf is 2, except the paths in keep
// (maxima, ratios and the arm), which stay 1.
func checkDoubled(t *testing.T, v reflect.Value, path string, keep map[string]bool) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			checkDoubled(t, v.Field(i), path+"."+v.Type().Field(i).Name, keep)
		}
	case reflect.Array:
		for i := range v.Len() {
			checkDoubled(t, v.Index(i), path, keep)
		}
	case reflect.Int, reflect.Int64, reflect.Uint64, reflect.Float64, reflect.Uint8:
		want := 2.0
		if keep[path] {
			want = 1
		}
		var got float64
		switch v.Kind() {
		case reflect.Uint64, reflect.Uint8:
			got = float64(v.Uint())
		case reflect.Float64:
			got = v.Float()
		default:
			got = float64(v.Int())
		}
		require.Equal(t, want, got, "%s", path)
	}
}

// TestMetricsMerge: merging a snapshot into an equal one doubles every
// counter and gauge — a field added later and forgotten in Merge fails here.
func TestMetricsMerge(t *testing.T) {
	var a, b Metrics
	fillOnes(reflect.ValueOf(&a).Elem())
	fillOnes(reflect.ValueOf(&b).Elem())
	a.Merge(&b)
	keep := map[string]bool{
		".KVUsage": true, ".Programs.Accounting": true, ".Programs.AdmissionWaitMax": true,
		".StepTime.Max": true, ".StepIdle.Max": true, ".TTFT.Max": true, ".ITL.Max": true,
	}
	checkDoubled(t, reflect.ValueOf(a), "", keep)
	require.Equal(t, time.Duration(2), a.RunnerBusy)
}
