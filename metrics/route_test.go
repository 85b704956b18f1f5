package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRouteSeriesBounded: an upstream that answers every status there is
// gives its route per-CPU counters for the first routeCodes statuses
// only; the others are counted the usual way, one series each.
func TestRouteSeriesBounded(t *testing.T) {
	m, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for status := range 600 {
		m.Upstream("r", status)
		m.Upstream("r", status)
	}
	rs := m.route("r")
	if rs.given != routeCodes {
		t.Errorf("%d statuses count per CPU, want %d", rs.given, routeCodes)
	}
	for status := range 600 {
		cell, plain := rs.cells[status].Load(), rs.plain[status].Load()
		if (cell > 0) != (status < routeCodes) || (plain != nil) != (status >= routeCodes) {
			t.Fatalf("status %d: per-CPU counter %d, plain %v", status, cell, plain != nil)
		}
		if cell > 0 {
			if got := rs.cs.Load(int(cell - 1)); got != 2 {
				t.Errorf("status %d: counted %d, want 2", status, got)
			}
		}
	}
	m.upstreamF.mu.Lock()
	perCPU := len(m.upstreamF.counters)
	m.upstreamF.mu.Unlock()
	ch := make(chan prometheus.Metric, 1000)
	m.upstream.Collect(ch)
	close(ch)
	if perCPU != routeCodes || len(ch) != 600-routeCodes {
		t.Errorf("%d per-CPU series and %d usual ones, want %d and %d", perCPU, len(ch), routeCodes, 600-routeCodes)
	}
}
