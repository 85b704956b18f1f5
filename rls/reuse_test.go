package rls

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// degradedEngine allows every hit and reports the decisions as made by a
// failure policy; it counts its calls.
type degradedEngine struct {
	limiter.Engine
	calls int
}

func (e *degradedEngine) Decide(_ context.Context, req *limiter.Request, r *limiter.Result) error {
	e.calls++
	*r = limiter.Result{Allowed: true, Binding: 0, Degraded: limiter.DegradedStoreError,
		Decisions: make([]floodgate.Decision, len(req.Hits)), Flags: make([]limiter.HitFlags, len(req.Hits))}
	for i := range req.Hits {
		r.Decisions[i] = floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}
		r.Flags[i] = limiter.Degraded
	}
	return nil
}

// A request that asks the engine nothing reports nothing of the request
// before it, whose buffers it may reuse.
func TestNoEngineCallReportsItsOwnState(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 0}
`)
	eng := &degradedEngine{}
	svc := New(eng, cfg, Options{})
	ctx := context.Background()
	for i := range 3 {
		ra, err := svc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "1")}})
		if err != nil || ra.OverallCode != rlsv3.RateLimitResponse_OK || eng.calls != i+1 {
			t.Fatalf("a: %v %v, %d engine calls", ra, err, eng.calls)
		}
		rb, err := svc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("b", "1")}})
		if err != nil || rb.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || eng.calls != i+1 {
			t.Fatalf("b: %v %v, %d engine calls (a blocked descriptor asks nothing)", rb, err, eng.calls)
		}
		if rb.GetStatuses()[0].GetLimitRemaining() != 0 || ra.GetStatuses()[0].GetLimitRemaining() != 9 {
			t.Fatalf("remaining: a %v, b %v", ra, rb)
		}
	}
}
