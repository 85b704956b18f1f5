// Package promtest reads metrics back from a Prometheus registry, for
// tests that check what Floodgate counted.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Labels selects a series: every given label must have the given value.
type Labels map[string]string

// Find returns the series of the metric family name whose labels match.
func Find(t testing.TB, g prometheus.Gatherer, name string, labels Labels) []*dto.Metric {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var out []*dto.Metric
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metric
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// Value returns the sum of the matching counters or gauges of name (0 when
// none matches), or, for histograms, the number of observations.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels Labels) float64 {
	t.Helper()
	var sum float64
	for _, m := range Find(t, g, name, labels) {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}
