package algo

import (
	"math/bits"

	"github.com/floodgate/floodgate"
)

// HeldFull is what Held returns for a state with nothing left to give.
const HeldFull = 1 << 16

// Held returns how much of the limit's capacity the state s holds at now,
// in 1/HeldFull parts: 0 for a state that answers as a fresh key's would (a
// full bucket, a window that has ended), HeldFull for one with nothing
// left. It is what a store weighs when it must forget a key: forgetting one
// that holds 0 changes no answer, and one that holds little changes few.
//
// Held is O(1) and never allocates. It reads only the summary a decision
// leaves: the sliding log and the concurrency limit count the units of
// their last decision (A), less only when every entry has since left the
// window or expired, so they may hold less than Held says, never more. A
// quota's now is the wall clock's, as for its decisions. Params that were
// not compiled (a zero Params) hold HeldFull, the safe guess.
func (p *Params) Held(s *State, now int64) uint32 {
	switch p.alg.Family() {
	case floodgate.FamilyRate:
		ahead := s.A - now // how far the TAT runs ahead of now
		if s.A == 0 || ahead <= 0 {
			return 0
		}
		return fraction(ahead, p.tau.ns)
	case floodgate.FamilyWindow:
		if now < 0 || p.window <= 0 {
			return HeldFull
		}
		idx := now / p.window
		switch p.alg {
		case floodgate.FixedWindow:
			if s.A != idx {
				return 0
			}
			return fraction(s.B, p.max)
		case floodgate.SlidingWindow:
			var curr, prev int64
			switch idx {
			case s.A:
				curr, prev = s.B, s.C
			case s.A + 1:
				prev = s.B
			}
			curr, prev = max(curr, 0), max(prev, 0)
			// The previous window's count, weighted by the part of it the
			// sliding window still covers, rounded up as decisions do.
			hi, lo := bits.Mul64(uint64(prev), uint64(p.window-now%p.window))
			return fraction(satAdd(curr, ceilDiv128(hi, lo, uint64(p.window))), p.max)
		default: // SlidingLog
			entries, k := liveEntries(s)
			if k >= len(entries) || entries[len(entries)-1].At <= now-p.window {
				return 0
			}
			return fraction(s.A, p.max)
		}
	case floodgate.FamilyConcurrency:
		entries, k := liveEntries(s)
		// Leases are in order of expiry: the last one expires last.
		if k >= len(entries) || entries[len(entries)-1].At <= now {
			return 0
		}
		return fraction(s.A, p.max)
	case floodgate.FamilyQuota:
		if s.C == 0 || now >= s.C || now < s.B {
			return 0
		}
		return fraction(s.A, p.quotaLimit(s.B))
	}
	return HeldFull
}

// fraction returns part/whole in 1/HeldFull parts, rounded up and clamped
// to [0, HeldFull], so that it is 0 only for a part of 0 or less; a whole
// of 0 or less is full as soon as part is above 0.
func fraction(part, whole int64) uint32 {
	switch {
	case part <= 0:
		return 0
	case part >= whole:
		return HeldFull
	}
	// part < whole, so part·HeldFull/whole < HeldFull and the high word
	// of the product is below whole: Div64 cannot overflow.
	hi, lo := bits.Mul64(uint64(part), HeldFull)
	q, r := bits.Div64(hi, lo, uint64(whole))
	if r > 0 {
		q++
	}
	return uint32(q)
}
