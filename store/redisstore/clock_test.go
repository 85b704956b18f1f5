package redisstore

import (
	"context"
	"strconv"
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

// TestClockStepBackKeepsTheWait: after the server's clock steps back over
// a window boundary (a failover to a server whose clock is behind), the
// newer window stays current, and a denial's RetryAfter counts to that
// window's end by the server's clock: a client that comes back when told
// passes, and one that comes back a microsecond sooner does not.
func TestClockStepBackKeepsTheWait(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			defer s.testNow.Store(0)
			ctx := context.Background()
			// One second into a window; the clock then steps back 5 s.
			base := time.Date(2026, 5, 1, 12, 0, 1, 0, time.UTC).UnixMicro()
			roomy := ruletest.Rule(t, floodgate.Limit{Name: "wait_roomy", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour})
			for _, l := range []floodgate.Limit{
				{Name: "wait_fixed", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Minute},
				{Name: "wait_counter", Algorithm: floodgate.SlidingWindow, Max: 2, Window: time.Minute},
			} {
				r := ruletest.Rule(t, l)
				decide := func(at int64, two bool) floodgate.Decision {
					t.Helper()
					s.testNow.Store(at)
					hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
					if two {
						// The script's general path, as a request of two hits
						// takes it: a second limit that always allows, on the
						// same subject.
						hits = append(hits, limiter.Hit{Rule: roomy, Key: "k", Cost: 1})
					}
					out := make([]floodgate.Decision, len(hits))
					if err := s.Decide(ctx, hits, false, out); err != nil {
						t.Fatal(err)
					}
					return out[0]
				}
				for _, two := range []bool{false, true} {
					if l.Algorithm == floodgate.SlidingWindow && !two {
						continue // the sliding window has no one-hit path of its own
					}
					s.testNow.Store(0)
					key := s.Key(r, "k")
					srv := sharedServer(t)
					if mode == "cluster" {
						var err error
						if srv, err = sharedCluster(t).PrimaryOf(int(slot(key))); err != nil {
							t.Fatal(err)
						}
					}
					if _, err := srv.Do("DEL", key); err != nil {
						t.Fatal(err)
					}
					decide(base, two)
					decide(base, two)
					back := base - 5_000_000
					d := decide(back, two)
					if d.Allowed {
						t.Fatalf("%s (two hits %v): allowed after the clock stepped back: %+v", l.Name, two, d)
					}
					if min := 64 * time.Second; d.RetryAfter < min {
						t.Fatalf("%s (two hits %v): retry after %s, but the window charged ends %s after the stepped-back clock",
							l.Name, two, d.RetryAfter, min)
					}
					if d.ResetAfter < d.RetryAfter {
						t.Fatalf("%s (two hits %v): reset after %s, before the retry after %s", l.Name, two, d.ResetAfter, d.RetryAfter)
					}
					retry := back + d.RetryAfter.Microseconds()
					if e := decide(retry-1, two); e.Allowed {
						t.Fatalf("%s (two hits %v): allowed 1µs before the retry after %s: %+v", l.Name, two, d.RetryAfter, e)
					}
					if e := decide(retry, two); !e.Allowed {
						t.Fatalf("%s (two hits %v): denied at the retry after %s: %+v", l.Name, two, d.RetryAfter, e)
					}
				}
			}
		})
	}
}

// TestClockStepBackKeepsTheKeys: after the server's clock steps back, a
// sliding log's entries and a concurrency limit's leases made before the
// step count until their own ends, which lie later than the stepped-back
// clock says: the keys that hold them live as long. Keys that expired a
// window (a lease's TTL) after the stepped-back clock lost the newest
// entries and leases up to the step early, and with them their counts.
func TestClockStepBackKeepsTheKeys(t *testing.T) {
	// Longer than the hour a test clock adds to every TTL (apply.lua's pad).
	const step = 3 * time.Hour
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			defer s.testNow.Store(0)
			ctx := context.Background()
			base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			for _, l := range []floodgate.Limit{
				{Name: "back_keys_log", Algorithm: floodgate.SlidingLog, Max: 3, Window: time.Hour},
				{Name: "back_keys_conc", Algorithm: floodgate.Concurrency, Max: 3, LeaseTTL: time.Hour},
			} {
				r := ruletest.Rule(t, l)
				out := make([]floodgate.Decision, 1)
				s.testNow.Store(base.UnixMicro())
				if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: 2, Lease: 1}}, false, out); err != nil || !out[0].Allowed {
					t.Fatalf("%s: charge: %+v %v", l.Name, out[0], err)
				}
				s.testNow.Store(base.Add(-step).UnixMicro())
				if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: 1, Lease: 2}}, false, out); err != nil || !out[0].Allowed {
					t.Fatalf("%s: charge after the step: %+v %v", l.Name, out[0], err)
				}
				// The first charge counts until an hour after base: the
				// keys must live that long by the server's clock, an hour
				// and the step from now.
				want := time.Hour + step - 2*time.Second // what a slow test may have used up
				for _, key := range []string{s.Key(r, "k"), s.Key(r, "k") + ":h"} {
					srv := sharedServer(t)
					if mode == "cluster" {
						var err error
						if srv, err = sharedCluster(t).PrimaryOf(int(slot(key))); err != nil {
							t.Fatal(err)
						}
					}
					ttl, err := srv.Do("PTTL", key)
					if err != nil {
						t.Fatal(err)
					}
					ms, err := strconv.ParseInt(ttl, 10, 64)
					if err != nil || time.Duration(ms)*time.Millisecond < want {
						t.Errorf("%s: key %s PTTL %s ms, want at least %d ms (until the charge before the step ends)",
							l.Name, key, ttl, want.Milliseconds())
					}
				}
			}
		})
	}
}
