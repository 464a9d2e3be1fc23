package sampling

import "math"

// expNeg returns e^x for x <= 0 in float32 with a relative error below
// about 3e-7, and 0 where the result would be subnormal (x < expMin) or x is
// -Inf. Sample calls it once per vocabulary entry, where math.Exp's float64
// precision costs several times more and buys nothing: weights only feed
// float64 sums and a comparison with a uniform draw.
func expNeg(x float32) float32 {
	if !(x >= expMin) { // also catches -Inf and NaN
		return 0
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693145751953125 // ln 2 split so n*ln2hi is exact in float32
		ln2lo = 1.42860682030941723212e-6
	)
	// n = round(x / ln 2) for x <= 0; conversion truncates toward zero.
	n := int32(x*log2e - 0.5)
	fn := float32(n)
	r := x - fn*ln2hi - fn*ln2lo // |r| <= ln2/2
	// Taylor series to degree 6: truncation error < 1.2e-7 for |r| <= ln2/2.
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	// 2^n with n in [-126, 0] is a normal float32.
	return p * math.Float32frombits(uint32(n+127)<<23)
}

// expMin is the smallest x with e^x a normal float32 (ln 2^-126 rounded up).
const expMin = -87.33654
