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

// TestReservationsMatchMemstore runs the same random reserves, settles,
// charges and peeks, of every algorithm, through the store and through the
// memory store (whose settle is package algo's RefundAt and ChargeUpTo) at
// the same fixed instants, and wants the same answers: the given back
// units, the excess charged and the overrun, the units free. Time moves by
// up to seconds between steps, so that settles find the windows, entries
// and periods they charged passed.
func TestReservationsMatchMemstore(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			for _, r := range conformLimits(t) {
				t.Run(r.Name(), func(t *testing.T) { matchMemstore(t, s, r) })
			}
		})
	}
}

func matchMemstore(t *testing.T, s *Store, r *limiter.Rule) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(len(r.ID())), 14))
	now := conformStart(r)
	mem, err := memstore.New(memstore.Options{Now: func() int64 { return now * 1000 }, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	key := fmt.Sprintf("match%d", rng.Uint64())
	c := r.Params().Capacity()
	held := map[uint64]bool{} // reservations made and not yet settled
	// settled is when each reservation was last settled, and at what
	// cost: Redis keeps what a settle did for limiter.SettledTTL on its
	// own clock, the memory store on the test's, which jumps by hours.
	type settle struct{ at, cost int64 }
	settled := map[uint64]settle{}
	counts := map[string]int{}
	steps := 400
	if testing.Short() {
		steps = 150
	}
	for step := range steps {
		switch rng.IntN(4) {
		case 0: // same instant
		case 1:
			now += rng.Int64N(1000)
		case 2:
			now += rng.Int64N(300_000)
		default:
			now += rng.Int64N(1_500_000)
		}
		if r.Algorithm() == floodgate.Quota && rng.IntN(4) == 0 {
			now += rng.Int64N(12 * 3600_000_000) // cross day boundaries
		}
		s.testNow.Store(now)
		id := uint64(1 + rng.IntN(6))
		// Reservations outlive the test on both clocks (the memory store's
		// is the test's, which jumps by hours).
		h := limiter.Hit{Rule: r, Key: key, Cost: 1 + rng.Int64N(c), Lease: id, Reserve: true, TTL: 10000 * time.Hour}
		op := opReserve
		switch rng.IntN(7) {
		case 0, 1, 2:
			op = opSettle
			h.Cost = rng.Int64N(c + 3) // 0, and sometimes above the capacity
		case 3:
			op, h.Reserve, h.Cost = opCharge, false, 1
			h.Lease = 100 + id
		case 4:
			op, h.Reserve, h.Cost = opPeek, false, 1
		}
		if op == opReserve && held[id] {
			op, h.Cost = opSettle, rng.Int64N(2*c)
		}
		if last, ok := settled[id]; op == opSettle && !held[id] && ok && h.Cost == last.cost &&
			now-last.at >= limiter.SettledTTL.Microseconds() {
			h.Cost++ // the same settle sent again once only one clock has passed SettledTTL
		}
		hits := []limiter.Hit{h}
		got, want := make([]floodgate.Decision, 1), make([]floodgate.Decision, 1)
		errGot := applyOp(ctx, s, op, hits, got)
		errWant := applyOp(ctx, mem, op, []limiter.Hit{h}, want)
		desc := fmt.Sprintf("step %d at %s: op %d cost %d reservation %d", step,
			time.UnixMicro(now).UTC().Format("15:04:05.000000"), op, h.Cost, id)
		if (errGot == nil) != (errWant == nil) {
			t.Fatalf("%s: error %v, memstore %v", desc, errGot, errWant)
		}
		want[0].At = 0
		g, w := got[0], want[0]
		if !sameMarked(&g, &w) || g != w {
			t.Fatalf("%s:\n redis    %+v\n memstore %+v", desc, got[0], want[0])
		}
		switch {
		case op == opReserve && g.Allowed:
			held[id] = true
			counts["reserved"]++
		case op == opReserve:
			counts["denied"]++
			if rng.IntN(2) == 0 {
				now += (int64(g.RetryAfter) + 999) / 1000 // wait until it fits
			}
		case op == opSettle && g.Allowed && !held[id]:
			counts["sent again"]++
		case op == opSettle && g.Allowed:
			delete(held, id)
			settled[id] = settle{now, h.Cost}
			switch {
			case g.Overrun > 0:
				counts["overrun"]++
			default:
				counts["settled"]++
			}
		case op == opSettle:
			counts["unknown"]++
		}
	}
	t.Logf("%v", counts)
	for _, what := range []string{"reserved", "denied", "settled", "unknown"} {
		if counts[what] == 0 {
			t.Fatalf("%v: the sequence has no %s reservation", counts, what)
		}
	}
	if r.Algorithm() != floodgate.Concurrency && counts["overrun"] == 0 {
		t.Fatalf("%v: the sequence has no overrun", counts)
	}
}

// TestReserveClusterRefundsRecords: on a Cluster, a reservation whose
// later slot denies gives back the earlier slot's charge and deletes its
// settle record there, so that the reservation cannot be settled; one that
// allows in every slot is settled slot by slot.
func TestReserveClusterRefundsRecords(t *testing.T) {
	s := newCluster(t)
	ctx := context.Background()
	tpm := ruletest.Rule(t, floodgate.Limit{Name: "res_tpm", Algorithm: floodgate.TokenBucket, Rate: 1,
		Per: time.Hour, Burst: 100})
	day := ruletest.Rule(t, floodgate.Limit{Name: "res_day", Algorithm: floodgate.FixedWindow, Max: 50,
		Window: 1000 * time.Hour})
	a, b := "key-a", "org-b"
	if slot(s.Key(tpm, a)) == slot(s.Key(day, b)) {
		t.Fatal("the two subjects share a slot; the test wants two")
	}
	free := func(h limiter.Hit) int64 {
		t.Helper()
		h.Cost, h.Reserve = 1, false
		out := make([]floodgate.Decision, 1)
		if err := s.Decide(ctx, []limiter.Hit{h}, true, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed {
			return 0
		}
		return out[0].Remaining + 1
	}
	reserve := func(id uint64, ca, cb int64) []floodgate.Decision {
		t.Helper()
		out := make([]floodgate.Decision, 2)
		err := s.Reserve(ctx, []limiter.Hit{
			{Rule: tpm, Key: a, Cost: ca, Lease: id, Reserve: true, TTL: time.Hour},
			{Rule: day, Key: b, Cost: cb, Lease: id, Reserve: true, TTL: time.Hour},
		}, out)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	settle := func(id uint64, ca, cb int64) []floodgate.Decision {
		t.Helper()
		out := make([]floodgate.Decision, 2)
		err := applyOp(ctx, s, opSettle, []limiter.Hit{
			{Rule: tpm, Key: a, Cost: ca, Lease: id, Reserve: true},
			{Rule: day, Key: b, Cost: cb, Lease: id, Reserve: true},
		}, out)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ha, hb := limiter.Hit{Rule: tpm, Key: a}, limiter.Hit{Rule: day, Key: b}
	if err := s.Decide(ctx, []limiter.Hit{{Rule: day, Key: b, Cost: 40}}, false, make([]floodgate.Decision, 1)); err != nil {
		t.Fatal(err)
	}
	if out := reserve(1, 30, 20); out[0].Allowed && out[1].Allowed {
		t.Fatalf("20 of 10 reserved: %+v", out)
	}
	if na, nb := free(ha), free(hb); na != 100 || nb != 10 {
		t.Fatalf("after a denied reservation: %d and %d free, want 100 (given back) and 10", na, nb)
	}
	if out := settle(1, 0, 0); out[0].Allowed || out[1].Allowed {
		t.Fatalf("a refunded reservation kept a settle record: %+v", out)
	}
	if out := reserve(2, 30, 5); !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("reserve 30 and 5: %+v", out)
	}
	out := settle(2, 10, 15)
	if !out[0].Allowed || !out[1].Allowed || out[0].Remaining != 90 || out[1].Remaining != 0 || out[1].Overrun != 5 {
		t.Fatalf("settle 10 of 30 and 15 of 5 (5 left): %+v, want 90 free, and 0 free with 5 overrun", out)
	}
	if out := settle(2, 0, 0); out[0].Allowed || out[1].Allowed {
		t.Fatalf("second settle: %+v", out)
	}
}

// TestReserveEngine runs reservations through the engine on Redis: a
// settle below the estimate drops the deny cache's entry of the key it
// gives units back to, a second settle is ErrReservationUnknown, and a
// reserved hit on a leased rule is decided by the store, exactly, not
// from a lease.
func TestReserveEngine(t *testing.T) {
	s := newStandalone(t)
	ctx := context.Background()
	l := limiter.New(s, limiter.Options{Timeout: 5 * time.Second})
	w, err := limiter.NewRuleWith(floodgate.Limit{Name: "eng_w", Algorithm: floodgate.FixedWindow, Max: 10,
		Window: 1000 * time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	var res limiter.Result
	req := &limiter.Request{Hits: []limiter.Hit{{Rule: w, Key: "k", Cost: 10, Reserve: true}}}
	if err := l.Decide(ctx, req, &res); err != nil || !res.Allowed {
		t.Fatalf("reserve 10 of 10: %v %+v", err, res)
	}
	// The key is full: the store's denial is learnt by the deny cache.
	one := []limiter.Hit{{Rule: w, Key: "k", Cost: 1}}
	for range 2 {
		if res, err := l.Check(ctx, one); err != nil || res.Allowed {
			t.Fatalf("with 10 reserved: %v %+v", err, res)
		}
	}
	if st := l.Stats(); st.DenyCacheHits == 0 {
		t.Fatalf("the deny cache answered nothing: %+v", st)
	}
	if err := l.Settle(ctx, req, []int64{4}, &res); err != nil || res.Decisions[0].Remaining != 6 {
		t.Fatalf("settle 4 of 10: %v %+v", err, res.Decisions[0])
	}
	if res, err := l.Check(ctx, one); err != nil || !res.Allowed || res.Flags[0]&limiter.Cached != 0 {
		t.Fatalf("after 6 were given back: %v %+v", err, res)
	}
	if err := l.Settle(ctx, req, []int64{4}, &res); err != nil || res.Decisions[0].Remaining != 6 {
		t.Fatalf("the same settle sent again: %v %+v, want the first answer", err, res.Decisions[0])
	}
	if err := l.Settle(ctx, req, []int64{5}, &res); !errors.Is(err, limiter.ErrReservationUnknown) {
		t.Fatalf("a settle at another cost after the first: %v", err)
	}

	// A leased rule: a plain hit is spent from a lease, a reserved one
	// goes to the store, which holds it.
	lr, err := limiter.NewRuleWith(floodgate.Limit{Name: "eng_leased", Algorithm: floodgate.FixedWindow, Max: 100,
		Window: 1000 * time.Hour}, limiter.RuleOptions{Consistency: floodgate.Leased})
	if err != nil {
		t.Fatal(err)
	}
	ll := limiter.New(s, limiter.Options{Timeout: 5 * time.Second, Instances: 2,
		Lease: limiter.LeaseOptions{Lifetime: time.Hour, Share: 2}})
	if res, err := ll.Check(ctx, []limiter.Hit{{Rule: lr, Key: "k", Cost: 1}}); err != nil || !res.Allowed {
		t.Fatalf("leased: %v %+v", err, res)
	}
	grants := ll.Stats().LeaseGrants
	rreq := &limiter.Request{Hits: []limiter.Hit{{Rule: lr, Key: "k", Cost: 7, Reserve: true}}}
	if err := ll.Decide(ctx, rreq, &res); err != nil || !res.Allowed || res.Flags[0]&limiter.Leased != 0 {
		t.Fatalf("reserve on a leased rule: %v %+v", err, res)
	}
	if st := ll.Stats(); st.LeaseGrants != grants {
		t.Fatalf("the reservation took a lease: %+v", st)
	}
	if err := ll.Settle(ctx, rreq, []int64{2}, &res); err != nil || !res.Allowed {
		t.Fatalf("settle on a leased rule: %v %+v", err, res)
	}
}
