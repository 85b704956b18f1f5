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
// failure policy.
type degradedEngine struct{}

func (degradedEngine) Check(ctx context.Context, hits []limiter.Hit) (limiter.Result, error) {
	var r limiter.Result
	err := degradedEngine{}.CheckInto(ctx, hits, &r)
	return r, err
}

func (e degradedEngine) Peek(ctx context.Context, hits []limiter.Hit) (limiter.Result, error) {
	return e.Check(ctx, hits)
}

func (degradedEngine) CheckInto(_ context.Context, hits []limiter.Hit, r *limiter.Result) error {
	*r = limiter.Result{Allowed: true, Binding: 0, Degraded: true,
		Decisions: make([]floodgate.Decision, len(hits)), Flags: make([]limiter.HitFlags, len(hits))}
	for i := range hits {
		r.Decisions[i] = floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}
		r.Flags[i] = limiter.Degraded
	}
	return nil
}

func (e degradedEngine) PeekInto(ctx context.Context, hits []limiter.Hit, r *limiter.Result) error {
	return e.CheckInto(ctx, hits, r)
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
	type seen struct {
		limit          string
		over, degraded bool
	}
	var got []seen
	svc := New(degradedEngine{}, cfg, Options{Observe: func(_, limit string, over, _, degraded bool) {
		got = append(got, seen{limit, over, degraded})
	}})
	ctx := context.Background()
	for range 3 {
		got = got[:0]
		ra, err := svc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "1")}})
		if err != nil || len(got) != 1 || !got[0].degraded || got[0].over {
			t.Fatalf("a: %v %v %+v", ra, err, got)
		}
		got = got[:0]
		rb, err := svc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("b", "1")}})
		if err != nil || len(got) != 1 || got[0].degraded || !got[0].over {
			t.Fatalf("b: %v %v %+v", rb, err, got)
		}
		if rb.GetStatuses()[0].GetLimitRemaining() != 0 || ra.GetStatuses()[0].GetLimitRemaining() != 9 {
			t.Fatalf("remaining: a %v, b %v", ra, rb)
		}
	}
}
