package algo

import (
	"math"

	"github.com/floodgate/floodgate"
)

// decideRate is the one core of the token bucket, GCRA, the leaky bucket
// meter and the leaky queue: the generic cell rate algorithm with
// τ' = capacity·T. State: A = TAT in ns, B = the TAT's fraction in units of
// 1/Rate ns (0 ≤ B < Rate). A zero TAT is a full bucket.
//
//	tat = max(TAT, now); new = tat + n·T; allow iff new − now ≤ τ'
//
// The token bucket's tokens are (τ' − (tat − now))/T, so "allow iff
// tokens ≥ n" is the same decision, with no float and no drift.
func (p *Params) decideRate(s *State, r Request, d *floodgate.Decision) error {
	d.Limit = p.cap
	// Every sum below stays under now + 2τ' + 2.
	if r.Now > math.MaxInt64-2*p.tau.ns-2 || r.Now < 0 {
		return ErrOverflow
	}
	now := exact{ns: r.Now}
	tat := exact{ns: s.A, rem: uint64(s.B)}
	if s.B < 0 || tat.rem >= p.den {
		tat.rem = 0 // not a state Decide wrote; keep the whole nanoseconds
	}
	if tat.less(now) {
		tat = now
	}
	ahead := tat.sub(now, p.den)
	if p.tau.less(ahead) {
		// Only a clock that jumped back (or a foreign state) puts the TAT
		// further ahead than a full burst: cap it there.
		ahead = p.tau
	}
	if r.Cost > p.cap {
		d.Remaining = p.tau.sub(ahead, p.den).units(p.den, p.per)
		d.ResetAfter = dur(ahead.ceil())
		return floodgate.ErrNeverFits
	}
	nt := p.t
	if r.Cost != 1 {
		nt, _ = mulDiv(uint64(r.Cost), p.per, p.den) // fits: Cost ≤ capacity
	}
	next := ahead.add(nt, p.den)
	if p.tau.less(next) {
		d.Remaining = p.tau.sub(ahead, p.den).units(p.den, p.per)
		d.RetryAfter = dur(next.sub(p.tau, p.den).ceil())
		d.ResetAfter = dur(ahead.ceil())
		return nil
	}
	d.Allowed = true
	d.Remaining = p.tau.sub(next, p.den).units(p.den, p.per)
	d.ResetAfter = dur(next.ceil())
	if p.alg == floodgate.LeakyQueue && !p.nodel && p.delay.less(ahead) {
		d.Delay = dur(ahead.sub(p.delay, p.den).ceil())
	}
	if !r.Peek {
		t := now.add(next, p.den)
		s.A, s.B, s.Last = t.ns, int64(t.rem), r.Now
	}
	return nil
}
