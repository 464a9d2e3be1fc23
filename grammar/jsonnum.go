package grammar

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// cmpOp is a comparison of a number with a bound.
type cmpOp int

const (
	opGE cmpOp = iota
	opGT
	opLE
	opLT
)

func (o cmpOp) holds(cmp int) bool {
	switch o {
	case opGE:
		return cmp >= 0
	case opGT:
		return cmp > 0
	case opLE:
		return cmp <= 0
	}
	return cmp < 0
}

// decimalDigits splits a non-negative finite decimal into its integer
// digits (canonical, "0" for zero) and fraction digits (no trailing
// zeros); ok is false when r is not a finite decimal.
func decimalDigits(r *big.Rat) (intPart, frac string, ok bool) {
	if r.Sign() < 0 {
		r = new(big.Rat).Neg(r)
	}
	// A finite decimal has a denominator of the form 2^a 5^b.
	den := new(big.Int).Set(r.Denom())
	digits := 0
	for _, p := range []int64{2, 5} {
		q, m := new(big.Int), new(big.Int)
		for {
			q.QuoRem(den, big.NewInt(p), m)
			if m.Sign() != 0 {
				break
			}
			den.Set(q)
		}
	}
	if den.Cmp(big.NewInt(1)) != 0 {
		return "", "", false
	}
	// The fewest fraction digits: the smallest power of ten that the
	// denominator divides.
	for new(big.Int).Rem(pow10(digits), r.Denom()).Sign() != 0 {
		digits++
	}
	s := r.FloatString(digits)
	intPart, frac, _ = strings.Cut(s, ".")
	frac = strings.TrimRight(frac, "0")
	return intPart, frac, true
}

func pow10(n int) *big.Int { return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil) }

// numState is a state of the comparison automaton of unsigned decimal
// text against a bound.
type numState struct {
	phase int8 // 0 start, 1 int was "0", 2 int digits, 3 after '.', 4 fraction digits
	i     int16
	cmp   int8 // the comparison decided so far (int phase: of the prefix)
	j     int16
}

// unsignedCmpDFA accepts unsigned decimal text (integer part without
// leading zeros, then optionally '.' and one or more digits when
// fraction) whose value v satisfies v op c, c >= 0 a finite decimal.
func unsignedCmpDFA(op cmpOp, c *big.Rat, fraction bool) (*dfa, error) {
	ci, cf, ok := decimalDigits(c)
	if !ok {
		return nil, fmt.Errorf("bound %s is not a finite decimal", c.RatString())
	}
	L := len(ci)
	index := map[numState]int32{}
	var states []numState
	d := &dfa{}
	intern := func(s numState) int32 {
		if id, ok := index[s]; ok {
			return id
		}
		id := int32(len(states))
		index[s] = id
		states = append(states, s)
		d.states = append(d.states, dstate{})
		return id
	}
	// intResult: the comparison of the integer part once it ends.
	intResult := func(s numState) int {
		switch {
		case s.phase == 1:
			if ci == "0" {
				return 0
			}
			return -1
		case int(s.i) < L:
			return -1
		case int(s.i) > L:
			return 1
		}
		return int(s.cmp)
	}
	// fracResult: the final comparison given the fraction read so far.
	fracResult := func(s numState) int {
		if s.cmp != 0 || int(s.j) >= len(cf) {
			return int(s.cmp)
		}
		return -1 // c has more nonzero fraction digits
	}
	intern(numState{})
	for k := 0; k < len(states); k++ {
		s := states[k]
		var st dstate
		add := func(lo, hi byte, ns numState) {
			st.trans = append(st.trans, dtrans{lo, hi, intern(ns)})
		}
		switch s.phase {
		case 0:
			add('0', '0', numState{phase: 1})
			for dg := byte('1'); dg <= '9'; dg++ {
				cmp := int8(0)
				if L == 1 && ci == "0" {
					cmp = 1
				} else if dg != ci[0] {
					cmp = int8(sign(int(dg) - int(ci[0])))
				}
				add(dg, dg, numState{phase: 2, i: 1, cmp: cmp})
			}
		case 1, 2:
			if s.phase == 2 {
				for dg := byte('0'); dg <= '9'; dg++ {
					ns := numState{phase: 2, i: s.i + 1, cmp: s.cmp}
					if int(s.i) < L && s.cmp == 0 {
						ns.cmp = int8(sign(int(dg) - int(ci[s.i])))
					}
					if ns.i > int16(L)+1 {
						ns.i = int16(L) + 1
					}
					add(dg, dg, ns)
				}
			}
			res := intResult(s)
			if res == 0 && cf != "" {
				res = -1 // no fraction, and c has one
			}
			st.accept = op.holds(res)
			if fraction {
				add('.', '.', numState{phase: 3, cmp: int8(intResult(s))})
			}
		case 3, 4:
			if s.phase == 4 {
				st.accept = op.holds(fracResult(s))
			}
			for dg := byte('0'); dg <= '9'; dg++ {
				ns := numState{phase: 4, cmp: s.cmp, j: s.j + 1}
				if s.cmp == 0 {
					want := byte('0')
					if int(s.j) < len(cf) {
						want = cf[s.j]
					}
					ns.cmp = int8(sign(int(dg) - int(want)))
				}
				if int(ns.j) > len(cf) {
					ns.j = int16(len(cf))
				}
				add(dg, dg, ns)
			}
		}
		st.trans = mergeTrans(st.trans)
		d.states[k] = st
	}
	return d.trim().minimize(), nil
}

func sign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// numBound is one side of a numeric range.
type numBound struct {
	v    *big.Rat
	excl bool
}

// numberRangeDFA accepts JSON numbers written without an exponent (and
// without a fraction when integer) within [lo, hi] (nil: unbounded).
// "-0" and other negative zeros are not produced.
func numberRangeDFA(lo, hi *numBound, integer bool, b *budget) (*dfa, error) {
	plain, err := boundedDFA(lo, hi, plainForms(integer), b)
	if err != nil || integer {
		return plain, err
	}
	// Numbers (not integers) may also be written with an exponent in
	// normalized form (1e-06, 2.5E+3), as serializers write very small
	// and very large values.
	exp, err := boundedDFA(lo, hi, expForms(), b)
	if err != nil {
		return nil, err
	}
	return product(plain, exp, func(x, y bool) bool { return x || y }, b)
}

// numForms is a way of writing numbers: the unsigned texts (their
// language, the positive ones, the non-negative ones) and the comparison
// of an unsigned text with a non-negative bound.
type numForms struct {
	all, positive, nonneg *Expr
	cmp                   func(op cmpOp, c *big.Rat) (*Expr, error)
}

func plainForms(integer bool) numForms {
	frac := !integer
	intPart := Alt(Lit("0"), Seq(ByteRange('1', '9'), Star(ByteRange('0', '9'))))
	nonneg := intPart
	if frac {
		nonneg = Seq(intPart, Opt(Seq(Lit("."), Plus(ByteRange('0', '9')))))
	}
	cmp := func(op cmpOp, c *big.Rat) (*Expr, error) {
		d, err := unsignedCmpDFA(op, c, frac)
		if err != nil {
			return nil, err
		}
		return d.toExpr(), nil
	}
	positive, err := cmp(opGT, new(big.Rat))
	if err != nil {
		panic(err) // zero is a finite decimal
	}
	return numForms{all: nonneg, positive: positive, nonneg: nonneg, cmp: cmp}
}

// expForms are normalized exponent texts: one nonzero digit, an optional
// fraction, then e or E, a sign and the exponent's digits (all positive).
func expForms() numForms {
	all := Seq(ByteRange('1', '9'), Opt(Seq(Lit("."), Plus(ByteRange('0', '9')))), bytesExpr(setOf('e', 'E')), Opt(bytesExpr(setOf('+', '-'))), Plus(ByteRange('0', '9')))
	cmp := func(op cmpOp, c *big.Rat) (*Expr, error) {
		if c.Sign() == 0 {
			if op == opGE || op == opGT {
				return all, nil
			}
			return None(), nil
		}
		d, err := expCmpDFA(op, c)
		if err != nil {
			return nil, err
		}
		return d.toExpr(), nil
	}
	return numForms{all: all, positive: all, nonneg: all, cmp: cmp}
}

// boundedDFA: the signed texts of one form within [lo, hi].
func boundedDFA(lo, hi *numBound, f numForms, b *budget) (*dfa, error) {
	d, err := compileExpr(Alt(f.all, Seq(Lit("-"), f.positive)), b)
	if err != nil {
		return nil, err
	}
	for _, side := range []struct {
		b     *numBound
		lower bool
	}{{lo, true}, {hi, false}} {
		if side.b == nil {
			continue
		}
		e, err := signedCmpExpr(side.b, side.lower, f)
		if err != nil {
			return nil, err
		}
		bd, err := compileExpr(e, b)
		if err != nil {
			return nil, err
		}
		if d, err = product(d, bd, func(x, y bool) bool { return x && y }, b); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// plainNumberExpr is a JSON number without exponent whose negative form
// is never zero.
func plainNumberExpr(integer bool) *Expr {
	intPart := Alt(Lit("0"), Seq(ByteRange('1', '9'), Star(ByteRange('0', '9'))))
	u := intPart
	if !integer {
		u = Seq(intPart, Opt(Seq(Lit("."), Plus(ByteRange('0', '9')))))
	}
	positive, err := unsignedCmpDFA(opGT, new(big.Rat), !integer)
	if err != nil {
		panic(err) // zero is a finite decimal
	}
	return Alt(u, Seq(Lit("-"), positive.toExpr()))
}

// signedCmpExpr: signed text v with v >= b (lower) or v <= b (upper),
// exclusive when b.excl. Negative text is "-" and a positive magnitude.
func signedCmpExpr(b *numBound, lower bool, f numForms) (*Expr, error) {
	pos, positive, nonneg := f.cmp, f.positive, f.nonneg
	mag := new(big.Rat).Abs(b.v)
	neg := b.v.Sign() < 0
	ops := map[[2]bool]cmpOp{{true, false}: opGE, {true, true}: opGT, {false, false}: opLE, {false, true}: opLT}
	op := ops[[2]bool{lower, b.excl}]
	mirror := map[cmpOp]cmpOp{opGE: opLE, opGT: opLT, opLE: opGE, opLT: opGT}
	if lower {
		if !neg {
			// v >= c >= 0: only non-negatives
			return pos(op, mag)
		}
		// c < 0: every non-negative, and negatives with |v| <= |c|
		m, err := pos(mirror[op], mag)
		if err != nil {
			return nil, err
		}
		return Alt(nonneg, Seq(Lit("-"), intersectExpr(m, positive))), nil
	}
	if neg {
		// v <= c < 0: negatives with |v| >= |c|
		m, err := pos(mirror[op], mag)
		if err != nil {
			return nil, err
		}
		return Seq(Lit("-"), m), nil
	}
	// c >= 0: every negative, and non-negatives up to c
	m, err := pos(op, mag)
	if err != nil {
		return nil, err
	}
	return Alt(m, Seq(Lit("-"), positive)), nil
}

// intersectExpr marks an intersection to compute when compiled: both
// operands are call-free.
func intersectExpr(a, b *Expr) *Expr {
	return &Expr{op: opAnd, subs: []*Expr{a, b}}
}

// multipleDFA accepts unsigned or signed decimal text (digits, '.', '-')
// whose value is a multiple of p/10^d: the digits up to the d-th fraction
// digit form a multiple of p and every fraction digit past it is 0.
func multipleDFA(p int64, d int) *dfa {
	type key struct {
		phase int8 // 0 start (sign allowed), 1 int digits, 2 after '.', 3 fraction digits
		r     int64
		j     int
	}
	index := map[key]int32{}
	var keys []key
	out := &dfa{}
	intern := func(k key) int32 {
		if id, ok := index[k]; ok {
			return id
		}
		id := int32(len(keys))
		index[k] = id
		keys = append(keys, k)
		out.states = append(out.states, dstate{})
		return id
	}
	// final remainder once the padding zeros are appended
	pad := func(r int64, j int) int64 {
		for ; j < d; j++ {
			r = r * 10 % p
		}
		return r
	}
	intern(key{})
	for k := 0; k < len(keys); k++ {
		s := keys[k]
		var st dstate
		switch s.phase {
		case 0, 1:
			if s.phase == 0 {
				st.trans = append(st.trans, dtrans{'-', '-', intern(key{phase: 1})})
			} else {
				st.accept = pad(s.r, 0) == 0
				st.trans = append(st.trans, dtrans{'.', '.', intern(key{phase: 2, r: s.r})})
			}
			for dg := int64(0); dg <= 9; dg++ {
				st.trans = append(st.trans, dtrans{byte('0' + dg), byte('0' + dg), intern(key{phase: 1, r: (s.r*10 + dg) % p})})
			}
		case 2, 3:
			if s.phase == 3 {
				st.accept = pad(s.r, s.j) == 0
			}
			for dg := int64(0); dg <= 9; dg++ {
				if s.j >= d {
					if dg == 0 {
						st.trans = append(st.trans, dtrans{'0', '0', intern(key{phase: 3, r: s.r, j: d})})
					}
					continue
				}
				st.trans = append(st.trans, dtrans{byte('0' + dg), byte('0' + dg), intern(key{phase: 3, r: (s.r*10 + dg) % p, j: s.j + 1})})
			}
		}
		slicesSortTrans(st.trans)
		st.trans = mergeTrans(st.trans)
		out.states[k] = st
	}
	return out.trim().minimize()
}

func slicesSortTrans(t []dtrans) {
	for i := 1; i < len(t); i++ {
		for j := i; j > 0 && t[j].lo < t[j-1].lo; j-- {
			t[j], t[j-1] = t[j-1], t[j]
		}
	}
}

// maxMultipleStates bounds multipleOf's automaton (one state per
// remainder).
const maxMultipleStates = 100_000

// multipleParts writes m as p/10^d with p an integer.
func multipleParts(m *big.Rat) (int64, int, bool) {
	ip, frac, ok := decimalDigits(m)
	if !ok || m.Sign() <= 0 {
		return 0, 0, false
	}
	s := strings.TrimLeft(ip+frac, "0")
	if s == "" {
		return 0, 0, false
	}
	var p big.Int
	p.SetString(s, 10)
	if !p.IsInt64() {
		return 0, 0, false
	}
	return p.Int64(), len(frac), true
}

// expState is a state of the comparison automaton of a normalized
// exponent text M e E against a bound C×10^K (both normalized).
type expState struct {
	phase int8 // 0 start, 1 mantissa digit read, 2 after '.', 3 fraction, 4 after 'e', 5 after the sign, 6 exponent digits
	j     int16
	mcmp  int8 // mantissa digits against C's
	eneg  bool
	enz   bool  // a nonzero exponent digit was read
	en    int16 // significant exponent digits, capped at len(|K|)+1
	elex  int8  // those digits against |K|'s, lexically
}

// expCmpDFA accepts normalized exponent texts whose value v satisfies
// v op c, c > 0 a finite decimal.
func expCmpDFA(op cmpOp, c *big.Rat) (*dfa, error) {
	ci, cf, ok := decimalDigits(c)
	if !ok {
		return nil, fmt.Errorf("bound %s is not a finite decimal", c.RatString())
	}
	// Normalize c: digits without leading zeros, and its exponent K.
	digits := strings.TrimLeft(ci+cf, "0")
	K := len(ci) - 1
	if ci == "0" {
		K = -(len(cf) - len(strings.TrimLeft(cf, "0"))) - 1
	}
	digits = strings.TrimRight(digits, "0")
	kneg := K < 0
	kabs := strconv.Itoa(max(K, -K))
	if K == 0 {
		kabs = ""
	}
	index := map[expState]int32{}
	var states []expState
	out := &dfa{}
	intern := func(s expState) int32 {
		if id, ok := index[s]; ok {
			return id
		}
		id := int32(len(states))
		index[s] = id
		states = append(states, s)
		out.states = append(out.states, dstate{})
		return id
	}
	mstep := func(s expState, dg byte) expState {
		if s.mcmp == 0 {
			want := byte('0')
			if int(s.j) < len(digits) {
				want = digits[s.j]
			}
			s.mcmp = int8(sign(int(dg) - int(want)))
		}
		if int(s.j) < len(digits) {
			s.j++
		}
		return s
	}
	final := func(s expState) bool {
		m := int(s.mcmp)
		if m == 0 && int(s.j) < len(digits) {
			m = -1 // c has more nonzero digits
		}
		// E against K.
		var e int
		eZero := !s.enz
		switch {
		case eZero && K == 0:
			e = 0
		case eZero:
			e = -sign(K)
		case s.eneg != kneg && K != 0:
			e = 1
			if s.eneg {
				e = -1
			}
		case K == 0:
			e = 1
			if s.eneg {
				e = -1
			}
		default:
			// Same sign: compare magnitudes, then flip for negatives.
			switch {
			case int(s.en) < len(kabs):
				e = -1
			case int(s.en) > len(kabs):
				e = 1
			default:
				e = int(s.elex)
			}
			if s.eneg {
				e = -e
			}
		}
		if e != 0 {
			return op.holds(e)
		}
		return op.holds(m)
	}
	intern(expState{})
	for k := 0; k < len(states); k++ {
		s := states[k]
		var st dstate
		add := func(lo, hi byte, ns expState) { st.trans = append(st.trans, dtrans{lo, hi, intern(ns)}) }
		switch s.phase {
		case 0:
			for dg := byte('1'); dg <= '9'; dg++ {
				ns := mstep(s, dg)
				ns.phase = 1
				add(dg, dg, ns)
			}
		case 1, 3:
			if s.phase == 1 {
				ns := s
				ns.phase = 2
				add('.', '.', ns)
			} else {
				for dg := byte('0'); dg <= '9'; dg++ {
					add(dg, dg, mstep(s, dg))
				}
			}
			ns := s
			ns.phase = 4
			add('E', 'E', ns)
			add('e', 'e', ns)
		case 2:
			for dg := byte('0'); dg <= '9'; dg++ {
				ns := mstep(s, dg)
				ns.phase = 3
				add(dg, dg, ns)
			}
		case 4, 5, 6:
			if s.phase == 4 {
				ns := s
				ns.phase = 5
				add('+', '+', ns)
				ns.eneg = true
				add('-', '-', ns)
			}
			if s.phase == 6 {
				st.accept = final(s)
			}
			for dg := byte('0'); dg <= '9'; dg++ {
				ns := s
				ns.phase = 6
				if dg != '0' || s.enz {
					if !s.enz {
						ns.enz, ns.en, ns.elex = true, 0, 0
					}
					if int(ns.en) < len(kabs) && ns.elex == 0 {
						ns.elex = int8(sign(int(dg) - int(kabs[ns.en])))
					}
					if int(ns.en) <= len(kabs) {
						ns.en++
					}
				}
				add(dg, dg, ns)
			}
		}
		slicesSortTrans(st.trans)
		st.trans = mergeTrans(st.trans)
		out.states[k] = st
	}
	return out.trim().minimize(), nil
}
