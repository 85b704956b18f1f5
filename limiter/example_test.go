package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// A request checked against a per-user and a global limit: charged only
// when both allow.
func ExampleLimiter_Check() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	l := limiter.New(store, limiter.Options{})

	perUser, _ := limiter.NewRule(floodgate.Limit{Name: "per_user", Algorithm: floodgate.TokenBucket,
		Rate: 1, Per: time.Minute, Burst: 2}, floodgate.FailLocal, false)
	global, _ := limiter.NewRule(floodgate.Limit{Name: "global", Algorithm: floodgate.FixedWindow,
		Max: 1000, Window: time.Hour}, floodgate.FailOpen, false)

	for i := 1; i <= 3; i++ {
		hits := []limiter.Hit{
			{Rule: perUser, Key: "alice", Cost: 1}, // most specific first
			{Rule: global, Key: "all", Cost: 1},
		}
		r, err := l.Check(context.Background(), hits)
		if err != nil {
			fmt.Println(err)
			return
		}
		if r.Allowed {
			fmt.Printf("request %d: allowed, %d left for alice\n", i, r.Decisions[0].Remaining)
		} else {
			b := hits[r.Binding].Rule.Name()
			fmt.Printf("request %d: denied by %s, retry in about %v\n", i, b, r.RetryAfter.Round(time.Minute))
		}
	}
	// Output:
	// request 1: allowed, 1 left for alice
	// request 2: allowed, 0 left for alice
	// request 3: denied by per_user, retry in about 1m0s
}

// A concurrency limit: Check fills in a lease, Release hands it back.
func ExampleLimiter_Release() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	l := limiter.New(store, limiter.Options{})
	inflight, _ := limiter.NewRule(floodgate.Limit{Name: "inflight", Algorithm: floodgate.Concurrency,
		Max: 1, LeaseTTL: time.Minute}, floodgate.FailOpen, false)

	first := []limiter.Hit{{Rule: inflight, Key: "upload", Cost: 1}}
	r, _ := l.Check(context.Background(), first)
	fmt.Println("first:", r.Allowed)
	second := []limiter.Hit{{Rule: inflight, Key: "upload", Cost: 1}}
	r, _ = l.Check(context.Background(), second)
	fmt.Println("second while the first runs:", r.Allowed)
	_ = l.Release(context.Background(), first)
	r, _ = l.Check(context.Background(), second)
	fmt.Println("second after the first is done:", r.Allowed)
	// Output:
	// first: true
	// second while the first runs: false
	// second after the first is done: true
}
