package algo

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/floodgate/floodgate"
)

// traceInstants returns n increasing arrival instants (Unix ns, some shared
// by several arrivals) for a bucket refilling one unit every per/r. Ties are
// where float and exact arithmetic part ways: x/time/rate's tokens are a
// float64, and it admits a request whose missing tokens amount to less than
// one nanosecond of refill (its wait is truncated to 0 ns). Its decisions
// can therefore differ from exact ones only when some difference between
// two arrival instants is within a nanosecond or two of a whole number of
// emission intervals — the only way its token count can land on or next to
// an integer. We rule that out: the instants' residues modulo T = per/r,
// kept exactly as t·r mod per (in 1/r ns), are at least 4 ns apart
// (circularly). Float error on the remaining margin of ≥ 4 ns out of an
// interval of ≥ 1 ms is below 1e-9 tokens, so both must agree exactly.
func traceInstants(rng *rand.Rand, n int, r int64, per time.Duration) []int64 {
	perU := uint64(per)
	slot := uint64(4 * r)  // 4 ns in units of 1/r ns
	slots := perU/slot + 1 // the last one may be narrower
	used := make(map[uint64]bool)
	free := func(t int64) (uint64, bool) {
		res := (uint64(t) % perU) * uint64(r) % perU // t·r mod per
		b := res / slot
		for d := range uint64(5) { // b-2 … b+2, circularly
			if used[(b+slots+d-2)%slots] {
				return 0, false
			}
		}
		return b, true
	}
	t := int64(1_700_000_000) * int64(time.Second)
	out := make([]int64, 0, n)
	for len(out) < n {
		// Mostly gaps around the emission interval, sometimes long pauses,
		// sometimes several arrivals at one instant.
		gap := rng.Int64N(2 * int64(per) / r)
		if rng.IntN(50) == 0 {
			gap = rng.Int64N(20 * int64(per))
		}
		cand := t + 1 + gap
		b, ok := free(cand)
		if !ok {
			continue
		}
		used[b] = true
		t = cand
		for range 1 + rng.IntN(3) {
			if len(out) < n {
				out = append(out, t)
			}
		}
	}
	return out
}

func TestDifferentialXTimeRate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rate  int64
		per   time.Duration
		burst int64
	}{
		{3, time.Second, 5},
		{5, time.Second, 10},
		{7, time.Second, 1},
		{100, time.Second, 20},
		{1000, time.Second, 50},
		{7, time.Minute, 4},
		{13, 3 * time.Second, 13},
	}
	for ci, c := range cases {
		rng := rand.New(rand.NewPCG(uint64(ci), 42))
		p := mustCompile(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: c.rate, Per: c.per, Burst: c.burst})
		lim := rate.NewLimiter(rate.Limit(float64(c.rate)/c.per.Seconds()), int(c.burst))
		var s State
		instants := traceInstants(rng, 12_000, c.rate, c.per)
		allowed := 0
		for i, now := range instants {
			cost := 1 + rng.Int64N(c.burst)
			if rng.IntN(4) == 0 {
				cost = 1
			}
			if rng.IntN(200) == 0 {
				cost = c.burst + 1 // never fits: both refuse
			}
			d, err := p.Decide(&s, Request{Now: now, Cost: cost})
			if err != nil && !errors.Is(err, floodgate.ErrNeverFits) {
				t.Fatalf("case %d arrival %d: %v", ci, i, err)
			}
			want := lim.AllowN(time.Unix(0, now), int(cost))
			if d.Allowed != want {
				t.Fatalf("case %+v arrival %d (t=%d cost %d): floodgate %v, x/time/rate %v",
					c, i, now, cost, d.Allowed, want)
			}
			if d.Allowed {
				allowed++
			}
		}
		if allowed == 0 || allowed == len(instants) {
			t.Errorf("case %+v: %d of %d allowed; the trace does not exercise both outcomes", c, allowed, len(instants))
		}
	}
}
