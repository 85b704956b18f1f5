package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
)

// TestMetrics runs lesson 07's stage burst, with a shadow limit added,
// through a gateway whose engine and front end report to one Metrics, and
// reads the series back from the registry.
func TestMetrics(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testMetrics)
}

func testMetrics(t *testing.T, fr string) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg, metrics.Options{}); err == nil {
		t.Error("registering twice on one registry succeeded")
	}
	up := newUpstream(t, nil)
	clock := newTestClock()
	office := newSchoolOffice(t, up.URL)
	shadow := ruletest.Shadow(t, floodgate.Limit{Name: "shadow", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Minute})
	matcher := funcMatcher(func(r *Request, mt *Match) error {
		if err := office.Match(r, mt); err != nil || mt.Reject != 0 {
			return err
		}
		mt.Hits = append(mt.Hits, limiter.Hit{Rule: shadow, Key: "all", Cost: 1})
		return nil
	})
	engine := limiter.New(newMemStore(t, clock.Now), limiter.Options{Observer: m})
	g, err := New(Options{Matcher: matcher, Engine: engine, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	frontURL := serveFront(t, fr, g, nil)
	c := newClient(t)
	for i := 0; i < 8; i++ {
		a := do(t, c, "GET", frontURL+"/notices", nil)
		if a.status == 200 && a.header.Get("RateLimit") != "" && len(a.header.Values("RateLimit")) != 1 {
			t.Errorf("RateLimit lines %v", a.header.Values("RateLimit"))
		}
	}
	do(t, c, "GET", frontURL+"/partner/x", map[string]string{"x-api-key": "nobody"})
	gw := "gateway"
	checks := []struct {
		name   string
		metric string
		labels promtest.Labels
		want   float64
	}{
		{"stage allowed", "floodgate_decisions_total", promtest.Labels{"front_end": gw, "limit": "stage-dev", "outcome": "allowed"}, 5},
		{"stage denied", "floodgate_decisions_total", promtest.Labels{"front_end": gw, "limit": "stage-dev", "outcome": "denied"}, 3},
		{"shadow allowed", "floodgate_decisions_total", promtest.Labels{"front_end": gw, "limit": "shadow", "outcome": "allowed"}, 2},
		{"shadow denied", "floodgate_decisions_total", promtest.Labels{"front_end": gw, "limit": "shadow", "outcome": "shadow_denied"}, 6},
		{"near limit", "floodgate_near_limit_total", promtest.Labels{"front_end": gw, "limit": "stage-dev"}, 1}, // r=0 of 5; r=1 is 20%
		{"429s", "floodgate_rejections_total", promtest.Labels{"front_end": gw, "limit": "stage-dev", "code": "429"}, 3},
		{"403s", "floodgate_rejections_total", promtest.Labels{"front_end": gw, "limit": "", "code": "403"}, 1},
		{"upstream 200s", "floodgate_upstream_responses_total", promtest.Labels{"route": "school", "code": "200"}, 5},
		{"other front ends", "floodgate_decisions_total", promtest.Labels{"front_end": "rls"}, 0},
	}
	for _, c := range checks {
		if got := promtest.Value(t, reg, c.metric, c.labels); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// The memory store answers in this process: its calls are not timed.
	if n := promtest.Value(t, reg, "floodgate_store_latency_seconds", nil); n != 0 {
		t.Errorf("latency histogram has %d observations of an in-process store", int(n))
	}
}

// TestQueueLengthMetric: a request held by a leaky queue shows in
// floodgate_queue_length until its client goes away.
func TestQueueLengthMetric(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testQueueLengthMetric)
}

func testQueueLengthMetric(t *testing.T, fr string) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rule := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Minute, Burst: 2})
	clock := newTestClock()
	_, srvURL, client := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{}), Observer: m},
		func(http.ResponseWriter, *http.Request) {})
	if a := do(t, client, "GET", srvURL, nil); a.status != 200 {
		t.Fatalf("first request %d", a.status)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "GET", srvURL, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			t.Error("the queued request was answered")
		}
	}()
	queued := func() float64 {
		return promtest.Value(t, reg, "floodgate_queue_length", promtest.Labels{"limit": "queue"})
	}
	waitFor := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for queued() != want {
			if time.Now().After(deadline) {
				t.Fatalf("queue length %v, want %v", queued(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(1)
	cancel()
	<-done
	waitFor(0)
}

// TestUpstreamResponsesByRoute: routes that share one upstream (as every
// route does with "floodgate serve --demo") count their upstream answers
// under their own names, on each engine, whichever route came first.
func TestUpstreamResponsesByRoute(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testUpstreamResponsesByRoute)
}

func testUpstreamResponsesByRoute(t *testing.T, fr string) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := compilePolicy(t, "routes.yaml", `version: 1
routes:
  - name: login
    match: {paths: ["/login"]}
    upstream: http://127.0.0.1:9
  - name: students
    match: {paths: ["/students/**"]}
    upstream: http://127.0.0.1:9
`)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, srvURL, client := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t), Observer: m},
		func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/students/gone" {
				w.WriteHeader(http.StatusNotFound)
			}
		})
	for _, path := range []string{"/login", "/students/1", "/students/2", "/students/gone"} {
		do(t, client, "GET", srvURL+path, nil)
	}
	for _, c := range []struct {
		route, code string
		want        float64
	}{{"login", "200", 1}, {"students", "200", 2}, {"students", "404", 1}, {"login", "404", 0}} {
		if got := promtest.Value(t, reg, "floodgate_upstream_responses_total", promtest.Labels{"route": c.route, "code": c.code}); got != c.want {
			t.Errorf("route %s, code %s: %v, want %v", c.route, c.code, got, c.want)
		}
	}
}
