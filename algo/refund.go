package algo

import (
	"github.com/floodgate/floodgate"
)

// Refund gives back cost units that an earlier Decide charged to s (a
// queued request whose client went away, a Cluster slot charged before a
// later one denied). The theoretical arrival time moves back by cost·T but
// never before now, so a refund can fill the bucket but never beyond full.
// State that is not Refundable is left unchanged. Last is not moved.
func (p *Params) Refund(s *State, now int64, cost int64) error {
	if cost < 1 {
		return floodgate.ErrInvalidCost
	}
	if !p.alg.Traits().Refundable {
		return nil
	}
	if cost > p.cap {
		cost = p.cap
	}
	n := exact{ns: now}
	tat := exact{ns: s.A, rem: uint64(s.B)}
	if s.B < 0 || tat.rem >= p.den {
		tat.rem = 0
	}
	if !n.less(tat) {
		return nil // already full
	}
	back, _ := mulDiv(uint64(cost), p.per, p.den) // fits: cost ≤ capacity
	if ahead := tat.sub(n, p.den); ahead.less(back) {
		tat = n
	} else {
		tat = tat.sub(back, p.den)
	}
	s.A, s.B = tat.ns, int64(tat.rem)
	return nil
}
