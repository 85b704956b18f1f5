package rls

import (
	"context"
	"errors"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// FuzzParse feeds arbitrary files to the parser: it never panics, and
// every failure is an ErrConfig naming the file.
func FuzzParse(f *testing.F) {
	f.Add(basic)
	f.Add("domain: d\ndescriptors:\n  - key: a\n    value: b*\n    rate_limit: {unit: day, requests_per_unit: 0}\n")
	f.Add("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true}\n    descriptors: [{key: b, shadow_mode: true}]\n")
	f.Add("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: month, requests_per_unit: 9, quota: {time_zone: Asia/Kolkata, anchor_day: 31}}\n")
	f.Add("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra, burst: 9, replaces: [{name: x}]}\n")
	f.Add("{}")
	f.Add("- 1\n- 2\n")
	f.Fuzz(func(t *testing.T, src string) {
		c, err := Parse("fuzz.yaml", []byte(src))
		if err != nil {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error without ErrConfig or file name: %v", err)
			}
			return
		}
		if len(c.Domains()) != 1 {
			t.Fatalf("a valid file gave %d domains", len(c.Domains()))
		}
	})
}

// FuzzShouldRateLimit sends arbitrary descriptors: the service never
// panics and answers either InvalidArgument or one status per descriptor.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("user", "u", "api", "k", uint32(1), uint32(0))
	f.Add("", "x", "user", "", uint32(0), uint32(7))
	f.Add("api", "k", "api", "k", uint32(1000), uint32(3))
	st, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	cfg, err := Parse("fuzz.yaml", []byte(basic))
	if err != nil {
		f.Fatal(err)
	}
	svc := New(limiter.New(st, limiter.Options{}), cfg, Options{})
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, hits, override uint32) {
		d1 := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k1, Value: v1}}}
		d2 := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k1, Value: v1}, {Key: k2, Value: v2}}}
		d3 := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k2, Value: v2}}}
		if override > 0 {
			// Units 1..8: 8 is not a unit and must be InvalidArgument.
			d3.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: override % 50,
				Unit: typev3.RateLimitUnit(1 + override%8)}
		}
		req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{d1, d2, d3}, HitsAddend: hits}
		r, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error %v", err)
			}
			return
		}
		if len(r.Statuses) != 3 {
			t.Fatalf("%d statuses for 3 descriptors", len(r.Statuses))
		}
		over := false
		for _, s := range r.Statuses {
			if s.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
				over = true
			}
		}
		if over != (r.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) {
			t.Fatalf("overall %v disagrees with the statuses %v", r.OverallCode, r.Statuses)
		}
	})
}
