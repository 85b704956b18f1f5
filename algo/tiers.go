package algo

// Design note: criticality tiers.
//
// Rule (trunk reservation, as telephone exchanges kept lines for priority
// calls, and Stripe keeps workers for critical requests): tiers are ordered,
// 0 the most critical. Tier t reserves a share of the capacity that the
// tiers below it cannot take, so a request of tier t is admitted only while
// the requests in flight, of every tier, are fewer than its ceiling:
//
//	ceiling(t) = max(C − ⌈C · (reserve(0) + … + reserve(t−1))⌉, 1)
//
// for C ≥ 1. The floor of 1 is for caps so small that the reserves above
// a tier take all of them (a cap of 1 with any reserve above the tier, or
// reserves adding up to nearly all of a small cap): that tier's
// request is still admitted when nothing is in flight. Without it, a
// route whose traffic is all of that tier would forward nothing, and an
// adaptive capacity, which learns only from the requests admitted, would
// stay at such a cap for good. At a cap that small no reserve can be kept
// without starving the tiers below.
//
// The ceilings fall from the most critical tier to the least, which gives
// the three properties the tests check: a tier never takes capacity
// reserved for a tier above it (after any admission of tier t that found a
// request in flight, what is free covers the reserves above t); as load rises the lowest tier is refused
// first, and whenever a tier is refused every tier below it is too; and a
// tier is refused only while the tiers at and above it hold its own
// reserve (the tiers below are held to the next ceiling), so the most
// critical tier is always admitted while its reserve is not full.
//
// It is non-preemptive: a request in flight is never evicted. So refusals
// fall only in the lowest tier with traffic when the tiers above it fit in
// their reserves; a reserve is the headroom a tier keeps for its bursts.
// The price of a reserve is that it stays idle while its tier is quiet.
//
// Capacity is a number of requests in flight: a fixed concurrency limit, or
// Adaptive.Limit. When the capacity shrinks, requests already in flight
// above the new ceilings finish normally and no new one of those tiers is
// admitted until they have.

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/floodgate/floodgate"
)

// partsPerShare is the resolution of a reserved share: one part per
// million.
const partsPerShare = 1_000_000

// Tiers decides the admission of requests by criticality against a
// capacity. The zero value has a single tier that reserves nothing. A Tiers
// is immutable and safe for concurrent use.
type Tiers struct {
	above []int64 // above[t]: the parts reserved by the tiers above t
}

// NewTiers returns the tiers whose shares of the capacity are reserve, most
// critical first: reserve[t] is the share that tier t keeps from the tiers
// below it. Shares are in [0, 1], counted in millionths, and must leave
// something to the lowest tier; the lowest tier, with no tier below it,
// reserves nothing. A bad share is an error wrapping
// floodgate.ErrInvalidLimit.
func NewTiers(reserve ...float64) (Tiers, error) {
	if len(reserve) == 0 {
		return Tiers{}, nil
	}
	if len(reserve) > math.MaxInt32 {
		return Tiers{}, fmt.Errorf("algo: tiers: %w: %d tiers", floodgate.ErrInvalidLimit, len(reserve))
	}
	above := make([]int64, len(reserve))
	var sum int64
	for t, r := range reserve {
		if !(r >= 0 && r <= 1) {
			return Tiers{}, fmt.Errorf("algo: tiers: %w: tier %d reserves %v, not a share in [0, 1]", floodgate.ErrInvalidLimit, t, r)
		}
		if t == len(reserve)-1 && r != 0 {
			return Tiers{}, fmt.Errorf("algo: tiers: %w: the lowest tier (%d) reserves %v, but has no tier below it", floodgate.ErrInvalidLimit, t, r)
		}
		above[t] = sum
		sum += int64(math.Round(r * partsPerShare))
	}
	if sum >= partsPerShare {
		return Tiers{}, fmt.Errorf("algo: tiers: %w: the reserves add up to %v of the capacity, leaving nothing to the lowest tier", floodgate.ErrInvalidLimit, float64(sum)/partsPerShare)
	}
	return Tiers{above: above}, nil
}

// Len returns the number of tiers (at least 1).
func (ts Tiers) Len() int { return max(len(ts.above), 1) }

// tier maps t to a tier that exists: one out of range is the lowest.
func (ts Tiers) tier(t int) int {
	if t < 0 || t >= len(ts.above) {
		return len(ts.above) - 1
	}
	return t
}

// Ceiling returns how many requests, of every tier, may be in flight for a
// request of tier t to be admitted: a request of tier t is admitted while
// fewer than Ceiling(t, capacity) are. It is at least 1 for a capacity of
// 1 or more (see the design note). A tier out of range is the lowest; a
// capacity below 0 is 0.
func (ts Tiers) Ceiling(t, capacity int) int {
	if capacity <= 0 {
		return 0
	}
	if len(ts.above) == 0 {
		return capacity
	}
	parts := ts.above[ts.tier(t)]
	// ⌈capacity · parts / partsPerShare⌉ in 128 bits: exact for any int.
	hi, lo := bits.Mul64(uint64(capacity), uint64(parts))
	q, r := bits.Div64(hi, lo, partsPerShare) // hi < partsPerShare: parts < partsPerShare
	if r != 0 {
		q++
	}
	return max(capacity-int(q), 1)
}

// Admit reports whether a request of tier t may start with inflight
// requests of every tier in flight, against capacity.
func (ts Tiers) Admit(t, capacity, inflight int) bool {
	return inflight < ts.Ceiling(t, capacity)
}
