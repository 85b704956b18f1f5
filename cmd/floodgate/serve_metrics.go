package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/floodgate/floodgate/metrics"
)

// newServeMetrics builds the registry behind /metrics: Floodgate's series
// and the Go runtime's and the process's.
func newServeMetrics() (*metrics.Metrics, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, err
	}
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		return nil, nil, err
	}
	return m, reg, nil
}
