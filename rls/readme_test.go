package rls

import (
	"fmt"
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/leaktest"
	"github.com/floodgate/floodgate/internal/promtest"
)

// The configurations below are the examples 1 to 11 of
// envoyproxy/ratelimit's README; each test checks the answers the README
// describes, on the embedded store and on Redis, in Floodgate's mode and in
// the compatibility mode (where the two differ, both answers are checked).

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedRedis != nil {
		sharedRedis.Stop()
	}
	leaktest.Exit(code)
}

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
	noUnit = rlsv3.RateLimitResponse_RateLimit_UNKNOWN
)

func TestReadmeExample1TopLevelValues(t *testing.T) {
	everywhere(t, Second, func(r *run) error {
		c := r.start(`
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
`, Options{})
		for _, db := range []string{"users", "default"} {
			resp := r.ask(c, req("mongo_cps", desc("database", db)))
			if err := statusIs(resp.Statuses[0], ok, 500, second, 499); err != nil || resp.OverallCode != ok {
				return fmt.Errorf("database=%s: %v", db, resp)
			}
			// The limit is named by its path, or as configured (here not
			// at all) in compatibility mode.
			name := "mongo_cps.database_" + db
			if r.compat {
				name = ""
			}
			if got := resp.Statuses[0].CurrentLimit.GetName(); got != name {
				return fmt.Errorf("limit name %q, want %q", got, name)
			}
		}
		// A value that is not configured, or an unknown domain: no limit.
		for _, rq := range []*rlsv3.RateLimitRequest{req("mongo_cps", desc("database", "other")), req("nope", desc("database", "users"))} {
			if resp := r.ask(c, rq); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
				return fmt.Errorf("%v: %v, want OK without a limit", rq, resp)
			}
		}
		return nil
	})
}

func TestReadmeExample2NestedAndAnyValue(t *testing.T) {
	everywhere(t, Day, func(r *run) error {
		c := r.start(`
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
`, Options{})
		mkt := func(n string) *rlsv3.RateLimitResponse {
			return r.ask(c, req("messaging", desc("message_type", "marketing", "to_number", n), desc("to_number", n)))
		}
		for i := 1; i <= 5; i++ {
			resp := mkt("2061111111")
			if resp.OverallCode != ok || statusIs(resp.Statuses[0], ok, 5, day, uint32(5-i)) != nil ||
				statusIs(resp.Statuses[1], ok, 100, day, uint32(100-i)) != nil {
				return fmt.Errorf("marketing message %d: %v", i, resp)
			}
		}
		// The 6th: the marketing limit says no. Floodgate charges none of
		// the descriptors of a request that is over the limit; the
		// compatibility mode charges each descriptor on its own, as
		// envoyproxy/ratelimit does.
		resp := mkt("2061111111")
		perNumber := uint32(95)
		if r.compat {
			perNumber = 94
		}
		if resp.OverallCode != over || statusIs(resp.Statuses[0], over, 5, day, 0) != nil ||
			statusIs(resp.Statuses[1], ok, 100, day, perNumber) != nil {
			return fmt.Errorf("6th marketing message: %v", resp)
		}
		resp = r.ask(c, req("messaging", desc("to_number", "2061111111")))
		if statusIs(resp.Statuses[0], ok, 100, day, perNumber-1) != nil {
			return fmt.Errorf("per-number limit after the 6th: %v, want %d left", resp, perNumber-1)
		}
		// Every number has its own counters.
		resp = mkt("2062222222")
		if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 4 || resp.Statuses[1].LimitRemaining != 99 {
			return fmt.Errorf("another number: %v", resp)
		}
		return nil
	})
}

func TestReadmeExample3MostSpecificWinsAndZeroBlocks(t *testing.T) {
	everywhere(t, Second, func(r *run) error {
		c := r.start(`
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
`, Options{})
		for i := 1; i <= 10; i++ {
			if resp := r.ask(c, req("edge_proxy_per_ip", desc("remote_address", "50.0.0.1"))); resp.OverallCode != ok {
				return fmt.Errorf("50.0.0.1 request %d: %v", i, resp)
			}
		}
		if resp := r.ask(c, req("edge_proxy_per_ip", desc("remote_address", "50.0.0.1"))); resp.OverallCode != over {
			return fmt.Errorf("11th request in a second: %v", resp)
		}
		if resp := r.ask(c, req("edge_proxy_per_ip", desc("remote_address", "50.0.0.2"))); statusIs(resp.Statuses[0], ok, 10, second, 9) != nil {
			return fmt.Errorf("another address has its own counter: %v", resp)
		}
		if resp := r.ask(c, req("edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))); resp.OverallCode != over ||
			statusIs(resp.Statuses[0], over, 0, second, 0) != nil {
			return fmt.Errorf("blacklisted address: %v", resp)
		}
		return nil
	})
}

func TestReadmeExample4DepthMustMatch(t *testing.T) {
	everywhere(t, Second, func(r *run) error {
		flat := r.start(`
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`, Options{})
		if resp := r.ask(flat, req("example4", desc("key", "value", "subkey", "subvalue"))); resp.Statuses[0].CurrentLimit != nil {
			return fmt.Errorf("two entries matched a one-level configuration: %v", resp)
		}
		nested := r.start(`
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`, Options{})
		if resp := r.ask(nested, req("example4", desc("key", "value", "subkey", "subvalue"))); statusIs(resp.Statuses[0], ok, 300, second, 299) != nil {
			return fmt.Errorf("nested match: %v", resp)
		}
		if resp := r.ask(nested, req("example4", desc("key", "value"))); resp.Statuses[0].CurrentLimit != nil {
			return fmt.Errorf("one entry matched the nested limit: %v", resp)
		}
		return nil
	})
}

func TestReadmeExample5Unlimited(t *testing.T) {
	everywhere(t, Minute, func(r *run) error {
		c := r.start(`
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`, Options{})
		for range 150 {
			if resp := r.ask(c, req("internal", desc("ldap", "anything"))); resp.OverallCode != ok ||
				statusIs(resp.Statuses[0], ok, 0, noUnit, math.MaxUint32) != nil || resp.Statuses[0].CurrentLimit != nil {
				return fmt.Errorf("unlimited: %v", resp)
			}
		}
		if resp := r.ask(c, req("internal", desc("azure", "x"))); statusIs(resp.Statuses[0], ok, 100, minute, 99) != nil {
			return fmt.Errorf("azure: %v", resp)
		}
		// An unlimited descriptor never reaches the store, nor the
		// statistics.
		if n := r.stat("ratelimit_service_rate_limit_total_hits", promtest.Labels{"key1": "ldap"}); n != 0 {
			return fmt.Errorf("ldap counted %v hits", n)
		}
		return nil
	})
}

func TestReadmeExample6ShadowMode(t *testing.T) {
	everywhere(t, Second, func(r *run) error {
		c := r.start(`
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
`, Options{})
		for i := 1; i <= 30; i++ {
			resp := r.ask(c, req("example6", desc("service", "auth-service", "user", "user-a")))
			if resp.OverallCode != ok || resp.Statuses[0].Code != ok {
				return fmt.Errorf("shadow user-a request %d: %v", i, resp)
			}
			if header(resp, "Retry-After") != "" || header(resp, "RateLimit") != "" {
				return fmt.Errorf("a shadow limit added fields: %v", resp.ResponseHeadersToAdd)
			}
		}
		// The breaches are counted.
		key := promtest.Labels{"domain": "example6", "key1": "service", "key2": "user_user-a"}
		if n := r.stat("ratelimit_service_rate_limit_shadow_mode", key); n != 20 {
			return fmt.Errorf("shadow_mode counted %v, want 20 (requests 11 to 30)", n)
		}
		for i := 1; i <= 20; i++ {
			if resp := r.ask(c, req("example6", desc("service", "auth-service", "user", "user-b"))); resp.OverallCode != ok {
				return fmt.Errorf("user-b request %d: %v", i, resp)
			}
		}
		if resp := r.ask(c, req("example6", desc("service", "auth-service", "user", "user-b"))); resp.OverallCode != over {
			return fmt.Errorf("user-b 21st request: %v", resp)
		}
		return nil
	})
}

func TestReadmeExample7Replaces(t *testing.T) {
	everywhere(t, Second, func(r *run) error {
		c := r.start(`
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
`, Options{})
		d1 := desc("key_1", "value_1", "user", "bkthomps")
		d2 := desc("key_2", "value_2", "user", "bkthomps")
		for i := 1; i <= 10; i++ {
			resp := r.ask(c, req("example7", d1, d2))
			if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil || statusIs(resp.Statuses[1], ok, 10, second, uint32(10-i)) != nil {
				return fmt.Errorf("both descriptors, request %d: %v (the 10/s limit replaces the 5/s one)", i, resp)
			}
		}
		if resp := r.ask(c, req("example7", d1, d2)); resp.OverallCode != over || resp.Statuses[1].Code != over {
			return fmt.Errorf("11th request: %v", resp)
		}
		// The replaced limit was not affected: all 5 are left.
		resp := r.ask(c, req("example7", d1))
		if statusIs(resp.Statuses[0], ok, 5, second, 4) != nil || resp.Statuses[0].CurrentLimit.GetName() != "specific_limit" {
			return fmt.Errorf("specific_limit alone: %v, want 4 left", resp)
		}
		// The other limit alone still applies.
		if resp := r.ask(c, req("example7", d2)); resp.OverallCode != over {
			return fmt.Errorf("key_2 alone: %v", resp)
		}
		return nil
	})
}

func TestReadmeExample8DetailedMetric(t *testing.T) {
	everywhere(t, Minute, func(r *run) error {
		c := r.start(`
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
`, Options{})
		for _, v := range []string{"unspecified_value", "unspecified_value2"} {
			if resp := r.ask(c, req("example8", desc("key1", v))); statusIs(resp.Statuses[0], ok, 10, minute, 9) != nil {
				return fmt.Errorf("%s: %v", v, resp)
			}
		}
		if resp := r.ask(c, req("example8", desc("key1", "value1"))); statusIs(resp.Statuses[0], ok, 20, minute, 19) != nil {
			return fmt.Errorf("value1: %v", resp)
		}
		// The statistics: one per value, not one for the key alone.
		for _, k := range []string{"key1_unspecified_value", "key1_unspecified_value2", "key1_value1"} {
			if n := r.stat("ratelimit_service_rate_limit_total_hits", promtest.Labels{"domain": "example8", "key1": k}); n != 1 {
				return fmt.Errorf("total_hits of %s: %v, want 1", k, n)
			}
		}
		if n := r.stat("ratelimit_service_rate_limit_total_hits", promtest.Labels{"key1": "key1"}); n != 0 {
			return fmt.Errorf("total_hits of key1: %v, want none", n)
		}
		return nil
	})
}

func TestReadmeExample9Wildcards(t *testing.T) {
	everywhere(t, Minute, func(r *run) error {
		c := r.start(`
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
`, Options{})
		for _, d := range [][2]string{{"key1", "value1"}, {"key1", "value2"}, {"key1", "valueXYZ"},
			{"path", "/api/123/action"}, {"path", "/api/user-id/action"},
			{"route", "/api/v1/resource/123/action"}, {"route", "/api/v2/resource/456/action"}} {
			// Each value matches and counts on its own.
			for i := 1; i <= 2; i++ {
				if resp := r.ask(c, req("example9", desc(d[0], d[1]))); statusIs(resp.Statuses[0], ok, 20, minute, uint32(20-i)) != nil {
					return fmt.Errorf("%s=%s, request %d: %v", d[0], d[1], i, resp)
				}
			}
		}
		for _, d := range [][2]string{{"key1", "valu"}, {"path", "/api/123/other"}, {"route", "/api/v1/resource/123/other"}} {
			if resp := r.ask(c, req("example9", desc(d[0], d[1]))); resp.Statuses[0].CurrentLimit != nil {
				return fmt.Errorf("%s=%s matched: %v", d[0], d[1], resp)
			}
		}
		return nil
	})
}

func TestReadmeExample10ValueToMetric(t *testing.T) {
	everywhere(t, Minute, func(r *run) error {
		c := r.start(`
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
`, Options{})
		w := r.start(`
domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
`, Options{})
		r.ask(c, req("example10", desc("route", "api", "http_method", "GET", "subject_id", "123")))
		r.ask(c, req("example10", desc("route", "web", "http_method", "POST", "subject_id", "456")))
		r.ask(w, req("example10_wildcard", desc("user", "alice", "action", "readfile", "resource", "documents")))
		// example10.route_api.http_method_GET.subject_id and so on; the
		// exporter's mapping keeps the first two parts after the domain.
		for _, k := range []promtest.Labels{
			{"domain": "example10", "key1": "route_api", "key2": "http_method_GET"},
			{"domain": "example10", "key1": "route_web", "key2": "http_method_POST"},
			{"domain": "example10_wildcard", "key1": "user_alice", "key2": "action_readfile"},
		} {
			if n := r.stat("ratelimit_service_rate_limit_total_hits", k); n != 1 {
				return fmt.Errorf("total_hits %v: %v, want 1", k, n)
			}
			if n := r.stat("ratelimit_service_rate_limit_within_limit", k); n != 1 {
				return fmt.Errorf("within_limit %v: %v, want 1", k, n)
			}
		}
		return nil
	})
}

func TestReadmeExample11ShareThreshold(t *testing.T) {
	everywhere(t, Hour, func(r *run) error {
		c := r.start(`
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
`, Options{})
		for i := 0; i < 10; i++ {
			f := "files/a.pdf"
			if i >= 5 {
				f = "files/b.csv"
			}
			if resp := r.ask(c, req("example11", desc("files", f))); resp.OverallCode != ok {
				return fmt.Errorf("%s: %v", f, resp)
			}
		}
		if resp := r.ask(c, req("example11", desc("files", "files/c.txt"))); resp.OverallCode != over {
			return fmt.Errorf("files/c.txt after 10 shared requests: %v", resp)
		}
		for i := 1; i <= 10; i++ {
			if resp := r.ask(c, req("example11", desc("files_no_share", "files_no_share/a.pdf"))); resp.OverallCode != ok {
				return fmt.Errorf("files_no_share/a.pdf %d: %v", i, resp)
			}
		}
		if resp := r.ask(c, req("example11", desc("files_no_share", "files_no_share/b.csv"))); statusIs(resp.Statuses[0], ok, 10, hour, 9) != nil {
			return fmt.Errorf("files_no_share/b.csv: %v", resp)
		}
		// With value_to_metric, a shared wildcard is named by its pattern
		// (the README writes route_api.method_GET, but
		// envoyproxy/ratelimit's code and tests name it route_api/*.method).
		m := r.start(`
domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
`, Options{})
		r.ask(m, req("example11_metrics", desc("route", "api/v1", "method", "GET")))
		if resp := r.ask(m, req("example11_metrics", desc("route", "api/v2", "method", "GET"))); resp.Statuses[0].LimitRemaining != 58 {
			return fmt.Errorf("api/v2 shares api/v1's threshold: %v", resp)
		}
		if n := r.stat("ratelimit_service_rate_limit_total_hits", promtest.Labels{"domain": "example11_metrics", "key1": "route_api/*", "key2": "method"}); n != 2 {
			return fmt.Errorf("total_hits of route_api/*.method: %v, want 2", n)
		}
		return nil
	})
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
