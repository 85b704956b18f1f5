package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
)

// TestDenyCacheSeesOtherInstancesWithinAge: units that come back where
// one instance's deny cache cannot see them (a reservation another
// instance settles below its estimate, a FLUSHALL) are admitted by that
// instance within the cache's age of a second, though the store told it
// the counter was full for 1,000 hours; and the cache did answer in
// between, so that the age is what ends it.
func TestDenyCacheSeesOtherInstancesWithinAge(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	open := func() *Store {
		s, err := New(Options{URL: "redis://" + srv.Addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	ctx := context.Background()
	a := limiter.New(open(), limiter.Options{Timeout: 5 * time.Second})
	b := limiter.New(open(), limiter.Options{Timeout: 5 * time.Second})
	w, err := limiter.NewRuleWith(floodgate.Limit{Name: "dc_w", Algorithm: floodgate.FixedWindow, Max: 10,
		Window: 1000 * time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	one := []limiter.Hit{{Rule: w, Key: "k", Cost: 1}}
	const bound = limiter.DefaultDenyCacheMaxAge + time.Second // the age, and room for a loaded machine

	// untilAllowed checks one unit on a until it passes; it returns the
	// time from learnt and whether a cached denial came first.
	untilAllowed := func(what string, learnt time.Time) (time.Duration, bool) {
		t.Helper()
		cached := false
		for {
			res, err := a.Check(ctx, one)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				return time.Since(learnt), cached
			}
			cached = cached || res.Flags[0]&limiter.Cached != 0
			if d := time.Since(learnt); d > 10*time.Second {
				t.Fatalf("%s: still denied after %v", what, d)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Another instance reserves the whole window; this one learns it full.
	var res limiter.Result
	req := &limiter.Request{Hits: []limiter.Hit{{Rule: w, Key: "k", Cost: 10, Reserve: true}}}
	if err := b.Decide(ctx, req, &res); err != nil || !res.Allowed {
		t.Fatalf("reserve 10 of 10: %v %+v", err, res)
	}
	learnt := time.Now()
	if res, err := a.Check(ctx, one); err != nil || res.Allowed || res.Flags[0]&limiter.Cached != 0 {
		t.Fatalf("the store's denial: %v %+v", err, res)
	}
	if err := b.Settle(ctx, req, []int64{4}, &res); err != nil || res.Decisions[0].Remaining != 6 {
		t.Fatalf("settle 4 of 10: %v %+v", err, res.Decisions[0])
	}
	d, cached := untilAllowed("after a settle on the other instance", learnt)
	if !cached {
		t.Errorf("the deny cache never answered after the settle; the test did not reach it")
	}
	if d > bound {
		t.Errorf("units settled back on the other instance were admitted %v after the denial was learnt, want at most %v", d, bound)
	}

	// This instance fills the window itself, then Redis is flushed.
	for i := 0; ; i++ {
		res, err := a.Check(ctx, one)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			break
		}
		if i > 10 {
			t.Fatal("the window never filled")
		}
	}
	learnt = time.Now()
	if _, err := srv.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	d, cached = untilAllowed("after FLUSHALL", learnt)
	if !cached {
		t.Errorf("the deny cache never answered after the flush; the test did not reach it")
	}
	if d > bound {
		t.Errorf("a flushed counter was admitted %v after the denial was learnt, want at most %v", d, bound)
	}
}
