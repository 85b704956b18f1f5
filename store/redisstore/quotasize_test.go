package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestQuotaResizedKeepsItsCount: a quota counted under one ID at another
// size (a key's own quota, limiter.RuleOptions.CountsAs) reads the count
// of the period so far, on Redis as in memory: below it, a denial with
// nothing left (never a negative count) until the zone's midnight, here
// Lord Howe Island's on the day its clock goes back half an hour (a day of
// 24.5 hours); above it, the difference.
func TestQuotaResizedKeepsItsCount(t *testing.T) {
	lh, err := time.LoadLocation("Australia/Lord_Howe")
	if err != nil {
		t.Fatal(err)
	}
	base := floodgate.Limit{Name: "basic.quota", Algorithm: floodgate.Quota, Max: 10, Period: floodgate.Day, Location: lh}
	plan := ruletest.Rule(t, base)
	sized := func(max int64) *limiter.Rule {
		l := base
		l.Max = max
		r, err := limiter.NewRuleWith(l, limiter.RuleOptions{CountsAs: plan})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	small, big := sized(4), sized(20)
	// 00:15 on 5 April 2026 in Lord Howe: midnight is 24 h 15 min away.
	at := time.Date(2026, 4, 5, 0, 15, 0, 0, lh)
	untilMidnight := time.Date(2026, 4, 6, 0, 0, 0, 0, lh).Sub(at)
	if untilMidnight != 24*time.Hour+15*time.Minute {
		t.Fatalf("tz data: %v to midnight", untilMidnight)
	}
	ctx := context.Background()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			rs := storeOn(t, mode)
			defer rs.testNow.Store(0)
			rs.testNow.Store(at.UnixMicro())
			ms, err := memstore.New(memstore.Options{Now: func() int64 { return at.UnixNano() }, SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			for _, st := range []limiter.Store{ms, rs} {
				name := "memory"
				if st == limiter.Store(rs) {
					name = "redis"
				}
				decide := func(r *limiter.Rule, cost int64) floodgate.Decision {
					t.Helper()
					out := make([]floodgate.Decision, 1)
					if err := st.Decide(ctx, []limiter.Hit{{Rule: r, Key: "key:acme", Cost: cost}}, false, out); err != nil {
						t.Fatal(err)
					}
					out[0].At = 0
					return out[0]
				}
				if d := decide(plan, 6); !d.Allowed || d.Remaining != 4 {
					t.Fatalf("%s: 6 of 10: %+v", name, d)
				}
				if d := decide(small, 1); d.Allowed || d.Remaining != 0 || d.Limit != 4 ||
					d.RetryAfter != untilMidnight || d.ResetAfter != untilMidnight {
					t.Errorf("%s: at a size of 4 after 6: %+v, want a denial with 0 left until midnight (%v)", name, d, untilMidnight)
				}
				if d := decide(big, 14); !d.Allowed || d.Remaining != 0 || d.Limit != 20 {
					t.Errorf("%s: 14 more at a size of 20 after 6: %+v, want allowed with 0 left", name, d)
				}
				if d := decide(big, 1); d.Allowed || d.Remaining != 0 {
					t.Errorf("%s: a 21st at a size of 20: %+v, want denied", name, d)
				}
			}
		})
	}
}
