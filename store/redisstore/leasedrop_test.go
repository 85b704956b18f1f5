package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
)

// leftIn returns the units Redis holds for a rule's key (a peek of one
// unit, plus that unit).
func leftIn(t *testing.T, s *Store, r *limiter.Rule, key string) int64 {
	t.Helper()
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: key, Cost: 1}}, true, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed {
		return 0
	}
	return out[0].Remaining + 1
}

// TestDroppedLeaseGivesItsUnitsBack: a lease dropped to keep within
// LeaseOptions.Keys gives its unspent units back to Redis, so that new keys
// beside a hot one cost the hot key nothing. 50 requests on a fixed window
// of 400 an hour leave 350 in Redis: each beside a new key, with 4 leased
// keys at most; and with one leased key at most, the hot key asked for
// twice, so that its lease holds 99 units when the next key drops it.
func TestDroppedLeaseGivesItsUnitsBack(t *testing.T) {
	avoidHourBoundary()
	for _, tc := range []struct {
		name      string
		keys, hot int // leased keys at most; hot requests before each new key
	}{{"new_keys", 4, 1}, {"held_units", 1, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStandalone(t)
			ctx := context.Background()
			r, err := limiter.NewRuleWith(floodgate.Limit{Name: "drop_fixed", Algorithm: floodgate.FixedWindow, Max: 400,
				Window: time.Hour}, limiter.RuleOptions{Consistency: floodgate.Leased, OnFailure: floodgate.FailClosed})
			if err != nil {
				t.Fatal(err)
			}
			l := limiter.New(s, limiter.Options{Timeout: 5 * time.Second,
				Lease: limiter.LeaseOptions{Lifetime: time.Hour, Keys: tc.keys}})
			check := func(key string) {
				t.Helper()
				if res, err := l.Check(ctx, []limiter.Hit{{Rule: r, Key: key, Cost: 1}}); err != nil || !res.Allowed {
					t.Fatalf("%s: %+v %v", key, res, err)
				}
			}
			for i := range 50 / tc.hot {
				for range tc.hot {
					check("hot")
				}
				check(fmt.Sprintf("new%d", i))
			}
			st := l.Stats()
			t.Logf("%+v", st)
			if st.LeasesDropped == 0 {
				t.Fatal("no lease was dropped: the test does not exercise the bound")
			}
			if st.LeasedKeys > tc.keys {
				t.Fatalf("%d leased keys held, above the bound %d", st.LeasedKeys, tc.keys)
			}
			if tc.keys == 1 {
				// The hot key's last lease was dropped too: its units go
				// back without ReturnLeases.
				waitReturned(t, l)
				if got := leftIn(t, s, r, "hot"); got != 350 {
					t.Fatalf("Redis holds %d for the hot key after 50 admitted and its lease dropped, want 350", got)
				}
			}
			if err := l.ReturnLeases(ctx); err != nil {
				t.Fatal(err)
			}
			if got := leftIn(t, s, r, "hot"); got != 350 || l.Stats().LeaseUnitsNotReturned != 0 {
				t.Fatalf("Redis holds %d for the hot key after 50 admitted, want 350 (%+v)", got, l.Stats())
			}
		})
	}
}

// waitReturned waits, 10 s at most, until no dropped lease waits to go
// back to Redis.
func waitReturned(t *testing.T, l *limiter.Limiter) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); l.Stats().DroppedLeasesWaiting > 0 || l.Stats().InFlight > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("dropped leases still waiting: %+v", l.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNewKeysCannotStarveALeasedKey: a flood of new keys, each asked for
// twice so that every lease held has units left, beside a hot key whose
// lease is so dropped again and again: the hot key's clients still get its
// whole limit, 400 in the hour, and the memory held stays within
// LeaseOptions.Keys leases.
func TestNewKeysCannotStarveALeasedKey(t *testing.T) {
	avoidHourBoundary()
	s := newStandalone(t)
	ctx := context.Background()
	r, err := limiter.NewRuleWith(floodgate.Limit{Name: "flood_fixed", Algorithm: floodgate.FixedWindow, Max: 400,
		Window: time.Hour}, limiter.RuleOptions{Consistency: floodgate.Leased, OnFailure: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 8
	l := limiter.New(s, limiter.Options{Timeout: 5 * time.Second,
		Lease: limiter.LeaseOptions{Lifetime: time.Hour, Keys: keys}})
	hot := limiter.Hit{Rule: r, Key: "hot", Cost: 1}
	admitted := 0
	for i := range 3000 {
		res, err := l.Check(ctx, []limiter.Hit{hot})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
		}
		for range 2 {
			if res, err := l.Check(ctx, []limiter.Hit{{Rule: r, Key: fmt.Sprintf("subject%d", i), Cost: 1}}); err != nil || !res.Allowed {
				t.Fatalf("subject %d: %+v %v", i, res, err)
			}
		}
		if st := l.Stats(); st.LeasedKeys > keys {
			t.Fatalf("%d leased keys held, above the bound %d", st.LeasedKeys, keys)
		}
	}
	waitReturned(t, l)
	during := admitted
	// The flood is over: the hot key's clients take what is left.
	for range 500 {
		res, err := l.Check(ctx, []limiter.Hit{hot})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			break
		}
		admitted++
	}
	st := l.Stats()
	t.Logf("hot key: %d admitted during the flood, %d in all; %+v", during, admitted, st)
	if st.LeasesDropped < 3000 {
		t.Fatalf("%d leases dropped: the test does not exercise the bound", st.LeasesDropped)
	}
	if admitted != 400 || st.LeaseUnitsNotReturned != 0 {
		t.Fatalf("the hot key admitted %d of its 400 (%d units not returned)", admitted, st.LeaseUnitsNotReturned)
	}
	waitReturned(t, l)
}

// TestDroppedLeaseWhileRedisIsStopped: leases dropped while Redis does not
// answer (SIGSTOP). A flood of 2,000 new keys keeps the memory held within
// the bound; the units of the leases it drops go back once, never twice:
// a give-back that was sent is not sent again (Redis runs it when it
// comes back), and Redis ends holding exactly what was spent.
func TestDroppedLeaseWhileRedisIsStopped(t *testing.T) {
	avoidHourBoundary()
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	r, err := limiter.NewRuleWith(floodgate.Limit{Name: "down_fixed", Algorithm: floodgate.FixedWindow, Max: 400,
		Window: time.Hour}, limiter.RuleOptions{Consistency: floodgate.Leased, OnFailure: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 2
	l := limiter.New(s, limiter.Options{Timeout: 100 * time.Millisecond,
		Lease: limiter.LeaseOptions{Lifetime: time.Hour, Keys: keys}})
	for _, key := range []string{"hot", "hot", "warm", "warm"} { // each holds 99 units
		if res, err := l.Check(ctx, []limiter.Hit{{Rule: r, Key: key, Cost: 1}}); err != nil || !res.Allowed {
			t.Fatalf("%s: %+v %v", key, res, err)
		}
	}
	srv.Pause()
	for i := range 2000 {
		res, err := l.Check(ctx, []limiter.Hit{{Rule: r, Key: fmt.Sprintf("subject%d", i), Cost: 1}})
		if err != nil || res.Allowed {
			t.Fatalf("subject %d with Redis stopped: %+v %v", i, res, err)
		}
		if st := l.Stats(); st.LeasedKeys > keys || st.DroppedLeasesWaiting > keys {
			t.Fatalf("with Redis stopped: %+v, want at most %d leased keys and dropped leases waiting", st, keys)
		}
	}
	srv.Resume()
	// The breaker lets a call through again after its cool-down; then what
	// waits goes back.
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := l.Check(ctx, []limiter.Hit{{Rule: r, Key: "probe", Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis resumed, still refused: %+v %+v", res, l.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitReturned(t, l)
	if err := l.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	t.Logf("%+v", st)
	for _, key := range []string{"hot", "warm"} {
		if got := leftIn(t, s, r, key); got != 398 {
			t.Fatalf("Redis holds %d for %s after 2 admitted, want 398 (%+v)", got, key, st)
		}
	}
	if st.LeaseUnitsNotReturned != 0 && st.LeaseUnitsNotReturned != 99 {
		t.Fatalf("%d units counted as not returned, want 0 or the 99 of the lease dropped while Redis was stopped",
			st.LeaseUnitsNotReturned)
	}
}

// TestDroppedLeasesUnderConcurrency: 8 callers on a hot key and 8 callers
// on new keys, with 8 and with 2 leased keys at most: leases are dropped
// while in use, while being renewed, and while a request that took a unit
// from one waits for another limit that refuses it. Every unit Redis
// counts for the hot key was admitted: none is lost with a dropped lease,
// none given back twice.
func TestDroppedLeasesUnderConcurrency(t *testing.T) {
	avoidHourBoundary()
	s := newStandalone(t)
	r, err := limiter.NewRuleWith(floodgate.Limit{Name: "conc_fixed", Algorithm: floodgate.FixedWindow, Max: 4000,
		Window: time.Hour}, limiter.RuleOptions{Consistency: floodgate.Leased, OnFailure: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	// An exact limit of 100 per caller refuses the hot callers' later
	// requests after their leased hit took its unit: the unit goes back.
	exact, err := limiter.NewRuleWith(floodgate.Limit{Name: "conc_exact", Algorithm: floodgate.FixedWindow, Max: 100,
		Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	for _, keys := range []int{8, 2} {
		t.Run(fmt.Sprintf("keys_%d", keys), func(t *testing.T) {
			testDroppedLeasesUnderConcurrency(t, s, r, exact, keys, fmt.Sprintf("hot%d", keys))
		})
	}
}

func testDroppedLeasesUnderConcurrency(t *testing.T, s *Store, r, exact *limiter.Rule, keys int, hotKey string) {
	ctx := context.Background()
	l := limiter.New(s, limiter.Options{Timeout: 5 * time.Second,
		Lease: limiter.LeaseOptions{Lifetime: time.Hour, Keys: keys}})
	var hot atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := range 300 {
				key := hotKey
				if w%2 == 1 {
					key = fmt.Sprintf("%s-w%d-%d", hotKey, w, i/2)
				}
				hits := []limiter.Hit{{Rule: r, Key: key, Cost: 1}}
				if key == hotKey {
					hits = append(hits, limiter.Hit{Rule: exact, Key: fmt.Sprintf("%s-w%d", hotKey, w), Cost: 1})
				}
				res, err := l.Check(ctx, hits)
				if err != nil || res.Degraded != limiter.NotDegraded {
					errs <- fmt.Errorf("%s: %+v %v", key, res, err)
					return
				}
				if res.Allowed && key == hotKey {
					hot.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitReturned(t, l)
	if err := l.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	t.Logf("hot key: %d admitted; %+v", hot.Load(), st)
	if st.LeasesDropped == 0 {
		t.Fatal("no lease was dropped: the test does not exercise the bound")
	}
	if got, want := leftIn(t, s, r, hotKey), 4000-hot.Load(); got != want || st.LeaseUnitsNotReturned != 0 {
		t.Fatalf("Redis holds %d for the hot key, want %d (%d units not returned)", got, want, st.LeaseUnitsNotReturned)
	}
}

// TestRefusedRequestsGiveLeasedUnitsBack: 16 callers on one leased key,
// each request also under an exact limit of 100 per caller that refuses
// the later ones after their leased hit took its unit, while other
// requests renew the lease. A request refused is charged nothing: every
// unit Redis counts for the leased key was admitted, whether the unit went
// back into its lease or, the lease renewed meanwhile, back to Redis.
func TestRefusedRequestsGiveLeasedUnitsBack(t *testing.T) {
	avoidHourBoundary()
	s := newStandalone(t)
	ctx := context.Background()
	r, err := limiter.NewRuleWith(floodgate.Limit{Name: "refused_leased", Algorithm: floodgate.FixedWindow, Max: 10000,
		Window: time.Hour}, limiter.RuleOptions{Consistency: floodgate.Leased, OnFailure: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	exact, err := limiter.NewRuleWith(floodgate.Limit{Name: "refused_exact", Algorithm: floodgate.FixedWindow, Max: 100,
		Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.New(s, limiter.Options{Timeout: 5 * time.Second, // leases of 10 units: renewed often
		Lease: limiter.LeaseOptions{Lifetime: time.Hour, Share: 1000}})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for range 400 {
				res, err := l.Check(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: 1},
					{Rule: exact, Key: fmt.Sprintf("w%d", w), Cost: 1}})
				if err != nil || res.Degraded != limiter.NotDegraded {
					errs <- fmt.Errorf("%+v %v", res, err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitReturned(t, l)
	if err := l.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	t.Logf("%d admitted; %+v", admitted.Load(), st)
	if got, want := leftIn(t, s, r, "k"), 10000-admitted.Load(); got != want {
		t.Fatalf("Redis holds %d for the leased key after %d admitted, want %d", got, admitted.Load(), want)
	}
}
