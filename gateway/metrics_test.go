package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// TestMetrics runs lesson 07's stage burst, with a shadow limit added,
// through a gateway with metrics and reads the counters back.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering twice on one registry succeeded")
	}
	up := newUpstream(t, nil)
	clock := newTestClock()
	office := newSchoolOffice(t, up.URL)
	shadow := mustRule(t, floodgate.Limit{Name: "shadow", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Minute}, true)
	matcher := funcMatcher(func(r *http.Request, mt *Match) error {
		if err := office.Match(r, mt); err != nil || mt.Forbidden {
			return err
		}
		mt.Hits = append(mt.Hits, limiter.Hit{Rule: shadow, Key: "all", Cost: 1})
		return nil
	})
	g, err := New(Options{Matcher: matcher, Engine: newMemStore(t, clock.Now), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	for i := 0; i < 8; i++ {
		a := do(t, front.Client(), "GET", front.URL+"/notices", nil)
		if a.status == 200 && a.header.Get("RateLimit") != "" && len(a.header.Values("RateLimit")) != 1 {
			t.Errorf("RateLimit lines %v", a.header.Values("RateLimit"))
		}
	}
	do(t, front.Client(), "GET", front.URL+"/partner/x", map[string]string{"x-api-key": "nobody"})
	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"stage allowed", m.decisions.WithLabelValues("stage-dev", "allowed"), 5},
		{"stage denied", m.decisions.WithLabelValues("stage-dev", "denied"), 3},
		{"shadow allowed", m.decisions.WithLabelValues("shadow", "allowed"), 2},
		{"shadow denied", m.decisions.WithLabelValues("shadow", "shadow_denied"), 6},
		{"near limit", m.near.WithLabelValues("stage-dev"), 1}, // r=0 of 5; r=1 is 20%
		{"429s", m.rejected.WithLabelValues("stage-dev", "429"), 3},
		{"403s", m.rejected.WithLabelValues("", "403"), 1},
		{"upstream 200s", m.upstream.WithLabelValues("school", "200"), 5},
		{"queue", m.queue.WithLabelValues("stage-dev"), 0},
	}
	for _, c := range checks {
		if got := value(t, c.c); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// One engine call per request on /notices; the 403 needs none.
	if n := samples(t, m.latency); n != 8 {
		t.Errorf("latency histogram has %d observations, want 8", n)
	}
	m.ObserveDecision(limiter.Event{Rule: office.stage, Degraded: true})
	if got := value(t, m.degraded.WithLabelValues("stage-dev")); got != 1 {
		t.Errorf("degraded %v", got)
	}
}

// collect returns the one metric c holds.
func collect(t *testing.T, c prometheus.Collector) *dto.Metric {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var out []*dto.Metric
	for m := range ch {
		d := &dto.Metric{}
		if err := m.Write(d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	if len(out) != 1 {
		t.Fatalf("%d metrics, want 1", len(out))
	}
	return out[0]
}

// value returns the value of a counter or a gauge.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	m := collect(t, c)
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("not a counter or gauge: %v", m)
	return 0
}

// samples returns the number of observations of a histogram.
func samples(t *testing.T, c prometheus.Collector) uint64 {
	t.Helper()
	m := collect(t, c)
	if m.Histogram == nil {
		t.Fatalf("not a histogram: %v", m)
	}
	return m.Histogram.GetSampleCount()
}

// TestQueueLengthMetric: a request held by a leaky queue shows in
// floodgate_queue_length until its client goes away.
func TestQueueLengthMetric(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rule := mustRule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Minute, Burst: 2}, false)
	clock := newTestClock()
	g, err := New(Options{Matcher: oneRule(rule), Engine: newMemStore(t, clock.Now), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	if a := do(t, srv.Client(), "GET", srv.URL, nil); a.status != 200 {
		t.Fatalf("first request %d", a.status)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		if resp, err := srv.Client().Do(req); err == nil {
			resp.Body.Close()
			t.Error("the queued request was answered")
		}
	}()
	gauge := m.queue.WithLabelValues("queue")
	waitFor := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for value(t, gauge) != want {
			if time.Now().After(deadline) {
				t.Fatalf("queue length %v, want %v", value(t, gauge), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(1)
	cancel()
	<-done
	waitFor(0)
}
