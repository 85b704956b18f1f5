package main

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestRLSCommandHugeHitsAddendIsOverLimit: a hits_addend no limit can hold
// (2^32-1 on the request, 2^32 or 2^40 on a descriptor) is over the limit,
// as envoyproxy/ratelimit answers it, in both modes and on /json. It was
// refused with InvalidArgument (/json 400), which Envoy's default
// failure_mode_deny: false turns into a request let through: a client that
// can set the cost (Envoy's hits_addend format from a header) passed every
// limit by asking for more than 2^31-1 units. A descriptor without a limit
// stays OK, and Floodgate's mode still charges nothing for a refused
// request.
//
// The peer's answers, recorded from envoyproxy/ratelimit built from source
// (commit f2fb157, 2026-12) on Redis with a limit of 4 a minute: every
// one of these requests OVER_LIMIT, limit_remaining 0, current_limit
// {requests_per_unit: 4, unit: MINUTE}; /json 429.
func TestRLSCommandHugeHitsAddendIsOverLimit(t *testing.T) {
	srv := redistest.Start(t)
	for _, compat := range []bool{true, false} {
		name := "floodgate"
		if compat {
			name = "compat"
		}
		t.Run(name, func(t *testing.T) {
			if err := flushAll(srv)(); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			writeRuntime(t, dir, map[string]string{"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 4}
`})
			env := rlsEnvFor(dir, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr,
				"FLOODGATE_STORE_TIMEOUT": "10s"})
			if compat {
				env["FLOODGATE_COMPAT"] = "true"
			}
			p := startRLS(t, env)
			conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := rlsv3.NewRateLimitServiceClient(conn)
			k := func(v string, hits *wrapperspb.UInt64Value) *ratelimitv3.RateLimitDescriptor {
				return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: v}}, HitsAddend: hits}
			}
			free := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "none", Value: "x"}},
				HitsAddend: wrapperspb.UInt64(1 << 40)}
			for _, tc := range []struct {
				name string
				req  *rlsv3.RateLimitRequest
			}{
				{"the request's 2^32-1", &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: math.MaxUint32, Descriptors: []*ratelimitv3.RateLimitDescriptor{k("a", nil)}}},
				{"a descriptor's 2^32", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{k("b", wrapperspb.UInt64(1<<32))}}},
				{"a descriptor's 2^40", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{k("c", wrapperspb.UInt64(1<<40)), free}}},
			} {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := c.ShouldRateLimit(ctx, tc.req)
				cancel()
				if err != nil {
					t.Errorf("%s: %v; want OVER_LIMIT, as envoyproxy/ratelimit answers", tc.name, err)
					continue
				}
				st := r.GetStatuses()[0]
				if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
					st.LimitRemaining != 0 || st.GetCurrentLimit().GetRequestsPerUnit() != 4 {
					t.Errorf("%s: %v; want OVER_LIMIT with 0 left of 4", tc.name, r)
				}
				if n := len(r.GetStatuses()); n > 1 && r.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
					t.Errorf("%s: a descriptor without a limit: %v, want OK", tc.name, r.Statuses[1])
				}
			}
			resp, err := http.Post(p.http+"/json", "application/json",
				strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"j"}],"hitsAddend":"1099511627776"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("/json with a hits_addend of 2^40: %d, want 429", resp.StatusCode)
			}
			if !compat {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{k("a", nil)}})
				if err != nil || r.Statuses[0].LimitRemaining != 3 {
					t.Errorf("after a refused cost of 2^32-1, one more: %v %v; want 3 left (nothing charged)", r, err)
				}
			}
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
