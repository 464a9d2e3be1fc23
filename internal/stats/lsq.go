package stats

import (
	"fmt"
	"math"
)

// Fit is the result of an ordinary least-squares fit y ≈ X·Coef.
type Fit struct {
	// Coef has one coefficient per column of X.
	Coef []float64 `json:"coef"`
	// Residuals[i] = y[i] - X[i]·Coef, one per observation.
	Residuals []float64 `json:"-"`
	// RMS is √(mean residual²), in y's unit.
	RMS float64 `json:"rms"`
	// MaxAbs is the largest |residual|, in y's unit.
	MaxAbs float64 `json:"max_abs"`
	// MaxRel is the largest |residual| / |y| over observations with y ≠ 0.
	MaxRel float64 `json:"max_rel"`
	// R2 is 1 - Σresidual² / Σ(y - mean y)²; when y is constant it is 1 if
	// fitted to rounding, else 0.
	R2 float64 `json:"r2"`
}

// LeastSquares fits y ≈ X·β by minimising Σ(y - X·β)², with a Householder
// QR factorisation (better conditioned than the normal equations, which
// square the condition number: cost-model columns span 1 to 10⁶ tokens).
// x has one row per observation, each with the same number of columns;
// there must be at least as many rows as columns, and the columns must be
// linearly independent (a column that is (nearly) a combination of earlier
// ones is an error naming it). Inputs are not modified.
func LeastSquares(x [][]float64, y []float64) (Fit, error) {
	m := len(x)
	if m == 0 {
		return Fit{}, fmt.Errorf("stats: least squares: %w", ErrEmpty)
	}
	if len(y) != m {
		return Fit{}, fmt.Errorf("stats: least squares: %d rows of X but %d values of y", m, len(y))
	}
	n := len(x[0])
	if n == 0 {
		return Fit{}, fmt.Errorf("stats: least squares: X has no columns")
	}
	if m < n {
		return Fit{}, fmt.Errorf("stats: least squares: %d observations cannot determine %d coefficients", m, n)
	}
	// a is X column-major (a[j] is column j), so a reflection updates
	// contiguous memory.
	a := make([][]float64, n)
	for j := range a {
		a[j] = make([]float64, m)
	}
	for i, row := range x {
		if len(row) != n {
			return Fit{}, fmt.Errorf("stats: least squares: row %d has %d columns, row 0 has %d", i, len(row), n)
		}
		for j, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return Fit{}, fmt.Errorf("stats: least squares: X[%d][%d] is %v", i, j, v)
			}
			a[j][i] = v
		}
		if math.IsNaN(y[i]) || math.IsInf(y[i], 0) {
			return Fit{}, fmt.Errorf("stats: least squares: y[%d] is %v", i, y[i])
		}
	}
	colNorm := make([]float64, n)
	for j := range a {
		colNorm[j] = norm2(a[j])
	}
	b := append([]float64(nil), y...)
	v := make([]float64, m)
	for k := 0; k < n; k++ {
		col := a[k][k:]
		nrm := norm2(col)
		// Rank test relative to the column's own scale, so a column of
		// token counts is not judged against a column of ones.
		if nrm <= 1e-10*colNorm[k] || nrm == 0 {
			return Fit{}, fmt.Errorf("stats: least squares: column %d is linearly dependent on columns 0..%d", k, k-1)
		}
		alpha := -math.Copysign(nrm, col[0])
		vk := v[:m-k]
		copy(vk, col)
		vk[0] -= alpha
		vv := dot(vk, vk)
		for j := k; j < n; j++ {
			reflect(a[j][k:], vk, vv)
		}
		reflect(b[k:], vk, vv)
		a[k][k] = alpha
	}
	// Back substitution: R·β = (Qᵀy)[:n], R upper triangular in a.
	coef := make([]float64, n)
	for k := n - 1; k >= 0; k-- {
		s := b[k]
		for j := k + 1; j < n; j++ {
			s -= a[j][k] * coef[j]
		}
		coef[k] = s / a[k][k]
	}
	return summarise(x, y, coef), nil
}

// reflect applies the Householder reflection I - 2vvᵀ/(vᵀv) to w in place.
func reflect(w, v []float64, vv float64) {
	s := 2 * dot(v, w) / vv
	for i := range w {
		w[i] -= s * v[i]
	}
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// norm2 is the Euclidean norm, scaled so squares cannot overflow.
func norm2(a []float64) float64 {
	scale := 0.0
	for _, v := range a {
		scale = math.Max(scale, math.Abs(v))
	}
	if scale == 0 {
		return 0
	}
	s := 0.0
	for _, v := range a {
		s += (v / scale) * (v / scale)
	}
	return scale * math.Sqrt(s)
}

// summarise computes the residual statistics of coef on (x, y).
func summarise(x [][]float64, y []float64, coef []float64) Fit {
	f := Fit{Coef: coef, Residuals: make([]float64, len(y))}
	mean := 0.0
	for _, v := range y {
		mean += v
	}
	mean /= float64(len(y))
	ss, tot := 0.0, 0.0
	for i, row := range x {
		r := y[i] - dot(row, coef)
		f.Residuals[i] = r
		ss += r * r
		tot += (y[i] - mean) * (y[i] - mean)
		f.MaxAbs = math.Max(f.MaxAbs, math.Abs(r))
		if y[i] != 0 {
			f.MaxRel = math.Max(f.MaxRel, math.Abs(r/y[i]))
		}
	}
	f.RMS = math.Sqrt(ss / float64(len(y)))
	scale := 0.0
	for _, v := range y {
		scale = math.Max(scale, math.Abs(v))
	}
	switch {
	case tot > 1e-24*scale*scale*float64(len(y)):
		f.R2 = 1 - ss/tot
	case f.MaxAbs <= 1e-12*scale:
		// Constant y fitted to rounding: R² is 0/0; call it a perfect fit.
		f.R2 = 1
	}
	return f
}
