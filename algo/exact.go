package algo

import (
	"math"
	"math/bits"
)

// An instant or a span of time kept exactly: ns + rem/den nanoseconds, with
// 0 ≤ rem < den. The rate algorithms use den = Rate, so that the emission
// interval Per/Rate, which is rarely a whole number of nanoseconds, adds up
// without drift.
type exact struct {
	ns  int64
	rem uint64
}

// mulDiv returns a·b/den as an exact value, and false if it does not fit in
// an int64 number of nanoseconds.
func mulDiv(a, b, den uint64) (exact, bool) {
	hi, lo := bits.Mul64(a, b)
	if hi >= den {
		return exact{}, false
	}
	q, r := bits.Div64(hi, lo, den)
	if q > math.MaxInt64 {
		return exact{}, false
	}
	return exact{ns: int64(q), rem: r}, true
}

// add returns x+y; both have the same denominator den.
func (x exact) add(y exact, den uint64) exact {
	ns := x.ns + y.ns
	rem := x.rem + y.rem
	if rem >= den || rem < x.rem {
		rem -= den
		ns++
	}
	return exact{ns: ns, rem: rem}
}

// sub returns x-y; both have the same denominator den.
func (x exact) sub(y exact, den uint64) exact {
	ns := x.ns - y.ns
	rem := x.rem
	if rem < y.rem {
		rem += den
		ns--
	}
	return exact{ns: ns, rem: rem - y.rem}
}

// less reports x < y.
func (x exact) less(y exact) bool {
	return x.ns < y.ns || (x.ns == y.ns && x.rem < y.rem)
}

// ceil returns x rounded up to whole nanoseconds.
func (x exact) ceil() int64 {
	if x.rem > 0 {
		return x.ns + 1
	}
	return x.ns
}

// units returns ⌊x/(per/den)⌋ = ⌊(x.ns·den + x.rem)/per⌋ for x ≥ 0: how many
// whole emission intervals fit in x. It saturates at MaxInt64.
func (x exact) units(den, per uint64) int64 {
	if x.ns < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(x.ns), den)
	var c uint64
	lo, c = bits.Add64(lo, x.rem, 0)
	hi += c
	if hi == 0 {
		// The common case: the span fits in 64 bits, and a 64-bit division
		// is several times cheaper than a 128-bit one.
		return int64(lo / per)
	}
	if hi >= per {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, per)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}
