package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// RunReservations runs the reservation tests (limiter.Reserver's Reserve
// and Settle) against the stores newStore returns, as Run does. The
// stores must implement limiter.Reserver, and limiter.Releaser for the
// test of concurrency limits.
func RunReservations(t *testing.T, newStore func(t *testing.T) limiter.Store) {
	runReservations(t, newStore, realClock{})
}

// RunReservationsClocked is RunReservations on the clock the suite gives
// the stores, as RunClocked is Run.
func RunReservationsClocked(t *testing.T, newStore func(t *testing.T, c *Clock) limiter.Store) {
	c := newClock(clockStart)
	runReservations(t, func(t *testing.T) limiter.Store { return newStore(t, c) }, c)
}

func runReservations(t *testing.T, newStore func(t *testing.T) limiter.Store, c clock) {
	tests := []struct {
		name string
		f    func(*testing.T, limiter.Store)
	}{
		{"SettleBelow", testSettleBelow},
		{"SettleAbove", testSettleAbove},
		{"SettleTwice", testSettleTwice},
		{"SettleSentAgain", testSettleSentAgain},
		{"ReserveAllOrNothing", testReserveAllOrNothing},
		{"ReserveConcurrency", testReserveConcurrency},
		{"ReserveShadow", testReserveShadow},
		{"ReservationExpiry", func(t *testing.T, s limiter.Store) { testReservationExpiry(t, s, c) }},
		{"ConcurrentReservations", testConcurrentReservations},
	}
	if !has(newStore(t), reserveOp) {
		t.Fatal("the store does not implement limiter.Reserver")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.f(t, newStore(t))
		})
	}
}

// counting are limits of 10 units of every algorithm that counts units,
// none of which refills or moves to a new window during a test.
func counting(t *testing.T) []*limiter.Rule {
	return []*limiter.Rule{
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 10}),
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.GCRA, Rate: 1, Per: hour, Burst: 10}),
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.LeakyBucket, Rate: 1, Per: hour, Burst: 10}),
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 10, Window: long}),
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.SlidingWindow, Max: 10, Window: long}),
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 10, Window: long}),
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.Quota, Max: 10, Period: floodgate.Month}),
	}
}

// reserved returns a hit reserving cost under the reservation id.
func reserved(r *limiter.Rule, k string, cost int64, id uint64) limiter.Hit {
	return limiter.Hit{Rule: r, Key: k, Cost: cost, Lease: id, Reserve: true, TTL: time.Hour}
}

// settle settles one reserved hit with its actual cost.
func settle(t testing.TB, s limiter.Store, h limiter.Hit, actual int64) limiter.Settled {
	t.Helper()
	h.Cost = actual
	out, err := settleHits(s, h)
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	return out[0]
}

// settleHits settles the reserved hits.
func settleHits(s limiter.Store, hits ...limiter.Hit) ([]limiter.Settled, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := make([]limiter.Settled, len(hits))
	err := s.(limiter.Reserver).Settle(ctx, hits, out)
	return out, err
}

// free returns the units free on h's limit and key (a peek of one unit).
func free(t testing.TB, s limiter.Store, h limiter.Hit) int64 {
	t.Helper()
	h.Cost, h.Reserve = 1, false
	d := peek(t, s, h)
	if !d.Allowed {
		return 0
	}
	return d.Remaining + 1
}

// testSettleBelow gives back exactly the difference, in what the
// reservation charged, for every algorithm that counts units; a settle at
// 0 gives back everything and one at the estimate changes nothing.
func testSettleBelow(t *testing.T, s limiter.Store) {
	for _, r := range counting(t) {
		k := key("below-" + r.Algorithm().String())
		h := reserved(r, k, 6, 0x51)
		wantAllowed(t, r.Name()+": reserve 6", must(t, s, reserveOp, h)[0], 10, 4)
		if n := free(t, s, h); n != 4 {
			t.Fatalf("%s: %d free while 6 are reserved, want 4", r.Algorithm(), n)
		}
		d := settle(t, s, h, 2)
		if !d.Found || d.Overrun != 0 || d.Remaining != 8 {
			t.Fatalf("%s: settle 2 of 6: %+v, want found, 8 free, no overrun", r.Algorithm(), d)
		}
		if n := free(t, s, h); n != 8 {
			t.Fatalf("%s: %d free after settling 2 of 6, want 8", r.Algorithm(), n)
		}
		h0 := reserved(r, k, 5, 0x52)
		must(t, s, reserveOp, h0)
		settle(t, s, h0, 0)
		h5 := reserved(r, k, 5, 0x53)
		must(t, s, reserveOp, h5)
		settle(t, s, h5, 5)
		if n := free(t, s, h); n != 3 {
			t.Fatalf("%s: %d free after a settle at 0 and one at the estimate, want 3", r.Algorithm(), n)
		}
	}
}

// testSettleAbove charges the excess as far as the limit allows and
// reports the rest as the overrun, never going below zero credit.
func testSettleAbove(t *testing.T, s limiter.Store) {
	for _, r := range counting(t) {
		k := key("above-" + r.Algorithm().String())
		h := reserved(r, k, 3, 0x61)
		must(t, s, reserveOp, h)
		d := settle(t, s, h, 5)
		if !d.Found || d.Overrun != 0 || d.Remaining != 5 {
			t.Fatalf("%s: settle 5 of 3: %+v, want 5 free, no overrun", r.Algorithm(), d)
		}
		h2 := reserved(r, k, 2, 0x62)
		must(t, s, reserveOp, h2)
		d = settle(t, s, h2, 9)
		if !d.Found || d.Overrun != 4 || d.Remaining != 0 {
			t.Fatalf("%s: settle 9 of 2 with 3 left: %+v, want 3 charged, overrun 4, nothing free", r.Algorithm(), d)
		}
		if d := peek(t, s, limiter.Hit{Rule: r, Key: k, Cost: 1}); d.Allowed {
			t.Fatalf("%s: a unit passes after the overrun: %+v", r.Algorithm(), d)
		}
	}
}

// testSettleTwice refuses a second settle of the same reservation, and a
// settle of a reservation never made; neither changes anything.
func testSettleTwice(t *testing.T, s limiter.Store) {
	for _, r := range counting(t) {
		k := key("twice-" + r.Algorithm().String())
		h := reserved(r, k, 4, 0x71)
		must(t, s, reserveOp, h)
		settle(t, s, h, 1)
		if d := settle(t, s, h, 0); d != (limiter.Settled{}) {
			t.Fatalf("%s: second settle accepted: %+v", r.Algorithm(), d)
		}
		if d := settle(t, s, h, 10); d != (limiter.Settled{}) {
			t.Fatalf("%s: third settle accepted: %+v", r.Algorithm(), d)
		}
		if d := settle(t, s, reserved(r, k, 1, 0x72), 0); d != (limiter.Settled{}) {
			t.Fatalf("%s: settle of a reservation never made accepted: %+v", r.Algorithm(), d)
		}
		if n := free(t, s, h); n != 9 {
			t.Fatalf("%s: %d free, want 9 (one unit kept by the one settle)", r.Algorithm(), n)
		}
	}
}

// testSettleSentAgain: the same settle sent again (its answer lost on the
// way) is answered as it was the first time, overrun included, and
// changes nothing; a settle of that reservation at another cost is
// refused. A concurrency reservation settled again frees no second slot.
func testSettleSentAgain(t *testing.T, s limiter.Store) {
	for _, r := range counting(t) {
		k := key("again-" + r.Algorithm().String())
		h := reserved(r, k, 4, 0x75)
		must(t, s, reserveOp, h)
		first := settle(t, s, h, 12) // 8 above the estimate, 6 left: 2 overrun
		if !first.Found || first.Overrun != 2 || first.Remaining != 0 {
			t.Fatalf("%s: settle 12 of 4 with 6 left: %+v, want found, overrun 2, nothing free", r.Algorithm(), first)
		}
		if again := settle(t, s, h, 12); again != first {
			t.Fatalf("%s: the same settle sent again: %+v, want the first answer %+v", r.Algorithm(), again, first)
		}
		if d := settle(t, s, h, 4); d != (limiter.Settled{}) {
			t.Fatalf("%s: a settle at another cost after the first: %+v, want not found", r.Algorithm(), d)
		}
		if n := free(t, s, h); n != 0 {
			t.Fatalf("%s: %d free, want 0 (settled once)", r.Algorithm(), n)
		}
	}
	c := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 1})
	k := key("again-conc")
	h1, h2, h3 := reserved(c, k, 1, 0x76), reserved(c, k, 1, 0x77), reserved(c, k, 1, 0x78)
	must(t, s, reserveOp, h1)
	settle(t, s, h1, 1)
	must(t, s, reserveOp, h2)
	if d := settle(t, s, h1, 1); !d.Found {
		t.Fatalf("the same settle of a lease sent again: %+v, want found", d)
	}
	if d := must(t, s, reserveOp, h3)[0]; d.Allowed {
		t.Fatalf("a settle sent again freed the slot another reservation holds: %+v", d)
	}
}

// testReserveAllOrNothing reserves nothing when one limit denies: the
// others are not charged and keep no reservation.
func testReserveAllOrNothing(t *testing.T, s limiter.Store) {
	a := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 10})
	b := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 5, Window: long})
	k := key("aon")
	charge(t, s, limiter.Hit{Rule: b, Key: k, Cost: 2})
	ha, hb := reserved(a, k, 5, 0x81), reserved(b, k, 4, 0x81)
	out := must(t, s, reserveOp, ha, hb)
	if out[1].Allowed {
		t.Fatalf("4 of the 3 left reserved: %+v", out)
	}
	if n := free(t, s, ha); n != 10 {
		t.Fatalf("%d free on the limit that allowed, want all 10", n)
	}
	if d := settle(t, s, ha, 0); d.Found {
		t.Fatalf("a denied reservation was kept: %+v", d)
	}
	// A plain hit beside a reserved one: both charged, only one reserved.
	hb.Reserve, hb.Cost = false, 1
	out = must(t, s, reserveOp, ha, hb)
	if !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("reserve with a plain hit: %+v", out)
	}
	if d := settle(t, s, ha, 0); !d.Found {
		t.Fatalf("settle: %+v", d)
	}
	if na, nb := free(t, s, ha), free(t, s, hb); na != 10 || nb != 2 {
		t.Fatalf("free %d and %d, want 10 (given back) and 2 (the plain hit charged)", na, nb)
	}
}

// testReserveConcurrency holds a concurrency slot from reserve to settle.
func testReserveConcurrency(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 2})
	k := key("conc")
	h1, h2, h3 := reserved(r, k, 1, 0x91), reserved(r, k, 1, 0x92), reserved(r, k, 1, 0x93)
	must(t, s, reserveOp, h1)
	must(t, s, reserveOp, h2)
	if d := must(t, s, reserveOp, h3)[0]; d.Allowed {
		t.Fatalf("third slot of 2: %+v", d)
	}
	if d := settle(t, s, h1, 7); !d.Found || d.Overrun != 0 {
		t.Fatalf("settle: %+v", d)
	}
	if d := must(t, s, reserveOp, h3)[0]; !d.Allowed {
		t.Fatalf("the settled slot was not freed: %+v", d)
	}
	if d := settle(t, s, h1, 1); d.Found {
		t.Fatalf("second settle of a lease accepted: %+v", d)
	}
}

// testReserveShadow reserves on a shadow limit when it allows, and keeps
// no reservation when it denies, without stopping the others.
func testReserveShadow(t *testing.T, s limiter.Store) {
	sh := ruletest.Shadow(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 1, Window: long})
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 5, Window: long})
	k := key("shadow")
	out := must(t, s, reserveOp, reserved(sh, k, 1, 0xa1), reserved(r, k, 1, 0xa1))
	if !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("first: %+v", out)
	}
	out = must(t, s, reserveOp, reserved(sh, k, 1, 0xa2), reserved(r, k, 1, 0xa2))
	if out[0].Allowed || !out[1].Allowed {
		t.Fatalf("second: %+v, want the shadow limit denying and the other allowing", out)
	}
	if d := settle(t, s, reserved(sh, k, 1, 0xa2), 0); d.Found {
		t.Fatalf("a shadow hit that denied kept a reservation: %+v", d)
	}
	if d := settle(t, s, reserved(r, k, 1, 0xa2), 0); !d.Found {
		t.Fatalf("settle: %+v", d)
	}
}

// testReservationExpiry lets a reservation expire: a settle afterwards is
// refused, and the estimate stays charged. The store's clock decides (the
// server's, for Redis), so the test waits for it, or moves the suite's
// Clock on: probes reserved just after the reservation are settled one at
// a time until one is refused as expired; the reservation, older, has
// expired too.
func testReservationExpiry(t *testing.T, s limiter.Store, c clock) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 1000, Window: long})
	k := key("expiry")
	h := reserved(r, k, 7, 0xb1)
	h.TTL = 100 * time.Millisecond
	must(t, s, reserveOp, h)
	const probes = 200
	for i := range probes {
		p := reserved(r, k, 1, 0xb100+uint64(i))
		p.TTL = h.TTL
		must(t, s, reserveOp, p)
	}
	expired := false
	for i := 0; i < probes && !expired; i++ {
		c.sleep(50 * time.Millisecond)
		p := reserved(r, k, 1, 0xb100+uint64(i))
		expired = !settle(t, s, p, 1).Found
	}
	if !expired {
		t.Fatalf("a reservation of 100 ms still held after %d probes of 50 ms", probes)
	}
	if d := settle(t, s, h, 0); d.Found {
		t.Fatalf("an expired reservation was settled: %+v", d)
	}
	// The estimate stays charged: 7 + the 200 probes (each charged 1,
	// settled at 1 or expired at 1).
	if n := free(t, s, h); n != 1000-7-probes {
		t.Fatalf("%d free, want %d: an expired reservation settles at its estimate", n, 1000-7-probes)
	}
}

// testConcurrentReservations has 50 goroutines reserve on a limit of 10 at
// once, each holding what it got until all have tried: exactly 10 hold a
// reservation at that instant. Then 4 are settled at 0 and 6 at 1, and a
// second round gets exactly the 4 given back.
func testConcurrentReservations(t *testing.T, s limiter.Store) {
	for _, r := range []*limiter.Rule{
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 10, Window: long}),
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 10}),
		ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 10, Window: long}),
	} {
		k := key("concres-" + r.Algorithm().String())
		var next atomic.Uint64
		round := func() []limiter.Hit {
			var mu sync.Mutex // guards held
			var held []limiter.Hit
			hammer(t, 50, 1, func(int) (bool, error) {
				h := reserved(r, k, 1, 0xc000+next.Add(1))
				out, err := apply(s, reserveOp, h)
				if err == nil && out[0].Allowed {
					mu.Lock()
					held = append(held, h)
					mu.Unlock()
				}
				return err == nil && out[0].Allowed, err
			})
			return held
		}
		held := round()
		if len(held) != 10 {
			t.Fatalf("%s: %d of 50 concurrent reservations held on a limit of 10", r.Algorithm(), len(held))
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(held))
		for i, h := range held {
			wg.Go(func() {
				h.Cost = int64(min(i/4, 1)) // 4 at 0, 6 at 1
				out, err := settleHits(s, h)
				if err == nil && !out[0].Found {
					err = fmt.Errorf("reservation %x not found", h.Lease)
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if again := round(); len(again) != 4 {
			t.Fatalf("%s: %d reservations after 4 were given back, want 4", r.Algorithm(), len(again))
		}
	}
}
