package redisstore

import (
	"context"
	"github.com/floodgate/floodgate/internal/ruletest"
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// TestReserveConcurrencyTwiceReleasedOnce reserves one concurrency limit
// and key twice in one reservation (one lease, the reservation's), then
// settles it: both slots are given back, exactly once, and none stays
// held in the limit's count.
func TestReserveConcurrencyTwiceReleasedOnce(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			ctx := context.Background()
			l := limiter.New(s, limiter.Options{Timeout: 5 * time.Second})
			conc, err := limiter.NewRuleWith(floodgate.Limit{Name: "gap_conc", Algorithm: floodgate.Concurrency,
				Max: 3, LeaseTTL: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
			if err != nil {
				t.Fatal(err)
			}
			var res limiter.Result
			req := &limiter.Request{Hits: []limiter.Hit{
				{Rule: conc, Key: "k", Cost: 1, Reserve: true},
				{Rule: conc, Key: "k", Cost: 1, Reserve: true},
			}}
			if err := l.Decide(ctx, req, &res); err != nil || !res.Allowed {
				t.Fatalf("reserve 2 of 3 slots: %v %+v", err, res)
			}
			if err := l.Settle(ctx, req, []int64{1, 1}, &res); err != nil || !res.Allowed {
				t.Fatalf("settle: %v %+v", err, res)
			}
			// A reservation of both slots again, with a limit of another
			// subject that denies it (on a Cluster, in a later slot: the
			// slots reserved first are given back by the refund).
			full, err := limiter.NewRuleWith(floodgate.Limit{Name: "gap_full", Algorithm: floodgate.FixedWindow,
				Max: 1, Window: 1000 * time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{{Rule: full, Key: "other", Cost: 1}}}, &res); err != nil || !res.Allowed {
				t.Fatalf("fill the other limit: %v %+v", err, res)
			}
			denied := &limiter.Request{Hits: []limiter.Hit{
				{Rule: conc, Key: "k", Cost: 1, Reserve: true},
				{Rule: conc, Key: "k", Cost: 1, Reserve: true},
				{Rule: full, Key: "other", Cost: 1, Reserve: true},
			}}
			if err := l.Decide(ctx, denied, &res); err != nil || res.Allowed {
				t.Fatalf("a reservation the other limit denies: %v %+v", err, res)
			}
			s.Flush()
			// All three slots are free again: three requests of one slot
			// each are allowed.
			for i := range 3 {
				one := &limiter.Request{Hits: []limiter.Hit{{Rule: conc, Key: "k", Cost: 1, Reserve: true}}}
				if err := l.Decide(ctx, one, &res); err != nil {
					t.Fatal(err)
				}
				if !res.Allowed {
					t.Fatalf("slot %d of 3 refused after a reservation of 2 was settled and another refused: %+v", i+1, res.Decisions[0])
				}
			}
		})
	}
}

// TestSettleHugeActualOverrun settles a reservation with an actual cost
// near the int64 bound (an HTTP API caller's, an upstream's usage field):
// the excess that fits is charged, and the overrun answered is the rest,
// to the unit, never below zero (a double of 2^63 is no int64).
func TestSettleHugeActualOverrun(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			ctx := context.Background()
			w := ruletest.Rule(t, floodgate.Limit{Name: "huge_w", Algorithm: floodgate.FixedWindow, Max: 100,
				Window: 1000 * time.Hour})
			tb := ruletest.Rule(t, floodgate.Limit{Name: "huge_tb", Algorithm: floodgate.TokenBucket, Rate: 1,
				Per: time.Hour, Burst: 100})
			for _, r := range []*limiter.Rule{w, tb} {
				h := limiter.Hit{Rule: r, Key: "k", Cost: 10, Lease: 3, Reserve: true, TTL: time.Hour}
				out := make([]floodgate.Decision, 1)
				if err := s.Reserve(ctx, []limiter.Hit{h}, out); err != nil || !out[0].Allowed {
					t.Fatalf("%s: reserve: %v %+v", r.Name(), err, out)
				}
				h.Cost = math.MaxInt64
				got := make([]limiter.Settled, 1)
				if err := s.Settle(ctx, []limiter.Hit{h}, got); err != nil || !got[0].Found {
					t.Fatalf("%s: settle: %v %+v", r.Name(), err, got)
				}
				// 90 of the excess fit; the rest is the overrun, to the unit.
				if o := got[0].Overrun; o != math.MaxInt64-100 || got[0].Remaining != 0 {
					t.Fatalf("%s: settle at the largest int64 with 90 free: %+v, want %d overrun and 0 free",
						r.Name(), got[0], int64(math.MaxInt64-100))
				}
			}
		})
	}
}
