package metrics_test

import (
	"fmt"
	"math"
	"runtime"
	"sync"
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
	m.LeaseLost("c")
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
		{"floodgate_concurrency_leases_lost_total", promtest.Labels{"limit": "c"}, 1},
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

// TestPerCPUSeriesAgreeWithPrometheus: the series counted per CPU read as
// Prometheus' own would. Eight goroutines observe latencies (bounds
// included) and count decisions and 429s; each histogram must equal a
// prometheus.Histogram given the same durations, bucket by bucket, and
// each counter the number of its events.
func TestPerCPUSeriesAgreeWithPrometheus(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	own := prometheus.NewRegistry()
	gw := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "floodgate_gateway_duration_seconds",
		Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}, []string{"route"})
	up := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "floodgate_upstream_duration_seconds",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"route"})
	own.MustRegister(gw, up)
	durations := []time.Duration{0, time.Nanosecond, 10 * time.Microsecond, 10*time.Microsecond + 1, 25 * time.Microsecond,
		time.Millisecond, 999 * time.Microsecond, 250 * time.Millisecond, time.Second, 2 * time.Second, 30 * time.Second, time.Minute}
	r := ruletest.Rule(t, window("a"))
	req := &limiter.Request{Front: limiter.FrontGateway, Hits: []limiter.Hit{{Rule: r}}}
	allowed := &limiter.Result{Allowed: true, Decisions: []floodgate.Decision{{Allowed: true, Limit: 10, Remaining: 5}}, Flags: []limiter.HitFlags{0}}
	denied := &limiter.Result{Decisions: []floodgate.Decision{{Limit: 10}}, Flags: []limiter.HitFlags{0}}
	const goroutines, rounds = 8, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			route := []string{"x", "y"}[g%2]
			for i := range rounds {
				d := durations[(g+i)%len(durations)]
				m.Latency(route, d, 2*d, i%3 != 0)
				m.ObserveDecision(req, allowed)
				m.ObserveDecision(req, denied)
				m.Rejected(limiter.FrontGateway, "a", 429)
			}
		})
	}
	wg.Wait()
	for g := range goroutines {
		route := []string{"x", "y"}[g%2]
		for i := range rounds {
			d := durations[(g+i)%len(durations)]
			gw.WithLabelValues(route).Observe(d.Seconds())
			if i%3 != 0 {
				up.WithLabelValues(route).Observe((2 * d).Seconds())
			}
		}
	}
	for _, name := range []string{"floodgate_gateway_duration_seconds", "floodgate_upstream_duration_seconds"} {
		for _, route := range []string{"x", "y"} {
			got := promtest.Find(t, reg, name, promtest.Labels{"route": route})
			want := promtest.Find(t, own, name, promtest.Labels{"route": route})
			if len(got) != 1 || len(want) != 1 {
				t.Fatalf("%s{route=%s}: %d series, want 1", name, route, len(got))
			}
			g, w := got[0].GetHistogram(), want[0].GetHistogram()
			if g.GetSampleCount() != w.GetSampleCount() || math.Abs(g.GetSampleSum()-w.GetSampleSum()) > 1e-9*w.GetSampleSum() {
				t.Errorf("%s{route=%s}: count %d sum %v, want %d and %v", name, route, g.GetSampleCount(), g.GetSampleSum(), w.GetSampleCount(), w.GetSampleSum())
			}
			if len(g.GetBucket()) != len(w.GetBucket()) {
				t.Fatalf("%s{route=%s}: %d buckets, want %d", name, route, len(g.GetBucket()), len(w.GetBucket()))
			}
			for i, b := range g.GetBucket() {
				if wb := w.GetBucket()[i]; b.GetUpperBound() != wb.GetUpperBound() || b.GetCumulativeCount() != wb.GetCumulativeCount() {
					t.Errorf("%s{route=%s}: bucket le=%v holds %d, want le=%v %d", name, route, b.GetUpperBound(), b.GetCumulativeCount(), wb.GetUpperBound(), wb.GetCumulativeCount())
				}
			}
		}
	}
	n := float64(goroutines * rounds)
	for _, c := range []struct {
		metric string
		labels promtest.Labels
		want   float64
	}{
		{"floodgate_decisions_total", promtest.Labels{"outcome": "allowed"}, n},
		{"floodgate_decisions_total", promtest.Labels{"outcome": "denied"}, n},
		{"floodgate_near_limit_total", nil, 0},
		{"floodgate_rejections_total", promtest.Labels{"limit": "a", "code": "429"}, n},
	} {
		if got := promtest.Value(t, reg, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
}

// TestUpstreamStatusesCounted: a route's upstream statuses are counted
// exactly from many goroutines at once, each status in one series, those
// past the ones counted per CPU included (an upstream that answers every
// status there is), and a status outside 0-599 too.
func TestUpstreamStatusesCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const statuses, workers = 40, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range statuses {
				// Each worker counts status s s-99 times, the
				// workers taking the statuses in different orders.
				code := 100 + (i+w*5)%statuses
				for range code - 99 {
					m.Upstream("r", code)
				}
			}
			m.Upstream("other", 200)
			m.Upstream("r", 999)
		}()
	}
	wg.Wait()
	for code := 100; code < 100+statuses; code++ {
		labels := promtest.Labels{"route": "r", "code": fmt.Sprint(code)}
		if n := len(promtest.Find(t, reg, "floodgate_upstream_responses_total", labels)); n != 1 {
			t.Fatalf("code %d: %d series, want 1", code, n)
		}
		if got, want := promtest.Value(t, reg, "floodgate_upstream_responses_total", labels), float64(workers*(code-99)); got != want {
			t.Errorf("code %d: %v, want %v", code, got, want)
		}
	}
	for _, c := range []struct {
		route, code string
		want        float64
	}{{"other", "200", workers}, {"r", "999", workers}} {
		if got := promtest.Value(t, reg, "floodgate_upstream_responses_total", promtest.Labels{"route": c.route, "code": c.code}); got != c.want {
			t.Errorf("route %s code %s: %v, want %v", c.route, c.code, got, c.want)
		}
	}
}

// BenchmarkUpstream: what a forwarded request's upstream status costs
// the metrics from every CPU at once; run with -cpu 1,2.
func BenchmarkUpstream(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Upstream("all", 200)
		}
	})
}

// BenchmarkObserveRefusal: what a gateway's 429 costs the metrics (its
// decision, its rejection and its latency) from every CPU at once; run
// with -cpu 1,2: counting per CPU keeps the cost per CPU flat.
func BenchmarkObserveRefusal(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := ruletest.Rule(b, window("tiny"))
	req := &limiter.Request{Front: limiter.FrontGateway, Hits: []limiter.Hit{{Rule: r}}}
	res := &limiter.Result{Decisions: []floodgate.Decision{{Limit: 10}}, Flags: []limiter.HitFlags{0}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ObserveDecision(req, res)
			m.Rejected(limiter.FrontGateway, "tiny", 429)
			m.Latency("all", 3*time.Microsecond, 0, false)
		}
	})
}
