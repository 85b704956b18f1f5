package memstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestWallClockSteps: a step of the wall clock, either way, neither
// freezes nor refills a rate limit, which follows the monotonic clock;
// a calendar quota follows the wall clock.
func TestWallClockSteps(t *testing.T) {
	var wall atomic.Int64
	var mono atomic.Int64
	wall.Store(time.Date(2026, 6, 1, 23, 0, 0, 0, time.UTC).UnixNano())
	s, err := New(Options{
		Now:              func() int64 { return wall.Load() },
		Elapsed:          func() time.Duration { return time.Duration(mono.Load()) },
		SnapshotInterval: -1, SweepInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	advance := func(d time.Duration) { wall.Add(int64(d)); mono.Add(int64(d)) }
	bucket := ruletest.Rule(t, floodgate.Limit{Name: "b", Algorithm: floodgate.TokenBucket, Rate: 20, Per: time.Minute, Burst: 20})
	quota := ruletest.Rule(t, floodgate.Limit{Name: "q", Algorithm: floodgate.Quota, Max: 2, Period: floodgate.Day, Location: time.UTC})
	allowed := func(r *limiter.Rule, n int) int {
		got := 0
		for range n {
			out := make([]floodgate.Decision, 1)
			if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, false, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Allowed {
				got++
			}
		}
		return got
	}
	if n := allowed(bucket, 25); n != 20 {
		t.Fatalf("fresh bucket allowed %d of 25, want 20", n)
	}
	// The wall clock steps back an hour: a minute later the bucket has
	// refilled as a minute of monotonic time says.
	wall.Add(int64(-time.Hour))
	advance(time.Minute)
	if n := allowed(bucket, 25); n != 20 {
		t.Errorf("a minute after a step back of the wall clock: %d of 25 allowed, want 20 (the bucket froze)", n)
	}
	// The wall clock steps forward an hour: the bucket gains nothing.
	wall.Add(int64(time.Hour))
	if n := allowed(bucket, 5); n != 0 {
		t.Errorf("after a step forward of the wall clock: %d allowed from an empty bucket, want 0", n)
	}
	// The quota follows the calendar of the wall clock: used up on June 1,
	// fresh again once the wall clock says June 2, however it got there.
	if n := allowed(quota, 3); n != 2 {
		t.Fatalf("quota: %d of 3, want 2", n)
	}
	wall.Add(int64(2 * time.Hour)) // 01:01 on June 2, with no monotonic time passing
	if n := allowed(quota, 3); n != 2 {
		t.Errorf("quota on the next calendar day: %d of 3, want 2", n)
	}
}
