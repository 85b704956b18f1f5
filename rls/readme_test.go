package rls

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate/floodgate/limiter"
)

// The configurations below are the examples of envoyproxy/ratelimit's
// README; each test checks the answers the README describes.

func TestReadmeExample1TopLevelValues(t *testing.T) {
	c, _ := startService(t, mustParse(t, `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`), newClock(), Options{})
	r := ask(t, c, "mongo_cps", desc("database", "users"))
	st := r.Statuses[0]
	if r.OverallCode != ok || st.Code != ok || st.CurrentLimit.GetRequestsPerUnit() != 500 ||
		st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || st.LimitRemaining != 499 {
		t.Fatalf("database=users: %v", r)
	}
	if st.CurrentLimit.GetName() != "mongo_cps.database_users" {
		t.Errorf("limit name %q, want the descriptor path mongo_cps.database_users", st.CurrentLimit.GetName())
	}
	// A value that is not configured has no limit at all.
	r = ask(t, c, "mongo_cps", desc("database", "other"))
	if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("database=other: %v, want OK without a limit", r)
	}
	// An unknown domain limits nothing.
	r = ask(t, c, "nope", desc("database", "users"))
	if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown domain: %v", r)
	}
}

func TestReadmeExample2NestedAndAnyValue(t *testing.T) {
	c, _ := startService(t, mustParse(t, `
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`), newClock(), Options{})
	mkt := func(n string) *rlsv3.RateLimitResponse {
		return ask(t, c, "messaging", desc("message_type", "marketing", "to_number", n), desc("to_number", n))
	}
	for i := 1; i <= 5; i++ {
		r := mkt("2061111111")
		if r.OverallCode != ok {
			t.Fatalf("marketing message %d: %v", i, r)
		}
		if got := r.Statuses[0].LimitRemaining; got != uint32(5-i) {
			t.Errorf("message %d: marketing remaining %d, want %d", i, got, 5-i)
		}
		if got := r.Statuses[1].LimitRemaining; got != uint32(100-i) {
			t.Errorf("message %d: per-number remaining %d, want %d", i, got, 100-i)
		}
	}
	r := mkt("2061111111")
	if r.OverallCode != over || r.Statuses[0].Code != over || r.Statuses[1].Code != ok {
		t.Fatalf("6th marketing message: %v, want the marketing descriptor over its limit", r)
	}
	if r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
		t.Errorf("unit %v, want DAY", r.Statuses[0].CurrentLimit.GetUnit())
	}
	// All or nothing: the denied request did not use the per-number limit.
	r = ask(t, c, "messaging", desc("to_number", "2061111111"))
	if r.OverallCode != ok || r.Statuses[0].LimitRemaining != 94 {
		t.Fatalf("per-number limit after the denial: %v, want 94 remaining (5 used)", r)
	}
	// Every number has its own counters.
	r = mkt("2062222222")
	if r.OverallCode != ok || r.Statuses[0].LimitRemaining != 4 || r.Statuses[1].LimitRemaining != 99 {
		t.Fatalf("another number: %v", r)
	}
	if h := header(r, "RateLimit-Policy"); h == "" || header(r, "RateLimit") == "" {
		t.Errorf("no RateLimit fields in %v", r.ResponseHeadersToAdd)
	}
}

func TestReadmeExample3MostSpecificWinsAndZeroBlocks(t *testing.T) {
	c, _ := startService(t, mustParse(t, `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`), newClock(), Options{})
	for i := 1; i <= 10; i++ {
		if r := ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")); r.OverallCode != ok {
			t.Fatalf("50.0.0.1 request %d: %v", i, r)
		}
	}
	if r := ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")); r.OverallCode != over {
		t.Fatalf("11th request in a second: %v", r)
	}
	if r := ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.2")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 9 {
		t.Fatalf("another address has its own counter: %v", r)
	}
	r := ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
	if r.OverallCode != over || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 {
		t.Fatalf("blacklisted address: %v", r)
	}
	if header(r, "Retry-After") == "" {
		t.Errorf("no Retry-After on OVER_LIMIT: %v", r.ResponseHeadersToAdd)
	}
}

func TestReadmeExample4DepthMustMatch(t *testing.T) {
	flat := mustParse(t, `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`)
	c, _ := startService(t, flat, newClock(), Options{})
	r := ask(t, c, "example4", desc("key", "value", "subkey", "subvalue"))
	if r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("two entries matched a one-level configuration: %v", r)
	}
	nested := mustParse(t, `
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`)
	c, _ = startService(t, nested, newClock(), Options{})
	r = ask(t, c, "example4", desc("key", "value", "subkey", "subvalue"))
	if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 300 || r.Statuses[0].LimitRemaining != 299 {
		t.Fatalf("nested match: %v", r)
	}
	// A request that stops at the first level has no limit there.
	if r = ask(t, c, "example4", desc("key", "value")); r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("one entry matched the nested limit: %v", r)
	}
}

func TestReadmeExample5Unlimited(t *testing.T) {
	c, _ := startService(t, mustParse(t, `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`), newClock(), Options{})
	for range 200 {
		r := ask(t, c, "internal", desc("ldap", "anything"))
		if r.OverallCode != ok || r.Statuses[0].LimitRemaining != math.MaxUint32 {
			t.Fatalf("unlimited: %v", r)
		}
	}
	r := ask(t, c, "internal", desc("azure", "x"))
	if r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || r.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("azure: %v", r)
	}
}

func TestReadmeExample6ShadowMode(t *testing.T) {
	var shadowOver atomic.Int64
	c, _ := startServiceWith(t, mustParse(t, `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`), newClock(), Options{}, limiter.Options{Observer: shadowDenials(&shadowOver)})
	for i := 1; i <= 30; i++ {
		r := ask(t, c, "example6", desc("service", "auth-service", "user", "user-a"))
		if r.OverallCode != ok || r.Statuses[0].Code != ok {
			t.Fatalf("shadow user-a request %d: %v", i, r)
		}
		if header(r, "Retry-After") != "" || header(r, "RateLimit") != "" {
			t.Fatalf("a shadow limit added fields: %v", r.ResponseHeadersToAdd)
		}
	}
	if shadowOver.Load() != 20 {
		t.Errorf("shadow breaches observed %d, want 20 (requests 11..30)", shadowOver.Load())
	}
	for i := 1; i <= 20; i++ {
		if r := ask(t, c, "example6", desc("service", "auth-service", "user", "user-b")); r.OverallCode != ok {
			t.Fatalf("user-b request %d: %v", i, r)
		}
	}
	if r := ask(t, c, "example6", desc("service", "auth-service", "user", "user-b")); r.OverallCode != over {
		t.Fatalf("user-b 21st request: %v", r)
	}
}

func TestReadmeExample7Replaces(t *testing.T) {
	c, _ := startService(t, mustParse(t, `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`), newClock(), Options{})
	d1 := desc("key_1", "value_1", "user", "bkthomps")
	d2 := desc("key_2", "value_2", "user", "bkthomps")
	for i := 1; i <= 10; i++ {
		r := ask(t, c, "example7", d1, d2)
		if r.OverallCode != ok {
			t.Fatalf("both descriptors, request %d: %v (the 10/s limit replaces the 5/s one)", i, r)
		}
		if r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("the replaced limit still applies: %v", r.Statuses[0])
		}
	}
	if r := ask(t, c, "example7", d1, d2); r.OverallCode != over || r.Statuses[1].Code != over {
		t.Fatalf("11th request: %v", r)
	}
	// The replaced limit was not affected: all 5 are left.
	r := ask(t, c, "example7", d1)
	if r.OverallCode != ok || r.Statuses[0].CurrentLimit.GetName() != "specific_limit" || r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("specific_limit alone: %v, want 4 remaining", r)
	}
}

func TestReadmeExample8DetailedMetric(t *testing.T) {
	c, _ := startService(t, mustParse(t, `
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`), newClock(), Options{})
	if r := ask(t, c, "example8", desc("key1", "unspecified_value")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
		t.Fatalf("unspecified value: %v", r)
	}
	if r := ask(t, c, "example8", desc("key1", "value1")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 20 {
		t.Fatalf("value1: %v", r)
	}
}

func TestReadmeExample9Wildcard(t *testing.T) {
	c, _ := startService(t, mustParse(t, `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key1
    value: val*
    rate_limit:
      unit: minute
      requests_per_unit: 3
`), newClock(), Options{})
	for i := 1; i <= 20; i++ {
		if r := ask(t, c, "example9", desc("key1", "value_1")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != uint32(20-i) {
			t.Fatalf("value_1 request %d: %v", i, r)
		}
	}
	if r := ask(t, c, "example9", desc("key1", "value_1")); r.OverallCode != over {
		t.Fatalf("value_1 21st: %v", r)
	}
	// value_2 matches the same wildcard but counts on its own.
	if r := ask(t, c, "example9", desc("key1", "value_2")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("value_2: %v", r)
	}
	// The longest matching prefix wins; val* catches the rest.
	if r := ask(t, c, "example9", desc("key1", "valid")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("valid: %v", r)
	}
	if r := ask(t, c, "example9", desc("key1", "other")); r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("other: %v", r)
	}
}

func TestWindowResetsOnTheClock(t *testing.T) {
	clock := newClock()
	c, _ := startService(t, mustParse(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
`), clock, Options{})
	ask(t, c, "d", desc("k", "v"))
	ask(t, c, "d", desc("k", "v"))
	r := ask(t, c, "d", desc("k", "v"))
	if r.OverallCode != over {
		t.Fatalf("3rd: %v", r)
	}
	// 10 s into the minute: 50 s until the window resets.
	if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 50*time.Second {
		t.Errorf("duration_until_reset %s, want 50s", got)
	}
	if got := header(r, "Retry-After"); got != "50" {
		t.Errorf("Retry-After %q, want 50", got)
	}
	if got := header(r, "RateLimit-Policy"); got != `"d.k";q=2;w=60` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := header(r, "RateLimit"); got != `"d.k";r=0;t=50` {
		t.Errorf("RateLimit %q", got)
	}
	clock.advance(50 * time.Second)
	if r := ask(t, c, "d", desc("k", "v")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("next window: %v", r)
	}
}
