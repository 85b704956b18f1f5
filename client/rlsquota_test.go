package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/client"
)

// A check the rate-limit service refuses because every quota_mode
// descriptor is over waits as long as the service's Retry-After says (the
// first of them to be under again), not as long as the longest of their
// durations until reset.
func TestGRPCQuotaModeWaitsAsTheServiceSays(t *testing.T) {
	t.Parallel()
	c := rlsClient(t, `
domain: outbound
descriptors:
  - key: minute
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: day
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
`, "outbound")
	ctx := context.Background()
	both := []client.Descriptor{{{Key: "minute", Value: "x"}}, {{Key: "day", Value: "x"}}}
	if d, err := c.Check(ctx, both...); err != nil || !d.Allowed {
		t.Fatalf("first: %+v %v", d, err)
	}
	d, err := c.Check(ctx, both...)
	if err != nil || d.Allowed {
		t.Fatalf("second: %+v %v, want refused", d, err)
	}
	if d.RetryAfter <= 0 || d.RetryAfter > time.Minute {
		t.Errorf("RetryAfter %v, want at most a minute (the minute's quota is under again then)", d.RetryAfter)
	}
	if d.Binding != "outbound.minute" {
		t.Errorf("binding %q, want outbound.minute", d.Binding)
	}
}
