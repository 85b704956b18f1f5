package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestClockStepsBack: a server clock that steps back (a failover to a
// server whose clock is behind) never moves state backwards: a full window
// stays full, a used bucket stays used.
func TestClockStepsBack(t *testing.T) {
	s := newStandalone(t)
	ctx := context.Background()
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixMicro()
	for _, l := range []floodgate.Limit{
		{Name: "back_fixed", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Second},
		{Name: "back_counter", Algorithm: floodgate.SlidingWindow, Max: 2, Window: time.Second},
		{Name: "back_log", Algorithm: floodgate.SlidingLog, Max: 2, Window: time.Second},
		{Name: "back_tb", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Second, Burst: 2},
		{Name: "back_quota", Algorithm: floodgate.Quota, Max: 2, Period: floodgate.Day},
	} {
		r := ruletest.Rule(t, l)
		hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
		out := make([]floodgate.Decision, 1)
		s.testNow.Store(base)
		for i := 0; i < 2; i++ {
			if err := s.Decide(ctx, hits, false, out); err != nil || !out[0].Allowed {
				t.Fatalf("%s: charge %d: %+v %v", l.Name, i, out[0], err)
			}
		}
		// One minute back for the windows and the bucket, two days back
		// for the quota: the server must not hand out a fresh window.
		back := base - 60_000_000
		if l.Algorithm == floodgate.Quota {
			back = base - 2*86_400_000_000
		}
		s.testNow.Store(back)
		if err := s.Decide(ctx, hits, false, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed {
			t.Fatalf("%s: allowed after the clock stepped back: %+v", l.Name, out[0])
		}
	}
	s.testNow.Store(0)
}
