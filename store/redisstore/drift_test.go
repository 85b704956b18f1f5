package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// driftSeeds are the seeds of TestStoresDoNotDrift: each draws one random
// limit of every algorithm and a random sequence of operations on it.
var driftSeeds = []uint64{1, 2, 3, 4, 5, 80, 82, 88, 97}

// driftAlgorithms are the algorithms TestStoresDoNotDrift draws limits of.
var driftAlgorithms = []floodgate.Algorithm{
	floodgate.TokenBucket, floodgate.GCRA, floodgate.LeakyBucket, floodgate.LeakyQueue,
	floodgate.FixedWindow, floodgate.SlidingLog, floodgate.SlidingWindow,
	floodgate.Concurrency, floodgate.Quota,
}

// driftSpan is the longest span a drawn limit has (a bucket's worth of
// time, a window, a lease): below 2^53 ns, where the script's arithmetic
// is exact (see the package documentation, Time), 90 days.
const driftSpan = 90 * day

// driftLimit draws a valid limit of algorithm a: rates from one a day to
// a billion a second, bursts of one to a million, windows of a microsecond
// to 90 days, calendar quotas in zones with DST and odd offsets.
func driftLimit(rng *rand.Rand, a floodgate.Algorithm) floodgate.Limit {
	pick := func(xs ...int64) int64 { return xs[rng.IntN(len(xs))] }
	dur := func(ds ...time.Duration) time.Duration { return ds[rng.IntN(len(ds))] }
	for {
		l := floodgate.Limit{Name: fmt.Sprintf("drift_%s", a), Algorithm: a}
		switch a.Traits().Family {
		case floodgate.FamilyRate:
			l.Rate = pick(1, 2, 3, 7, 10, 1000, 999_983, 1_000_000_000)
			l.Per = dur(time.Nanosecond, time.Microsecond, time.Millisecond, time.Second, time.Minute,
				time.Hour, day, 3*time.Second+7)
			l.Burst = pick(1, 2, 5, 10, 100, 1_000_000)
			if a == floodgate.LeakyQueue {
				l.Burst = pick(0, 1, 5, 12, 1000)
				switch rng.IntN(3) {
				case 0:
					l.Delay = floodgate.NoDelay
				case 1:
					l.Delay = rng.Int64N(l.Burst + 1)
				}
			}
			if l.Validate() != nil || time.Duration(l.Burst+1)*l.Interval() > driftSpan || l.Burst*l.Rate >= 1<<53 {
				continue
			}
		case floodgate.FamilyWindow:
			l.Max = pick(1, 2, 5, 7, 100, 1_000_000)
			if a == floodgate.SlidingLog {
				l.Max = pick(1, 2, 5, 7, 60)
			}
			l.Window = dur(time.Microsecond, 3*time.Microsecond, time.Millisecond, time.Second,
				1500*time.Millisecond, time.Minute, time.Hour, 30*day)
		case floodgate.FamilyConcurrency:
			l.Max = pick(1, 3, 10, 100)
			l.LeaseTTL = dur(0, time.Microsecond, time.Millisecond, time.Second, time.Hour, 30*day)
		case floodgate.FamilyQuota:
			l.Max = pick(1, 6, 100, 1_000_000)
			l.Period = []floodgate.Period{floodgate.Day, floodgate.Week, floodgate.Month}[rng.IntN(3)]
			l.Location = driftZone(rng)
			if l.Period == floodgate.Month && rng.IntN(2) == 0 {
				l.AnchorDay = 1 + rng.IntN(31)
			}
			if rng.IntN(3) == 0 {
				l.Start = time.Date(2026, 3, 1+rng.IntN(20), 0, 0, 0, 0, l.Location)
				l.Offset = rng.Int64N(l.Max + 1)
			}
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// driftZone draws a time zone: UTC, or one with a DST change in March, a
// quarter-hour offset or no DST at all, when this machine has them.
func driftZone(rng *rand.Rand) *time.Location {
	name := []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Kathmandu", "Australia/Lord_Howe",
		"Asia/Tokyo"}[rng.IntN(6)]
	loc, err := time.LoadLocation(name)
	if err != nil {
		return time.UTC
	}
	return loc
}

// driftStep moves the clock (Unix ns) on: not at all, by less than a
// microsecond, by up to a millisecond, up to the limit's span, to the
// instant a decision named (its wait or its reset, exactly, or a
// microsecond before), to the next boundary of a window, or by days.
func driftStep(rng *rand.Rand, l *floodgate.Limit, now int64, last floodgate.Decision) int64 {
	span := int64(l.Window)
	switch l.Algorithm.Traits().Family {
	case floodgate.FamilyRate:
		span = int64(time.Duration(l.Burst+1) * l.Interval())
	case floodgate.FamilyConcurrency:
		span = int64(l.LeaseTTL)
	case floodgate.FamilyQuota:
		span = int64(7 * day)
	}
	span = max(span, 1)
	switch rng.IntN(12) {
	case 0, 1:
		return now
	case 2:
		return now + rng.Int64N(1000)
	case 3, 4:
		return now + rng.Int64N(1_000_000)
	case 5, 6:
		return now + rng.Int64N(span+1)
	case 7:
		if last.RetryAfter > 0 {
			return max(now, now+int64(last.RetryAfter)-int64(rng.IntN(2))*1000)
		}
		return now + int64(last.ResetAfter)
	case 8:
		return now + int64(last.ResetAfter)
	case 9:
		if l.Window > 0 {
			w := int64(l.Window)
			return (now/w + 1) * w
		}
		return now + rng.Int64N(10*span+1)
	case 10:
		return now + rng.Int64N(int64(3*day))
	}
	return now + rng.Int64N(int64(40*day))
}

// TestStoresDoNotDrift is a differential test of the two copies of every
// algorithm, package algo's (the memory store) and apply.lua's (Redis):
// for each of driftSeeds and each algorithm it draws a limit and runs a
// random sequence of charges (costs of one, up to the capacity and above
// it), peeks, refunds, releases, reserves and settles (actual costs from 0
// to above the capacity) through both stores on one clock, then peeks both
// after each, and wants the same answers field by field (Allowed, Limit,
// Remaining, RetryAfter, ResetAfter, Delay, Overrun) and the same errors,
// on a standalone server and on a Cluster.
//
// The tolerance is the one Redis' TIME imposes: decisions are made at
// whole microseconds, so the memory store is given the test clock cut to
// the microsecond as well, and a step of less than a microsecond is a
// step of none for both. The limits' spans stay below 90 days, where the
// script's arithmetic is exact (TestLongSpansMatchMemstore covers longer
// ones, at multiples of 8 ns). Two differences are allowed and not drawn:
// what a call that fails with ErrNeverFits writes into out (the engine
// refuses such a cost before it asks a store), and a clock that steps
// back (the memory store's clock is monotonic and clamps an earlier
// instant to the latest one; Redis' TIME can step back, and the script
// keeps its state and counts waits by that clock: TestClockStepsBack).
func TestStoresDoNotDrift(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			rs := storeOn(t, mode)
			defer rs.testNow.Store(0)
			counts := map[string]int{}
			for _, seed := range driftSeeds {
				for _, a := range driftAlgorithms {
					rng := rand.New(rand.NewPCG(seed, uint64(a)))
					l := driftLimit(rng, a)
					t.Run(fmt.Sprintf("%d/%s", seed, a), func(t *testing.T) {
						drift(t, rs, rng, l, counts)
					})
				}
			}
			t.Logf("%d sequences, %v", len(driftSeeds)*len(driftAlgorithms), counts)
		})
	}
}

func drift(t *testing.T, rs *Store, rng *rand.Rand, l floodgate.Limit, counts map[string]int) {
	ctx := context.Background()
	r, err := limiter.NewRuleWith(l, limiter.RuleOptions{OnFailure: floodgate.FailOpen})
	if err != nil {
		t.Fatalf("rule %+v: %v", l, err)
	}
	// Ten seconds before a DST change in New York, or anywhere in 2026.
	start := time.Date(2026, 3, 8, 6, 59, 50, 0, time.UTC).UnixNano()
	if rng.IntN(2) == 0 {
		start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + rng.Int64N(int64(365*day))
	}
	now := start
	us := func() int64 { return now / 1000 }
	ms, err := memstore.New(memstore.Options{Now: func() int64 { return us() * 1000 }, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	key := fmt.Sprintf("drift%d", rng.Uint64())
	companion, err := limiter.NewRuleWith(floodgate.Limit{Name: "drift_companion", Algorithm: floodgate.FixedWindow,
		Max: 1 << 40, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Params().Capacity()
	conc := l.Algorithm == floodgate.Concurrency
	held := map[uint64]bool{}
	// settled is when each reservation was last settled, and at what
	// cost: Redis keeps what a settle did for limiter.SettledTTL on its
	// own clock, the memory store on the test's, which jumps by hours.
	type settle struct{ at, cost int64 }
	settled := map[uint64]settle{}
	var last floodgate.Decision
	var trace []string
	for step := range 80 {
		now = driftStep(rng, &l, now, last)
		if now-start > int64(300*day) { // keep within the reservations' TTL
			now = start + int64(300*day)
		}
		rs.testNow.Store(us())
		h := limiter.Hit{Rule: r, Key: key, Cost: 1, Lease: uint64(1 + rng.IntN(4))}
		op := opCharge
		switch k := rng.IntN(20); {
		case k < 3:
			h.Cost = 1 + rng.Int64N(c)
		case k < 4:
			h.Cost = c + 1 + rng.Int64N(3)
		case k < 6:
			op = opPeek
			h.Cost = 1 + rng.Int64N(c+1)
		case k < 8:
			op = opRefund
			h.Cost = 1 + rng.Int64N(c)
			if conc {
				op = opRelease
			}
		case k < 11:
			op, h.Reserve, h.TTL = opReserve, true, 10000*time.Hour
			h.Lease = uint64(10 + rng.IntN(4))
			h.Cost = 1 + rng.Int64N(c)
			if held[h.Lease] || rng.IntN(4) == 0 {
				op = opSettle
				h.Cost = []int64{0, 0, 1, rng.Int64N(c + 1), c + 1 + rng.Int64N(3)}[rng.IntN(5)]
			}
			if s, ok := settled[h.Lease]; op == opSettle && !held[h.Lease] && ok && s.cost == h.Cost && now-s.at >= int64(limiter.SettledTTL) {
				h.Cost++ // the same settle sent again once only one clock has passed SettledTTL
			}
		}
		desc := fmt.Sprintf("step %d at +%s: op %d cost %d lease %d", step,
			time.Duration(now-start), op, h.Cost, h.Lease)
		trace = append(trace, desc)
		// Every other charge or peek carries a second hit that always
		// allows, on the same subject or another (another slot, on a
		// Cluster), sometimes in a group with the first; a charge's first
		// hit is sometimes a check. The script's general path must decide
		// as its one-hit fast path does, and the store must charge the
		// same hits as the memory store.
		hits := []limiter.Hit{h}
		if (op == opCharge || op == opPeek) && rng.IntN(2) == 0 {
			hits = append(hits, limiter.Hit{Rule: companion, Key: key, Cost: 1})
			if rng.IntN(2) == 0 {
				hits[1].Key = key + "other" // another slot, on a Cluster
			}
			if rng.IntN(3) == 0 {
				hits[0].Group, hits[1].Group = 1, uint8(rng.IntN(2))
			}
		}
		if op == opCharge && rng.IntN(5) == 0 {
			hits[0].Check = true
		}
		for i := range hits {
			desc += fmt.Sprintf(" [%s check %v group %d]", hits[i].Key, hits[i].Check, hits[i].Group)
		}
		trace[len(trace)-1] = desc
		got, want := make([]floodgate.Decision, len(hits)), make([]floodgate.Decision, len(hits))
		errR := applyOp(ctx, rs, op, hits, got)
		errM := applyOp(ctx, ms, op, hits, want)
		same := true
		for i := range want {
			want[i].At = 0
			same = same && sameMarked(&got[i], &want[i]) && got[i] == want[i]
		}
		switch {
		case (errR == nil) != (errM == nil) || errors.Is(errR, floodgate.ErrNeverFits) != errors.Is(errM, floodgate.ErrNeverFits):
			counts["error"]++
			t.Errorf("limit %+v\n%s\n%s: redis error %v, memstore error %v", l, join(trace), desc, errR, errM)
			return
		case errR != nil:
			// Both refused the request (a cost above the capacity, which
			// the engine refuses before it asks a store): what they wrote
			// into out is not an answer.
		case !same:
			counts[fmt.Sprintf("op%d", op)]++
			t.Errorf("limit %+v\n%s\n%s (%d hits):\n redis    %+v\n memstore %+v", l, join(trace), desc, len(hits), got, want)
			return
		}
		switch {
		case op == opReserve && got[0].Allowed:
			held[h.Lease] = true
		case op == opSettle && got[0].Allowed && held[h.Lease]:
			delete(held, h.Lease)
			settled[h.Lease] = settle{now, h.Cost}
		}
		if op == opCharge || op == opPeek || op == opReserve {
			last = got[0]
		}
		// The state after the operation: a peek of one unit, of the limit
		// and of the companion's keys.
		ps := []limiter.Hit{{Rule: r, Key: key, Cost: 1}, {Rule: companion, Key: key, Cost: 1},
			{Rule: companion, Key: key + "other", Cost: 1}}
		got, want = make([]floodgate.Decision, len(ps)), make([]floodgate.Decision, len(ps))
		errR = applyOp(ctx, rs, opPeek, ps, got)
		errM = applyOp(ctx, ms, opPeek, ps, want)
		for i := range ps {
			want[i].At = 0
			if !sameMarked(&got[i], &want[i]) || (errR == nil) != (errM == nil) || got[i] != want[i] {
				counts["state"]++
				t.Errorf("limit %+v\n%s\nafter it, a peek of %s on %s:\n redis    %+v %v\n memstore %+v %v", l,
					join(trace), ps[i].Rule.Name(), ps[i].Key, got[i], errR, want[i], errM)
				return
			}
		}
		counts["steps"]++
	}
}

// join lists the steps of a trace, one a line.
func join(lines []string) string {
	var s string
	for _, l := range lines {
		s += "  " + l + "\n"
	}
	return s
}

// TestSlidingWindowLongWindowExact: a sliding window counter of 30 days
// decides and waits exactly as package algo does, though the previous
// window's weight, prev·(W−e), passes 2^53 (the cases TestStoresDoNotDrift
// found). A double rounded it: a request over the limit by 1/W of a unit
// passed, and a wait came out a nanosecond short of the exact one.
func TestSlidingWindowLongWindowExact(t *testing.T) {
	s := newStandalone(t)
	defer s.testNow.Store(0)
	ctx := context.Background()
	w := 720 * time.Hour
	wus := int64(w / time.Microsecond)
	t0 := 687 * wus // a window's start, in June 2026
	at := func(r *limiter.Rule, us, cost int64) floodgate.Decision {
		t.Helper()
		s.testNow.Store(us)
		out := make([]floodgate.Decision, 1)
		if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: cost}}, false, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}

	// 7,319 in a window; 52,413.717721 s into the next their weight is
	// 7,171 + 1/W, so 2,828 more fill the limit but for that 1/W, and one
	// unit more is over it, for a nanosecond.
	r := ruletest.Rule(t, floodgate.Limit{Name: "long_counter", Algorithm: floodgate.SlidingWindow, Max: 10000, Window: w})
	if d := at(r, t0, 7319); !d.Allowed {
		t.Fatalf("first charge: %+v", d)
	}
	t1 := t0 + wus + 52413717721
	if d := at(r, t1, 2828); !d.Allowed {
		t.Fatalf("second charge: %+v", d)
	}
	if d := at(r, t1, 1); d.Allowed || d.RetryAfter != time.Nanosecond {
		t.Fatalf("one unit over the limit by 1/W: %+v, want a denial for 1ns", d)
	}

	// 99 in a window; at the next one's start 51 more wait 50/99 of W,
	// 1,309,090,909,090,909.09 ns: the wait is rounded up.
	r = ruletest.Rule(t, floodgate.Limit{Name: "long_counter_wait", Algorithm: floodgate.SlidingWindow, Max: 100, Window: w})
	if d := at(r, t0, 99); !d.Allowed {
		t.Fatalf("first charge: %+v", d)
	}
	if d := at(r, t0+wus, 51); d.Allowed || d.RetryAfter != 1309090909090910 {
		t.Fatalf("51 units at the next window's start: %+v, want a denial for 1309090909090910ns", d)
	}
}

// TestNeverFitsInAGroupChargesNothing: a request one of whose hits asks
// more than its limit's capacity fails with ErrNeverFits and charges
// nothing, as on the memory store, also when that hit is in a group whose
// other hit allows (TestStoresDoNotDrift found the Redis store charging
// the other hit while it reported the error).
func TestNeverFitsInAGroupChargesNothing(t *testing.T) {
	rs := newStandalone(t)
	ms, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	ctx := context.Background()
	small := ruletest.Rule(t, floodgate.Limit{Name: "nf_small", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Hour})
	big := ruletest.Rule(t, floodgate.Limit{Name: "nf_big", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	for _, st := range []struct {
		name string
		s    limiter.Store
	}{{"redis", rs}, {"memstore", ms}} {
		for _, check := range []bool{false, true} {
			key := fmt.Sprintf("nf_%v", check)
			hits := []limiter.Hit{
				{Rule: small, Key: key, Cost: 3, Check: check, Group: 1},
				{Rule: big, Key: key, Cost: 1, Group: 1},
			}
			out := make([]floodgate.Decision, 2)
			if err := st.s.Decide(ctx, hits, false, out); !errors.Is(err, floodgate.ErrNeverFits) {
				t.Fatalf("%s, check %v: error %v, want ErrNeverFits", st.name, check, err)
			}
			if err := st.s.Decide(ctx, hits[1:], true, out[:1]); err != nil {
				t.Fatal(err)
			}
			if out[0].Remaining != 99 {
				t.Fatalf("%s, check %v: the grouped hit's limit has %d left after a peek of 1, want 99 (nothing charged)",
					st.name, check, out[0].Remaining)
			}
		}
	}
}

// sameMarked reports whether both stores' decisions say where they counted
// a charge, or neither does, and clears their marks for the comparison of
// the rest: each store counts on its own clock (the embedded store's
// nanosecond, the server's microsecond).
func sameMarked(a, b *floodgate.Decision) bool {
	same := (a.Mark == 0) == (b.Mark == 0)
	a.Mark, b.Mark = 0, 0
	return same
}
