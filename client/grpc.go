package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// Entry is one key/value pair of an RLS descriptor.
type Entry struct {
	Key, Value string
}

// Descriptor is an ordered list of entries, most general first, as Envoy
// sends them: {{"remote_address", "10.0.0.1"}, {"path", "/login"}}.
type Descriptor []Entry

// GRPCOptions configure a GRPC client.
type GRPCOptions struct {
	// Domain is the RLS domain of every request. Required.
	Domain string
	// Timeout bounds each call when ctx has no earlier deadline. Zero
	// means 2s.
	Timeout time.Duration
}

// GRPC asks an Envoy RLS v3 service (Floodgate's rls package, or any
// other) over a gRPC connection the caller owns.
type GRPC struct {
	rls     rlsv3.RateLimitServiceClient
	domain  string
	timeout time.Duration
}

// NewGRPC returns a client calling ShouldRateLimit over conn (for example
// from grpc.NewClient).
func NewGRPC(conn grpc.ClientConnInterface, opts GRPCOptions) *GRPC {
	t := opts.Timeout
	if t <= 0 {
		t = 2 * time.Second
	}
	return &GRPC{rls: rlsv3.NewRateLimitServiceClient(conn), domain: opts.Domain, timeout: t}
}

// Check asks with a cost of 1 whether the descriptors may pass.
func (c *GRPC) Check(ctx context.Context, descriptors ...Descriptor) (Decision, error) {
	return c.CheckN(ctx, 1, descriptors...)
}

// CheckN asks with the given cost (hits_addend) whether the descriptors
// may pass.
func (c *GRPC) CheckN(ctx context.Context, cost uint32, descriptors ...Descriptor) (Decision, error) {
	resp, err := c.ShouldRateLimit(ctx, cost, descriptors...)
	if err != nil {
		return Decision{}, err
	}
	return DecisionFromRLS(resp), nil
}

// Wait blocks until Check allows the descriptors, as the package's Wait
// does.
func (c *GRPC) Wait(ctx context.Context, opts WaitOptions, descriptors ...Descriptor) (Decision, error) {
	return Wait(ctx, func(ctx context.Context) (Decision, error) { return c.Check(ctx, descriptors...) }, opts)
}

// ShouldRateLimit sends one raw RLS request and returns the raw answer.
func (c *GRPC) ShouldRateLimit(ctx context.Context, cost uint32, descriptors ...Descriptor) (*rlsv3.RateLimitResponse, error) {
	req := &rlsv3.RateLimitRequest{Domain: c.domain, HitsAddend: cost}
	for _, d := range descriptors {
		pd := &rlv3.RateLimitDescriptor{}
		for _, e := range d {
			pd.Entries = append(pd.Entries, &rlv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, pd)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("client: ShouldRateLimit: %w", err)
	}
	return resp, nil
}

// DecisionFromRLS summarises an RLS answer: Allowed when the overall code
// is OK; Binding, Limit and ResetAfter from the first over-limit status
// (or, when allowed, the status with the least remaining); RetryAfter the
// longest duration_until_reset among over-limit statuses, or the answer's
// Retry-After field when that is shorter: a service that knows some of
// those limits stop the request only all together (quota_mode), so that
// the first to reset lets it through, says so there.
func DecisionFromRLS(resp *rlsv3.RateLimitResponse) Decision {
	d := Decision{Allowed: resp.GetOverallCode() == rlsv3.RateLimitResponse_OK}
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	for _, s := range resp.GetStatuses() {
		if s.GetCurrentLimit() == nil {
			continue
		}
		if s.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			if w := s.GetDurationUntilReset().AsDuration(); w > d.RetryAfter {
				d.RetryAfter = w
			}
			if pick == nil || pick.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				pick = s
			}
			continue
		}
		if pick == nil || (pick.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT && s.GetLimitRemaining() < pick.GetLimitRemaining()) {
			pick = s
		}
	}
	if pick != nil {
		d.Binding = pick.GetCurrentLimit().GetName()
		d.Limit = int64(pick.GetCurrentLimit().GetRequestsPerUnit())
		d.Remaining = int64(pick.GetLimitRemaining())
		d.ResetAfter = pick.GetDurationUntilReset().AsDuration()
	}
	if d.Allowed {
		d.RetryAfter = 0
		return d
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), "Retry-After") {
			if ra, ok := ParseRetryAfter(h.GetValue(), time.Now()); ok && ra > 0 && (d.RetryAfter == 0 || ra < d.RetryAfter) {
				d.RetryAfter = ra
			}
		}
	}
	return d
}
