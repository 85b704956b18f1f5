package rls

import (
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// A request refused because every quota_mode descriptor is over passes as
// soon as one of them is under again: its Retry-After is the shortest of
// their waits, as the engine's Result.RetryAfter says, not the longest. A
// quota descriptor over its limit beside one under it stops nothing, and
// does not lengthen the wait of a request another limit refuses.
func TestQuotaModeRetryAfterIsTheShortestWait(t *testing.T) {
	cfg := mustParse(t, `
domain: q
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	retryAfter := func(r *rlsv3.RateLimitResponse) int64 {
		for _, h := range r.ResponseHeadersToAdd {
			if h.Key == "Retry-After" {
				n, err := strconv.ParseInt(h.Value, 10, 64)
				if err != nil {
					t.Fatalf("Retry-After %q", h.Value)
				}
				return n
			}
		}
		return 0
	}

	t.Run("every quota over", func(t *testing.T) {
		clock := newClock()
		c, _ := startService(t, cfg, clock, Options{})
		if r := ask(t, c, "q", desc("a", "x"), desc("b", "x")); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("first request %v", r.OverallCode)
		}
		r := ask(t, c, "q", desc("a", "x"), desc("b", "x"))
		if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("second request %v, want OVER_LIMIT", r.OverallCode)
		}
		ra := retryAfter(r)
		if ra < 1 || ra > 60 {
			t.Errorf("Retry-After %d, want at most 60 (a is under its limit again within the minute)", ra)
		}
		clock.advance(time.Duration(max(ra, 1)) * time.Second)
		if r := ask(t, c, "q", desc("a", "x"), desc("b", "x")); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("after Retry-After %d s: %v, want OK", ra, r.OverallCode)
		}
	})

	t.Run("another limit refuses", func(t *testing.T) {
		clock := newClock()
		c, _ := startService(t, cfg, clock, Options{})
		// b spends its hour, a and c stay under.
		if r := ask(t, c, "q", desc("b", "x")); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("first request %v", r.OverallCode)
		}
		if r := ask(t, c, "q", desc("c", "x")); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("second request %v", r.OverallCode)
		}
		r := ask(t, c, "q", desc("a", "x"), desc("b", "x"), desc("c", "x"))
		if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("third request %v, want OVER_LIMIT (c)", r.OverallCode)
		}
		for _, h := range r.ResponseHeadersToAdd {
			if h.Key == "RateLimit" && !strings.HasPrefix(h.Value, `"q.c";`) {
				t.Errorf("RateLimit %s: want the binding limit q.c first", h.Value)
			}
		}
		ra := retryAfter(r)
		if ra != 1 {
			t.Errorf("Retry-After %d, want 1 (c's second; a is under, so b stops nothing)", ra)
		}
		clock.advance(time.Duration(max(ra, 1)) * time.Second)
		if r := ask(t, c, "q", desc("a", "x"), desc("b", "x"), desc("c", "x")); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("after Retry-After %d s: %v, want OK", ra, r.OverallCode)
		}
	})
}
