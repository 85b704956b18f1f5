package rls

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// TestCallWhoseEnvoyLeftWhileQueuedCounts: Envoy gives a rate-limit call
// its timeout (50 ms in docs/envoy.md) and, when the call has not been
// answered by then, lets the request through (failure_mode_deny is off by
// default). A call whose deadline passes while it waits behind a call
// Redis holds is a request that went ahead: it must count, in Redis once
// it answers or by its limit's on_failure policy, as a call whose caller
// left after it was sent keeps its charge (httpapi
// TestCheckWhoseCallerLeftStands). Here Redis stalls under 40 calls of
// other tenants, sent in its batches as under load; five calls of one
// tenant, each with Envoy's 50 ms, wait in the store's lane for a batch
// of their own and time out, so five requests went ahead against a limit
// of 3; once Redis is back, the next call must be over the limit.
func TestCallWhoseEnvoyLeftWhileQueuedCounts(t *testing.T) {
	const held = 40
	t.Parallel()
	rs := redistest.Start(t)
	t.Cleanup(rs.Resume)
	st, err := redisstore.New(redisstore.Options{URL: "redis://" + rs.Addr, Prefix: "rls-leave:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := limiter.New(st, limiter.Options{Timeout: 5 * time.Second})
	cfg := mustParse(t, `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 3}
`)
	c, _ := serve(t, New(eng, cfg, Options{}), ServerOptions{})
	call := func(timeout time.Duration) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "acme")}})
	}
	if r := ask(t, c, "edge", desc("tenant", "warm")); r.OverallCode != ok {
		t.Fatalf("a first call: %v", r.OverallCode)
	}

	rs.Pause()
	// Calls of other tenants that Redis holds, sent in the store's
	// batches (as under load): the calls that come next wait in the
	// store's lane for a batch of their own.
	var wg sync.WaitGroup
	for i := range held {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", fmt.Sprint("held-", i))}})
			if err != nil || r.OverallCode != ok {
				t.Errorf("a call Redis held: %v %v, want OK", r.GetOverallCode(), err)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	went := 0
	for range 5 {
		r, err := call(50 * time.Millisecond)
		switch {
		case err != nil:
			// Envoy's timeout: the request goes ahead.
			if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Canceled {
				t.Fatalf("a call past Envoy's timeout: %v", err)
			}
			went++
		case r.OverallCode == ok:
			went++
		}
	}
	time.Sleep(100 * time.Millisecond)
	rs.Resume()
	wg.Wait()
	if went <= 3 {
		t.Fatalf("only %d requests went ahead; the test wants more than the limit of 3", went)
	}
	r, err := call(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.OverallCode != over {
		t.Fatalf("%d requests went ahead against a limit of 3 (all %d past Envoy's timeout while queued behind a stalled Redis), yet the next call is %v with %d left: the calls whose Envoy left while they waited were never counted",
			went, went, r.OverallCode, r.Statuses[0].GetLimitRemaining())
	}
}
