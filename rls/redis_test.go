package rls

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// TestConcurrentCallersOnRedisCountExactlyTheLimit drives the service
// from many goroutines over loopback gRPC against a real redis-server:
// exactly the limit passes, for a single descriptor and for requests
// carrying two descriptors (all or nothing across both).
func TestConcurrentCallersOnRedisCountExactlyTheLimit(t *testing.T) {
	rs := redistest.Start(t)
	st, err := redisstore.New(redisstore.Options{URL: "redis://" + rs.Addr, Prefix: "rls-test:"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A generous store deadline and fail-closed limits: a slow machine
	// must never turn into extra admissions.
	var degraded atomic.Int64
	eng := limiter.New(st, limiter.Options{Timeout: 5 * time.Second, Observer: limiter.ObserverFunc(func(_ *limiter.Request, res *limiter.Result) {
		if res.Degraded != limiter.NotDegraded {
			degraded.Add(1)
		}
	})})
	cfg := mustParse(t, `
domain: load
descriptors:
  - key: tenant
    rate_limit: {unit: year, requests_per_unit: 300, on_failure: deny}
    descriptors:
      - key: user
        rate_limit: {unit: year, requests_per_unit: 40, on_failure: deny}
`)
	c, _ := serve(t, New(eng, cfg, Options{}), ServerOptions{})

	const workers, each = 50, 10
	var allowed atomic.Int64
	run := func(ds func(w, i int) []*rlv3.RateLimitDescriptor) int64 {
		allowed.Store(0)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "load", Descriptors: ds(w, i)})
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
					if r.OverallCode == rlsv3.RateLimitResponse_OK {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return allowed.Load()
	}

	// 500 requests for one tenant: exactly 300 pass.
	if got := run(func(int, int) []*rlv3.RateLimitDescriptor {
		return []*rlv3.RateLimitDescriptor{desc("tenant", "acme")}
	}); got != 300 {
		t.Fatalf("one descriptor: %d allowed, want exactly 300", got)
	}
	// Each request carries the tenant and one of 5 users of tenant
	// "beta": each user passes 40 times, and the tenant's 300 is never
	// reached (5·40 = 200), so exactly 200 pass and the tenant counter
	// shows 200.
	if got := run(func(w, _ int) []*rlv3.RateLimitDescriptor {
		u := string(rune('a' + w%5))
		return []*rlv3.RateLimitDescriptor{desc("tenant", "beta", "user", u), desc("tenant", "beta")}
	}); got != 200 {
		t.Fatalf("two descriptors: %d allowed, want exactly 200", got)
	}
	r := ask(t, c, "load", desc("tenant", "beta"))
	if r.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("tenant beta after the run: %v, want 99 left (200 + this one charged, denied requests took nothing)", r)
	}
	if n := degraded.Load(); n != 0 {
		t.Fatalf("%d decisions were degraded; the counts above would not prove anything", n)
	}
}
