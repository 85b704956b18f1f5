package metrics_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
)

// window is a limit of 10 a minute named name.
func window(name string) floodgate.Limit {
	return floodgate.Limit{Name: name, Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Minute}
}

// TestObserveDecision counts one request's hits by front end, limit and
// outcome, degraded ones by reason, and leaves peeks out.
func TestObserveDecision(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b, sh := ruletest.Rule(t, window("a")), ruletest.Rule(t, window("b")), ruletest.Shadow(t, window("sh"))
	req := &limiter.Request{Front: limiter.FrontRLS, Hits: []limiter.Hit{{Rule: a}, {Rule: b}, {Rule: sh}}}
	res := &limiter.Result{
		Decisions: []floodgate.Decision{{Allowed: true, Limit: 10, Remaining: 1}, {Limit: 10}, {Limit: 10}},
		Flags:     []limiter.HitFlags{0, 0, limiter.Shadow | limiter.ShadowDenied},
		Degraded:  limiter.DegradedDeadline,
	}
	m.ObserveDecision(req, res)
	m.ObserveDecision(&limiter.Request{Front: limiter.FrontRLS, Peek: true, Hits: req.Hits}, res)
	res.Degraded = limiter.NotDegraded
	m.ObserveDecision(&limiter.Request{Front: limiter.FrontGateway, Hits: req.Hits}, res)
	for _, c := range []struct {
		metric string
		labels promtest.Labels
		want   float64
	}{
		{"floodgate_decisions_total", promtest.Labels{"front_end": "rls", "limit": "a", "outcome": "allowed"}, 1},
		{"floodgate_decisions_total", promtest.Labels{"front_end": "rls", "limit": "b", "outcome": "denied"}, 1},
		{"floodgate_decisions_total", promtest.Labels{"front_end": "rls", "limit": "sh", "outcome": "shadow_denied"}, 1},
		{"floodgate_decisions_total", promtest.Labels{"front_end": "gateway"}, 3},
		{"floodgate_decisions_total", nil, 6}, // the peek counted nothing
		{"floodgate_near_limit_total", promtest.Labels{"front_end": "rls", "limit": "a"}, 1},
		{"floodgate_degraded_decisions_total", promtest.Labels{"front_end": "rls", "reason": "deadline"}, 3},
		{"floodgate_degraded_decisions_total", promtest.Labels{"front_end": "gateway"}, 0},
	} {
		if got := promtest.Value(t, reg, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
}

// TestLimitLabelsAreBounded: names past MaxLimits fold into one series, so
// that limits named by clients cannot grow the metrics without bound.
func TestLimitLabelsAreBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{MaxLimits: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r := ruletest.Rule(t, window(fmt.Sprintf("client-chosen-%d", i)))
		m.ObserveDecision(&limiter.Request{Front: limiter.FrontRLS, Hits: []limiter.Hit{{Rule: r}}},
			&limiter.Result{Decisions: []floodgate.Decision{{Allowed: true, Limit: 10, Remaining: 9}}, Flags: []limiter.HitFlags{0}})
	}
	series := promtest.Find(t, reg, "floodgate_decisions_total", promtest.Labels{"outcome": "allowed"})
	if len(series) != 4 {
		t.Errorf("%d series, want 3 named and %s", len(series), metrics.OtherLimit)
	}
	if got := promtest.Value(t, reg, "floodgate_decisions_total", promtest.Labels{"limit": metrics.OtherLimit}); got != 7 {
		t.Errorf("%s counted %v, want 7", metrics.OtherLimit, got)
	}
}

// TestRulesOfOneNameShareASeries: a limit's rule and the rule of the same
// limit in a reloaded policy count into one series, whichever comes first
// and however often.
func TestRulesOfOneNameShareASeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := &limiter.Result{Decisions: []floodgate.Decision{{Allowed: true, Limit: 10, Remaining: 9}}, Flags: []limiter.HitFlags{0}}
	old, reloaded := ruletest.Rule(t, window("api")), ruletest.Rule(t, window("api"))
	for _, r := range []*limiter.Rule{old, old, reloaded, old, reloaded} {
		m.ObserveDecision(&limiter.Request{Front: limiter.FrontGateway, Hits: []limiter.Hit{{Rule: r}}}, res)
	}
	if n := len(promtest.Find(t, reg, "floodgate_decisions_total", promtest.Labels{"outcome": "allowed"})); n != 1 {
		t.Errorf("%d series, want 1", n)
	}
	if got := promtest.Value(t, reg, "floodgate_decisions_total", promtest.Labels{"limit": "api", "outcome": "allowed"}); got != 5 {
		t.Errorf("counted %v, want 5", got)
	}
}

// BenchmarkObserveDecision: counting one decision of one limit.
func BenchmarkObserveDecision(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := ruletest.Rule(b, floodgate.Limit{Name: "tiny", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Minute})
	req := &limiter.Request{Front: limiter.FrontGateway, Hits: []limiter.Hit{{Rule: r}}}
	res := &limiter.Result{Decisions: []floodgate.Decision{{Limit: 10}}, Flags: []limiter.HitFlags{0}}
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveDecision(req, res)
	}
}

// TestFrontEndAnswers counts what only front ends see.
func TestFrontEndAnswers(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.Rejected(limiter.FrontGateway, "a", 429)
	m.Rejected(limiter.FrontGateway, "", 403)
	m.Rejected(limiter.FrontHTTPAPI, "a", 429)
	m.Upstream("r", 502)
	m.Upstream("r", 502)
	m.Queued("q", 1)
	m.InvalidToken("expired")
	for _, c := range []struct {
		metric string
		labels promtest.Labels
		want   float64
	}{
		{"floodgate_rejections_total", promtest.Labels{"front_end": "gateway", "limit": "a", "code": "429"}, 1},
		{"floodgate_rejections_total", promtest.Labels{"front_end": "gateway", "code": "403"}, 1},
		{"floodgate_rejections_total", promtest.Labels{"front_end": "http_api"}, 1},
		{"floodgate_upstream_responses_total", promtest.Labels{"route": "r", "code": "502"}, 2},
		{"floodgate_queue_length", promtest.Labels{"limit": "q"}, 1},
		{"floodgate_invalid_tokens_total", promtest.Labels{"reason": "expired"}, 1},
	} {
		if got := promtest.Value(t, reg, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
	if len(limiter.FrontEnds()) > 4 {
		t.Errorf("metrics keep series for 4 front ends; there are %d", len(limiter.FrontEnds()))
	}
}

// TestRulesGoWithTheirSeries: a rule finds its series on itself, so a
// rule dropped by a reload is freed, whatever the number of reloads;
// before, a map by rule held up to 4,096 of them. A second Metrics that
// counts the same rule counts into its own series.
func TestRulesGoWithTheirSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := &limiter.Result{Decisions: []floodgate.Decision{{Allowed: true, Limit: 10, Remaining: 9}}, Flags: []limiter.HitFlags{0}}
	var ws []weak.Pointer[limiter.Rule]
	for range 50 {
		r := ruletest.Rule(t, window("api"))
		m.ObserveDecision(&limiter.Request{Front: limiter.FrontGateway, Hits: []limiter.Hit{{Rule: r}}}, res)
		ws = append(ws, weak.Make(r))
	}
	kept := ruletest.Rule(t, window("api"))
	m.ObserveDecision(&limiter.Request{Front: limiter.FrontGateway, Hits: []limiter.Hit{{Rule: kept}}}, res)
	reg2 := prometheus.NewRegistry()
	m2, err := metrics.New(reg2, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m2.ObserveDecision(&limiter.Request{Front: limiter.FrontGateway, Hits: []limiter.Hit{{Rule: kept}}}, res)
	for range 10 {
		runtime.GC()
	}
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("rule %d is still held after it was dropped", i)
		}
	}
	runtime.KeepAlive(m) // the Metrics lives on: only the rules may go
	if got := promtest.Value(t, reg, "floodgate_decisions_total", promtest.Labels{"limit": "api", "outcome": "allowed"}); got != 51 {
		t.Errorf("counted %v, want 51", got)
	}
	if got := promtest.Value(t, reg2, "floodgate_decisions_total", promtest.Labels{"limit": "api", "outcome": "allowed"}); got != 1 {
		t.Errorf("the second Metrics counted %v, want 1", got)
	}
}
