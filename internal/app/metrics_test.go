package app

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// lockedBuffer is a buffer safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// twiceCollector is a broken collector: it sends one series twice.
type twiceCollector struct{ d *prometheus.Desc }

func (c twiceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.d }

func (c twiceCollector) Collect(ch chan<- prometheus.Metric) {
	for range 2 {
		ch <- prometheus.MustNewConstMetric(c.d, prometheus.CounterValue, 1)
	}
}

// TestMetricsSurviveABrokenCollector: a collector that sends a series
// twice costs only its own series: /metrics still answers 200 with
// Floodgate's series and the runtime's, and the error is logged and
// counted.
func TestMetricsSurviveABrokenCollector(t *testing.T) {
	t.Parallel()
	_, reg, err := newMetrics()
	if err != nil {
		t.Fatal(err)
	}
	own := prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_config_reloads_total", Help: "Reloads."})
	own.Add(3)
	reg.MustRegister(own, twiceCollector{prometheus.NewDesc("broken_total", "Sent twice.", nil, nil)})
	var logs lockedBuffer
	srv := httptest.NewServer(metricsHandler(reg, slog.New(slog.NewTextHandler(&logs, nil))))
	defer srv.Close()
	for scrape := 1; scrape <= 2; scrape++ {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape %d: %s: %.300s", scrape, resp.Status, body)
		}
		for _, want := range []string{`(?m)^floodgate_config_reloads_total 3$`, `(?m)^go_goroutines \d+$`} {
			if !regexp.MustCompile(want).Match(body) {
				t.Errorf("scrape %d: no %s", scrape, want)
			}
		}
		// The error counter is gathered with the scrape it counts.
		if want := `promhttp_metric_handler_errors_total{cause="gathering"} ` + string(rune('0'+scrape-1)); !strings.Contains(string(body), want) {
			t.Errorf("scrape %d: no %s", scrape, want)
		}
	}
	if !strings.Contains(logs.String(), "was collected before with the same name and label values") {
		t.Errorf("the error is not logged: %q", logs.String())
	}
}
