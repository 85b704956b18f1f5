package rls

import (
	"fmt"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
)

// seriesConfig has a limit named by its descriptor's path (d.a_b), one named
// in the file (checkout) and one a request's override replaces (d.plan).
const seriesConfig = `
domain: d
descriptors:
  - key: a
    value: b
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: cart
    rate_limit: {name: checkout, unit: minute, requests_per_unit: 10}
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// startMetered serves seriesConfig with Floodgate's metrics as the engine's
// Observer.
func startMetered(t *testing.T) (func(...*rlv3.RateLimitDescriptor), *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := startServiceWith(t, mustParse(t, seriesConfig), newClock(), Options{}, limiter.Options{Observer: m})
	return func(ds ...*rlv3.RateLimitDescriptor) {
		t.Helper()
		if r := ask(t, c, "d", ds...); r.OverallCode != ok {
			t.Fatalf("%v", r)
		}
	}, reg
}

// withLimit gives d a limit of its own in the request.
func withLimit(d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: typev3.RateLimitUnit_MINUTE}
	return d
}

// TestRequestNamedLimitsLeaveConfiguredLimitsTheirSeries: a client sends
// more than metrics.DefaultMaxLimits limits of its own (overrides of
// descriptors no configured limit matches), each with a fresh name; those
// past the bound fold into _other, but the limits of the descriptor files
// counted afterwards, for the first time, get series of their own, and so
// does an override of a configured limit, which keeps its name.
func TestRequestNamedLimitsLeaveConfiguredLimitsTheirSeries(t *testing.T) {
	t.Parallel()
	ask, reg := startMetered(t)
	const flood = metrics.DefaultMaxLimits + 100
	const perRequest = 50
	for i := 0; i < flood; i += perRequest {
		var ds []*rlv3.RateLimitDescriptor
		for j := i; j < i+perRequest; j++ {
			ds = append(ds, withLimit(desc("client", fmt.Sprint(j))))
		}
		ask(ds...)
	}
	ask(desc("a", "b"), desc("cart", "c1"))
	ask(withLimit(desc("plan", "gold")))
	for _, c := range []struct {
		limit string
		want  float64
	}{{"d.a_b", 1}, {"checkout", 1}, {"d.plan", 1}, {metrics.OtherLimit, flood - metrics.DefaultMaxLimits}} {
		got := promtest.Value(t, reg, "floodgate_decisions_total", promtest.Labels{"front_end": "rls", "limit": c.limit, "outcome": "allowed"})
		if got != c.want {
			t.Errorf("floodgate_decisions_total{limit=%q,outcome=allowed} = %v, want %v", c.limit, got, c.want)
		}
	}
	// The request-named limits stay bounded.
	if n := len(promtest.Find(t, reg, "floodgate_decisions_total", promtest.Labels{"front_end": "rls", "outcome": "allowed"})); n != metrics.DefaultMaxLimits+4 {
		t.Errorf("%d limits with series, want %d", n, metrics.DefaultMaxLimits+4)
	}
}

// TestOverrideNamedLikeAConfiguredLimitKeepsItsOwnName: envoyproxy/ratelimit
// names a descriptor given with a limit domain.key_value, a key alone
// without a value, so the key a_b without a value is named as the
// configured descriptor a=b (d.a_b). The request's limit answers and is
// counted under a name of its own, never as the configured limit's, while
// the statistics keep envoyproxy/ratelimit's name for both.
func TestOverrideNamedLikeAConfiguredLimitKeepsItsOwnName(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewStats(reg, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := startServiceWith(t, mustParse(t, seriesConfig), newClock(), Options{Stats: st}, limiter.Options{Observer: m})
	r := ask(t, c, "d", withLimit(desc("a_b", "")), withLimit(desc("a_b", "")), desc("a", "b"))
	if r.OverallCode != ok {
		t.Fatalf("%v", r)
	}
	own := r.Statuses[0].GetCurrentLimit().GetName()
	if conf := r.Statuses[2].GetCurrentLimit().GetName(); conf != "d.a_b" || own == conf || own == "" {
		t.Fatalf("override named %q, configured limit %q: want a name of the override's own", own, conf)
	}
	for _, c := range []struct {
		limit string
		want  float64
	}{{"d.a_b", 1}, {own, 2}} {
		got := promtest.Value(t, reg, "floodgate_decisions_total", promtest.Labels{"front_end": "rls", "limit": c.limit, "outcome": "allowed"})
		if got != c.want {
			t.Errorf("floodgate_decisions_total{limit=%q,outcome=allowed} = %v, want %v", c.limit, got, c.want)
		}
	}
	// envoyproxy/ratelimit counts both under its name for them, d.a_b.
	if got := promtest.Value(t, reg, "ratelimit_service_rate_limit_total_hits", promtest.Labels{"domain": "d", "key1": "a_b"}); got != 3 {
		t.Errorf("ratelimit_service_rate_limit_total_hits{key1=a_b} = %v, want 3", got)
	}
}
