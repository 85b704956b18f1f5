package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestClusterCheckSlotChargesTheOthers: on a Cluster, a request whose
// check (limiter.Hit.Check, Envoy's quota_mode) is alone in its slot
// charges its other hits, in other slots, as on a standalone server and
// the memory store; a check that denies stops them. The lone check was
// sent as a peek, and its "nothing charged" was taken for a denial, so
// the other hits were only looked at: their limits never counted
// (TestStoresDoNotDrift found it).
func TestClusterCheckSlotChargesTheOthers(t *testing.T) {
	s := newCluster(t)
	defer s.testNow.Store(0)
	s.testNow.Store(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixMicro())
	ctx := context.Background()
	check := ruletest.Rule(t, floodgate.Limit{Name: "cs_check", Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Hour})
	count := ruletest.Rule(t, floodgate.Limit{Name: "cs_count", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	// Subjects in other slots than the check's.
	var others []string
	for i := 0; len(others) < 3; i++ {
		k := "cs_" + itoa(int64(i))
		if slot(s.Key(count, k)) != slot(s.Key(check, "cs_x")) {
			others = append(others, k)
		}
	}
	out := make([]floodgate.Decision, 2)
	for _, k := range others {
		hits := []limiter.Hit{{Rule: check, Key: "cs_x", Cost: 1, Check: true}, {Rule: count, Key: k, Cost: 1}}
		for i := 0; i < 2; i++ {
			if err := s.Decide(ctx, hits, false, out); err != nil || !out[0].Allowed || !out[1].Allowed {
				t.Fatalf("%s: charge %d: %+v %v", k, i, out, err)
			}
		}
		if err := s.Decide(ctx, hits[1:], true, out[:1]); err != nil {
			t.Fatal(err)
		}
		if out[0].Remaining != 97 {
			t.Fatalf("%s: %d left after two charges and a peek of one, want 97", k, out[0].Remaining)
		}
	}
	// A check that denies (4 asked of 3) stops the request: nothing charged.
	hits := []limiter.Hit{{Rule: check, Key: "cs_x", Cost: 3, Check: true}, {Rule: count, Key: others[0], Cost: 1}}
	if err := s.Decide(ctx, []limiter.Hit{{Rule: check, Key: "cs_x", Cost: 1}}, false, out[:1]); err != nil || !out[0].Allowed {
		t.Fatalf("charge of the checked limit: %+v %v", out[0], err)
	}
	if err := s.Decide(ctx, hits, false, out); err != nil || out[0].Allowed {
		t.Fatalf("a check of 3 with 2 left: %+v %v, want a denial", out, err)
	}
	if err := s.Decide(ctx, hits[1:], true, out[:1]); err != nil || out[0].Remaining != 97 {
		t.Fatalf("after a denied check: %+v %v, want 97 left (nothing charged)", out[0], err)
	}
}
