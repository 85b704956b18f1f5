package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/metrics"
)

// TestLatencyHistograms: every request of a route is observed in the
// gateway's own time, and the forwarded ones in the upstream's, which
// holds the upstream's delay; a refused request has no upstream time.
func TestLatencyHistograms(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testLatencyHistograms)
}

func testLatencyHistograms(t *testing.T, fr string) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := compilePolicy(t, "latency.yaml", `version: 1
routes:
  - {name: slow, match: {paths: ["/slow"]}, upstream: http://127.0.0.1:9}
limits:
  - {name: two, algorithm: fixed_window, limit: 2, window: 1h, key: global}
`)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, srvURL, client := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t), Observer: m},
		func(w http.ResponseWriter, r *http.Request) { time.Sleep(30 * time.Millisecond) })
	for range 3 {
		do(t, client, "GET", srvURL+"/slow", nil)
	}
	if got := promtest.Value(t, reg, "floodgate_gateway_duration_seconds", promtest.Labels{"route": "slow"}); got != 3 {
		t.Errorf("gateway time observed %v times, want 3", got)
	}
	if got := promtest.Value(t, reg, "floodgate_upstream_duration_seconds", promtest.Labels{"route": "slow"}); got != 2 {
		t.Errorf("upstream time observed %v times, want 2 (the third was refused)", got)
	}
	for _, h := range promtest.Find(t, reg, "floodgate_upstream_duration_seconds", promtest.Labels{"route": "slow"}) {
		if sum := h.Histogram.GetSampleSum(); sum < 0.06 {
			t.Errorf("upstream time %vs for two answers of 30 ms each", sum)
		}
	}
	for _, h := range promtest.Find(t, reg, "floodgate_gateway_duration_seconds", promtest.Labels{"route": "slow"}) {
		if sum := h.Histogram.GetSampleSum(); sum > 0.06 {
			t.Errorf("the gateway's own time %vs holds the upstream's", sum)
		}
	}
}
