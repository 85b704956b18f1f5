package algo

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// propertyLimits is one limit of every algorithm, small enough that random
// traces hit every branch.
func propertyLimits(t testing.TB) []floodgate.Limit {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return []floodgate.Limit{
		{Name: "tb", Algorithm: floodgate.TokenBucket, Rate: 3, Per: time.Second, Burst: 5},
		{Name: "gcra", Algorithm: floodgate.GCRA, Rate: 7, Per: 2 * time.Second, Burst: 3},
		{Name: "meter", Algorithm: floodgate.LeakyBucket, Rate: 10, Per: time.Second, Burst: 1},
		{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 2, Per: time.Second, Burst: 4, Delay: 1},
		{Name: "queue-nodelay", Algorithm: floodgate.LeakyQueue, Rate: 3, Per: time.Second, Burst: 2, Delay: floodgate.NoDelay},
		{Name: "queue-burst0", Algorithm: floodgate.LeakyQueue, Rate: 5, Per: time.Second},
		{Name: "fixed", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Second},
		{Name: "log", Algorithm: floodgate.SlidingLog, Max: 10, Window: 1500 * time.Millisecond},
		{Name: "counter", Algorithm: floodgate.SlidingWindow, Max: 10, Window: time.Second},
		{Name: "counter-odd", Algorithm: floodgate.SlidingWindow, Max: 7, Window: 333 * time.Millisecond},
		{Name: "conc", Algorithm: floodgate.Concurrency, Max: 5, LeaseTTL: 2 * time.Second},
		{Name: "quota", Algorithm: floodgate.Quota, Max: 20, Period: floodgate.Day, Location: berlin,
			Offset: 15, Start: time.Date(2026, 3, 29, 12, 0, 0, 0, berlin)},
		{Name: "quota-month", Algorithm: floodgate.Quota, Max: 9, Period: floodgate.Month, AnchorDay: 31},
	}
}

func cloneState(s State) State {
	if s.Ext != nil {
		s.Ext = &Ext{Entries: slices.Clone(s.Ext.Entries)}
	}
	return s
}

func sameState(a, b State) bool {
	if a.Last != b.Last || a.A != b.A || a.B != b.B || a.C != b.C {
		return false
	}
	var ea, eb []Entry
	if a.Ext != nil {
		ea = a.Ext.Entries
	}
	if b.Ext != nil {
		eb = b.Ext.Entries
	}
	return slices.Equal(ea, eb)
}

// exactRetry reports whether RetryAfter is exact (the same cost passes at
// now+RetryAfter and not a nanosecond before) rather than a hint.
func exactRetry(a floodgate.Algorithm) bool { return a != floodgate.Concurrency }

func TestProperties(t *testing.T) {
	t.Parallel()
	steps := 4000
	if testing.Short() {
		steps = 800
	}
	for li, l := range propertyLimits(t) {
		t.Run(l.Name, func(t *testing.T) {
			p := mustCompile(t, l)
			rng := rand.New(rand.NewPCG(uint64(li), 7))
			checkTrace(t, &p, rng, steps, time.Date(2026, 3, 28, 22, 0, 0, 0, time.UTC).UnixNano())
		})
	}
}

// checkTrace replays a random trace through p and checks every invariant
// of the contract sheet at every step.
func checkTrace(t *testing.T, p *Params, rng *rand.Rand, steps int, now int64) {
	t.Helper()
	capacity := p.Capacity()
	var s State
	var lease uint64
	for i := range steps {
		switch rng.IntN(10) {
		case 0:
			now += rng.Int64N(int64(3 * time.Second))
		case 1, 2:
			// same instant
		default:
			now += rng.Int64N(int64(400 * time.Millisecond))
		}
		if p.alg == floodgate.Quota && rng.IntN(20) == 0 {
			now += rng.Int64N(int64(40 * time.Hour))
		}
		cost := 1 + rng.Int64N(min(capacity, 1<<40)+1)
		if rng.IntN(3) == 0 {
			cost = 1
		}
		if p.alg == floodgate.Concurrency && lease > 0 && rng.IntN(3) == 0 {
			before := cloneState(s)
			if err := p.Release(&s, now, 1+rng.Uint64N(lease)); err != nil {
				t.Fatalf("step %d: release: %v", i, err)
			}
			if s.A > before.A {
				t.Fatalf("step %d: release raised the in-flight sum", i)
			}
		}
		lease++
		req := Request{Now: now, Cost: cost, Lease: lease}

		// Errors: a cost below 1, time going backwards.
		for _, bad := range []int64{0, -1, -1 << 40} {
			before := cloneState(s)
			if _, err := p.Decide(&s, Request{Now: now, Cost: bad}); !errors.Is(err, floodgate.ErrInvalidCost) {
				t.Fatalf("step %d: cost %d: %v, want ErrInvalidCost", i, bad, err)
			}
			if !sameState(before, s) {
				t.Fatalf("step %d: an invalid cost changed the state", i)
			}
		}
		if s.Last > 0 {
			if _, err := p.Decide(&s, Request{Now: s.Last - 1, Cost: 1}); !errors.Is(err, floodgate.ErrTimeBackwards) {
				t.Fatalf("step %d: time backwards: %v", i, err)
			}
		}

		// A peek gives the same decision and changes nothing.
		before := cloneState(s)
		peekReq := req
		peekReq.Peek = true
		pd, perr := p.Decide(&s, peekReq)
		if !sameState(before, s) {
			t.Fatalf("step %d: a peek changed the state", i)
		}
		d, err := p.Decide(&s, req)
		if d != pd || !errors.Is(err, perr) && err != perr {
			t.Fatalf("step %d: peek %+v %v, charge %+v %v", i, pd, perr, d, err)
		}
		if d.Limit != p.limit.Max && d.Limit != capacity {
			t.Fatalf("step %d: Limit %d", i, d.Limit)
		}
		if d.Remaining < 0 || d.Remaining > capacity {
			t.Fatalf("step %d: remaining %d outside [0, %d]", i, d.Remaining, capacity)
		}
		if d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0 {
			t.Fatalf("step %d: negative duration in %+v", i, d)
		}
		if cost > capacity {
			if !errors.Is(err, floodgate.ErrNeverFits) || d.Allowed || d.RetryAfter != 0 {
				t.Fatalf("step %d: cost %d > capacity %d: %+v %v", i, cost, capacity, d, err)
			}
		} else if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed {
			if d.RetryAfter != 0 {
				t.Fatalf("step %d: allowed with RetryAfter %v", i, d.RetryAfter)
			}
			if s.Last != now {
				t.Fatalf("step %d: allowed without recording the instant", i)
			}
		} else if !sameState(before, s) {
			t.Fatalf("step %d: a denial changed the state: %+v → %+v", i, before, s)
		}
		if p.alg != floodgate.LeakyQueue && d.Delay != 0 {
			t.Fatalf("step %d: delay %v outside the leaky queue", i, d.Delay)
		}

		// RetryAfter: the same cost passes then (with no other traffic),
		// and not a nanosecond before.
		if !d.Allowed && err == nil {
			if d.RetryAfter <= 0 {
				t.Fatalf("step %d: denied with RetryAfter %v", i, d.RetryAfter)
			}
			at := now + int64(d.RetryAfter)
			probe := cloneState(s)
			if exactRetry(p.alg) {
				if pd, _ := p.Decide(&probe, Request{Now: at, Cost: cost, Peek: true}); !pd.Allowed {
					t.Fatalf("step %d: denied %+v; still denied after RetryAfter: %+v", i, d, pd)
				}
				if pd, _ := p.Decide(&probe, Request{Now: at - 1, Cost: cost, Peek: true}); pd.Allowed {
					t.Fatalf("step %d: denied %+v; allowed 1ns before RetryAfter", i, d)
				}
			} else if d.RetryAfter > maxRetryHint {
				t.Fatalf("step %d: hint %v above %v", i, d.RetryAfter, maxRetryHint)
			}
		}

		// ResetAfter: by then the key is as good as new.
		if err == nil {
			at := now + int64(d.ResetAfter)
			probe := cloneState(s)
			aged, _ := p.Decide(&probe, Request{Now: at, Cost: 1, Peek: true})
			fresh, _ := p.Decide(&State{}, Request{Now: at, Cost: 1, Peek: true})
			if aged != fresh {
				t.Fatalf("step %d: %+v; at ResetAfter the key decides %+v, a fresh one %+v", i, d, aged, fresh)
			}
		}
	}
}

func TestRetryAfterIsEarliestForCosts(t *testing.T) {
	t.Parallel()
	// Heavier costs on the windows: the sliding log's RetryAfter must skip
	// entries until enough weight has expired.
	p := mustCompile(t, floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Second})
	var s State
	for _, c := range []struct{ at, cost int64 }{{0, 3}, {sec(0.2), 3}, {sec(0.4), 4}} {
		if d, _ := p.Decide(&s, Request{Now: c.at, Cost: c.cost}); !d.Allowed {
			t.Fatalf("%+v denied", c)
		}
	}
	d, _ := p.Decide(&s, Request{Now: sec(0.5), Cost: 5})
	if d.Allowed || d.RetryAfter != 700*time.Millisecond || d.Remaining != 0 || d.ResetAfter != 900*time.Millisecond {
		t.Errorf("sliding log: %+v, want RetryAfter 700ms (the 0.2 s entry leaves at 1.2 s)", d)
	}
}

func TestSlidingWindowCounterNumbers(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, floodgate.Limit{Algorithm: floodgate.SlidingWindow, Max: 10, Window: time.Second})
	var s State
	for range 8 {
		p.Decide(&s, Request{Now: sec(0.5), Cost: 1})
	}
	// At 1.25 s: est = 8·0.75 + 0 = 6; 4 more fit.
	d, _ := p.Decide(&s, Request{Now: sec(1.25), Cost: 4})
	if !d.Allowed || d.Remaining != 0 || d.ResetAfter != 1750*time.Millisecond {
		t.Errorf("at 1.25 s: %+v", d)
	}
	// est = 6 + 4 = 10: one more needs the weight to fall by one unit, a
	// prev of 8 loses one every 125 ms.
	d, _ = p.Decide(&s, Request{Now: sec(1.25), Cost: 1})
	if d.Allowed || d.RetryAfter != 125*time.Millisecond {
		t.Errorf("at 1.25 s, one more: %+v", d)
	}
	// Cost 7 > L − curr = 6: wait for the next window and for curr = 4 to
	// decay to 3: 0.75 s + 0.25 s.
	d, _ = p.Decide(&s, Request{Now: sec(1.25), Cost: 7})
	if d.Allowed || d.RetryAfter != time.Second {
		t.Errorf("at 1.25 s, cost 7: %+v", d)
	}
}

// TestLongestLeaseDecides: a concurrency limit with the longest lease
// TTL a limit accepts decides at today's instants (an accepted TTL whose
// expiry overflowed failed every decision, and the limit's failure
// policy answered instead).
func TestLongestLeaseDecides(t *testing.T) {
	t.Parallel()
	if err := (&floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 2, LeaseTTL: floodgate.MaxLeaseTTL}).Validate(); err != nil {
		t.Fatal(err)
	}
	p := mustCompile(t, floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 2, LeaseTTL: floodgate.MaxLeaseTTL})
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var s State
	for id, want := range []bool{true, true, false} {
		d, err := p.Decide(&s, Request{Now: now, Cost: 1, Lease: uint64(id + 1)})
		if err != nil || d.Allowed != want {
			t.Fatalf("lease %d in 2100: %+v, %v; want allowed=%v", id+1, d, err, want)
		}
	}
}

func TestConcurrencyLeases(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 3, LeaseTTL: 10 * time.Second})
	var s State
	for id := uint64(1); id <= 3; id++ {
		if d, _ := p.Decide(&s, Request{Now: sec(1), Cost: 1, Lease: id}); !d.Allowed || d.Remaining != int64(3-id) {
			t.Fatalf("lease %d: %+v", id, d)
		}
	}
	d, _ := p.Decide(&s, Request{Now: sec(2), Cost: 1, Lease: 4})
	if d.Allowed || d.RetryAfter != time.Second || d.ResetAfter != 9*time.Second {
		t.Errorf("fourth: %+v", d)
	}
	// Re-acquiring a held lease does not take a second slot.
	if d, _ := p.Decide(&s, Request{Now: sec(2), Cost: 1, Lease: 2}); !d.Allowed || d.Remaining != 0 {
		t.Errorf("re-acquire: %+v", d)
	}
	// Release exactly once: the second release of the same lease is a no-op.
	for range 2 {
		if err := p.Release(&s, sec(3), 1); err != nil {
			t.Fatal(err)
		}
		if s.A != 2 {
			t.Fatalf("in flight %d after releasing lease 1, want 2", s.A)
		}
	}
	if err := p.Release(&s, sec(3), 99); err != nil || s.A != 2 {
		t.Errorf("unknown lease: %v, in flight %d", err, s.A)
	}
	if d, _ := p.Decide(&s, Request{Now: sec(3), Cost: 2, Lease: 5}); d.Allowed {
		t.Errorf("cost 2 with one slot free: %+v", d)
	}
	if d, _ := p.Decide(&s, Request{Now: sec(3), Cost: 1, Lease: 5}); !d.Allowed {
		t.Errorf("cost 1 with one slot free: %+v", d)
	}
	// A holder that died: its leases expire after the TTL.
	if d, _ := p.Decide(&s, Request{Now: sec(13), Cost: 3, Lease: 6}); !d.Allowed {
		t.Errorf("after every lease expired: %+v", d)
	}
	if err := p.Release(&s, sec(12), 6); !errors.Is(err, floodgate.ErrTimeBackwards) {
		t.Errorf("release back in time: %v", err)
	}
	tb := mustCompile(t, bucket(1, 1))
	if err := tb.Release(&State{}, 0, 1); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("release on a token bucket: %v", err)
	}
	// The default lease lifetime.
	def := mustCompile(t, floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 1})
	if d, _ := def.Decide(&State{}, Request{Now: 0, Cost: 1, Lease: 1}); d.ResetAfter != DefaultLeaseTTL {
		t.Errorf("default TTL: %+v", d)
	}
}

func TestEntriesStayBounded(t *testing.T) {
	t.Parallel()
	// A long steady overload: the log and the leases are compacted, so the
	// slice never holds more than about twice the live entries.
	for _, l := range []floodgate.Limit{
		{Algorithm: floodgate.SlidingLog, Max: 100, Window: time.Second},
		{Algorithm: floodgate.Concurrency, Max: 100, LeaseTTL: time.Second},
	} {
		p := mustCompile(t, l)
		var s State
		now := int64(0)
		for i := range 100_000 {
			now += int64(3 * time.Millisecond)
			if _, err := p.Decide(&s, Request{Now: now, Cost: 1, Lease: uint64(i + 1)}); err != nil {
				t.Fatal(err)
			}
			if n := cap(s.Ext.Entries); n > 4*int(l.Max) {
				t.Fatalf("%s: capacity %d after %d decisions", l.Algorithm, n, i+1)
			}
			if live := len(s.Ext.Entries) - int(s.C); live > int(l.Max) {
				t.Fatalf("%s: %d live entries", l.Algorithm, live)
			}
		}
	}
}
