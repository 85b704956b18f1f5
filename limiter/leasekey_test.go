package limiter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestLeaseFollowsTheCounter: a leased limit whose rule is made again
// (an API key's own rate, whose rule the key store makes anew at every
// rebuild of its keys, and for each request between a reload and that
// rebuild) spends the lease the earlier rule took on the same counter.
// Before, the lease was the rule object's: each new rule took a lease of
// its own from the store, and the units of the one before stayed taken and
// unspent until they expired, so the instance admitted less than the
// limit and asked the store for a lease at every rebuild.
func TestLeaseFollowsTheCounter(t *testing.T) {
	t.Parallel()
	const ms = int64(time.Millisecond)
	var clock atomic.Int64
	clock.Store(100 * ms)
	store := &windowLeaser{clock: &clock, window: 1000 * ms, max: 100, counts: make(map[string][2]int64)}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := limiter.New(store, limiter.Options{
		Now:       func() time.Time { return base.Add(time.Duration(clock.Load())) },
		DenyCache: limiter.DenyCacheOptions{Entries: -1},
		Lease:     limiter.LeaseOptions{Lifetime: 10 * time.Second, Share: 2},
	})
	limit := floodgate.Limit{Name: "key-rate", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Second}
	rule := func() *limiter.Rule {
		return ruletest.With(t, limit, limiter.RuleOptions{OnFailure: floodgate.FailClosed, Consistency: floodgate.Leased})
	}
	decide := func(r *limiter.Rule, key string) {
		t.Helper()
		var res limiter.Result
		if err := l.Decide(context.Background(), &limiter.Request{Hits: []limiter.Hit{{Rule: r, Key: key, Cost: 1}}}, &res); err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			t.Fatalf("%s: refused: %+v", key, res)
		}
	}
	// One rule for ten requests: the leases it takes.
	one := rule()
	for range 10 {
		decide(one, "one")
	}
	grants := l.Stats().LeaseGrants
	held := func(key string) int64 {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.counts[key][1]
	}
	taken := held("one")
	// Ten requests, each through a rule made anew from the same limit.
	for range 10 {
		decide(rule(), "many")
	}
	if got := l.Stats().LeaseGrants - grants; got != grants {
		t.Errorf("ten requests through ten rules of one limit took %d leases from the store, want %d (as through one rule)", got, grants)
	}
	if got := held("many"); got != taken {
		t.Errorf("ten rules of one limit hold %d units of the window, want %d (as one rule)", got, taken)
	}
}
