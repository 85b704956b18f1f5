package metrics_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
)

// TestRequestNamedLimitsLeavePolicyLimitsTheirSeries: the rate-limit
// service's clients name limits (descriptors' overrides) past
// DefaultMaxLimits, which fold into OtherLimit; the policy file's limits
// that the gateway and the check API count afterwards, for the first
// time, still get series of their own (decisions, 429s, the leaky
// queue), so that an alert on one of them sees its traffic, and none of
// it lands in OtherLimit.
func TestRequestNamedLimitsLeavePolicyLimitsTheirSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	allowed := &limiter.Result{Allowed: true, Decisions: []floodgate.Decision{{Allowed: true, Limit: 10, Remaining: 9}}, Flags: []limiter.HitFlags{0}}
	denied := &limiter.Result{Decisions: []floodgate.Decision{{Limit: 10}}, Flags: []limiter.HitFlags{0}}
	const flood = metrics.DefaultMaxLimits + 200
	for i := range flood {
		r := ruletest.Rule(t, window(fmt.Sprintf("edge.client_%d", i)))
		m.ObserveDecision(&limiter.Request{Front: limiter.FrontRLS, Hits: []limiter.Hit{{Rule: r}}}, allowed)
	}
	login, signup := ruletest.Rule(t, window("login")), ruletest.Rule(t, window("signup"))
	for range 3 {
		m.ObserveDecision(&limiter.Request{Front: limiter.FrontGateway, Hits: []limiter.Hit{{Rule: login}}}, denied)
		m.Rejected(limiter.FrontGateway, "login", 429)
		m.ObserveDecision(&limiter.Request{Front: limiter.FrontHTTPAPI, Hits: []limiter.Hit{{Rule: signup}}}, denied)
		m.Rejected(limiter.FrontHTTPAPI, "signup", 429)
	}
	m.Queued("login", 2)
	for _, c := range []struct {
		metric string
		labels promtest.Labels
		want   float64
	}{
		{"floodgate_decisions_total", promtest.Labels{"front_end": "gateway", "limit": "login", "outcome": "denied"}, 3},
		{"floodgate_rejections_total", promtest.Labels{"front_end": "gateway", "limit": "login", "code": "429"}, 3},
		{"floodgate_decisions_total", promtest.Labels{"front_end": "http_api", "limit": "signup", "outcome": "denied"}, 3},
		{"floodgate_rejections_total", promtest.Labels{"front_end": "http_api", "limit": "signup", "code": "429"}, 3},
		{"floodgate_queue_length", promtest.Labels{"limit": "login"}, 2},
		{"floodgate_decisions_total", promtest.Labels{"limit": metrics.OtherLimit, "outcome": "denied"}, 0},
		{"floodgate_rejections_total", promtest.Labels{"limit": metrics.OtherLimit}, 0},
		{"floodgate_queue_length", promtest.Labels{"limit": metrics.OtherLimit}, 0},
		{"floodgate_decisions_total", promtest.Labels{"front_end": "rls", "limit": metrics.OtherLimit}, flood - metrics.DefaultMaxLimits},
	} {
		if got := promtest.Value(t, reg, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
	// The request-named limits stay bounded: DefaultMaxLimits of them and
	// OtherLimit, beside the two of the policy.
	if n := len(promtest.Find(t, reg, "floodgate_decisions_total", promtest.Labels{"outcome": "allowed"})); n != metrics.DefaultMaxLimits+3 {
		t.Errorf("%d limits with series, want %d", n, metrics.DefaultMaxLimits+3)
	}
}

// TestLatencySumNeverGoesDown: the sums of the latency histograms only
// grow, however much time they add up, and read as Prometheus' own: a
// month of long upstream answers on a busy gateway adds up to more
// nanoseconds than 64 bits hold (here in four answers of 292 years).
func TestLatencySumNeverGoesDown(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	own := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "own"})
	var last float64
	for i := range 4 {
		d := time.Duration(math.MaxInt64)
		if i == 3 {
			d = 3 * time.Millisecond
		}
		m.Latency("stream", 0, d, true)
		own.Observe(d.Seconds())
		got := promtest.Find(t, reg, "floodgate_upstream_duration_seconds", promtest.Labels{"route": "stream"})
		if len(got) != 1 {
			t.Fatalf("%d series, want 1", len(got))
		}
		sum := got[0].GetHistogram().GetSampleSum()
		var want dto.Metric
		if err := own.Write(&want); err != nil {
			t.Fatal(err)
		}
		if sum < last || math.Abs(sum-want.GetHistogram().GetSampleSum()) > 1e-9*want.GetHistogram().GetSampleSum() {
			t.Fatalf("after %d answers the sum is %v s (%v before), want %v s", i+1, sum, last, want.GetHistogram().GetSampleSum())
		}
		last = sum
	}
}

// TestConfiguredRulesKeepTheirSeries: the rate-limit service's clients
// name limits past DefaultMaxLimits, which fold into OtherLimit; a rule
// marked Configured (a limit of the descriptor files) and counted for the
// first time afterwards by the same front end gets a series of its own.
func TestConfiguredRulesKeepTheirSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	allowed := &limiter.Result{Allowed: true, Decisions: []floodgate.Decision{{Allowed: true, Limit: 10, Remaining: 9}}, Flags: []limiter.HitFlags{0}}
	const flood = metrics.DefaultMaxLimits + 10
	for i := range flood {
		r := ruletest.Rule(t, window(fmt.Sprintf("edge.client_%d", i)))
		m.ObserveDecision(&limiter.Request{Front: limiter.FrontRLS, Hits: []limiter.Hit{{Rule: r}}}, allowed)
	}
	configured := metrics.Configured(ruletest.Rule(t, window("edge.path_/login")))
	late := ruletest.Rule(t, window("edge.client_late"))
	for range 2 {
		m.ObserveDecision(&limiter.Request{Front: limiter.FrontRLS, Hits: []limiter.Hit{{Rule: configured}, {Rule: late}}},
			&limiter.Result{Allowed: true, Decisions: []floodgate.Decision{{Allowed: true}, {Allowed: true}}, Flags: []limiter.HitFlags{0, 0}})
	}
	for _, c := range []struct {
		limit string
		want  float64
	}{{"edge.path_/login", 2}, {"edge.client_late", 0}, {metrics.OtherLimit, flood - metrics.DefaultMaxLimits + 2}} {
		got := promtest.Value(t, reg, "floodgate_decisions_total", promtest.Labels{"front_end": "rls", "limit": c.limit, "outcome": "allowed"})
		if got != c.want {
			t.Errorf("floodgate_decisions_total{limit=%q} = %v, want %v", c.limit, got, c.want)
		}
	}
}
