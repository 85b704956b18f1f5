package rls

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestOverrideSpanOverflow: a limit given in a request whose unit ×
// unit_multiplier does not fit a time span is refused, not wrapped around
// into a short window.
func TestOverrideSpanOverflow(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{})
	d := desc("user", "g")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_YEAR}
	ask(t, c, "d", d) // a year × 1 is fine
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_YEAR,
		UnitMultiplier: wrapperspb.UInt32(585)} // 585 years overflow int64 nanoseconds
	_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{d}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("585 years: %v, want InvalidArgument", err)
	}
}
