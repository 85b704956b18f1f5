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

// TestQuotaAfterWallClockStepsBack: a calendar quota used up before the
// wall clock steps back keeps its count until the wall clock reaches the
// period's end, and a denial's wait counts to that end: the store clamps
// the instant to the newer one, but the key's expiry and the wait are
// measured on the wall clock that decides the period.
func TestQuotaAfterWallClockStepsBack(t *testing.T) {
	var wall, mono atomic.Int64
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
	quota := ruletest.Rule(t, floodgate.Limit{Name: "q", Algorithm: floodgate.Quota, Max: 2, Period: floodgate.Day, Location: time.UTC})
	ask := func(multi bool) floodgate.Decision {
		t.Helper()
		hits := []limiter.Hit{{Rule: quota, Key: "k", Cost: 1}}
		if multi { // the path of requests with several hits
			hits = append(hits, limiter.Hit{Rule: quota, Key: "other", Cost: 1, Check: true})
		}
		out := make([]floodgate.Decision, len(hits))
		if err := s.Decide(context.Background(), hits, false, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	for i := range 2 {
		if d := ask(false); !d.Allowed {
			t.Fatalf("request %d of a fresh quota of 2: %+v", i+1, d)
		}
	}
	// The wall clock steps back an hour, to 22:00 on June 1: the day
	// ends two hours later by the clock that cuts it.
	wall.Add(int64(-time.Hour))
	for _, multi := range []bool{false, true} {
		d := ask(multi)
		if d.Allowed || d.RetryAfter != 2*time.Hour || d.ResetAfter != 2*time.Hour {
			t.Errorf("at 22:00 after the step back (several hits: %v): allowed %v, Retry-After %v, reset %v; want a denial for 2h",
				multi, d.Allowed, d.RetryAfter, d.ResetAfter)
		}
	}
	// An hour and a minute later it is 23:01 on June 1 by the wall clock:
	// still the day whose quota was used up.
	advance(time.Hour + time.Minute)
	s.Sweep() // the sweep keeps the key as well
	for _, multi := range []bool{false, true} {
		if d := ask(multi); d.Allowed {
			t.Errorf("at 23:01 on June 1 (several hits: %v): allowed again (remaining %d), the day's count was forgotten", multi, d.Remaining)
		}
	}
	// At midnight by the wall clock the new day has its whole quota.
	advance(59 * time.Minute)
	for i := range 2 {
		if d := ask(false); !d.Allowed {
			t.Errorf("June 2, request %d: %+v", i+1, d)
		}
	}
}
