package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
)

// serveMetrics holds the gateway's metrics on a registry of its own.
type serveMetrics struct{ m *gateway.Metrics }

// newServeMetrics builds the registry behind /metrics: the gateway's series
// and the Go runtime's and the process's.
func newServeMetrics() (*serveMetrics, http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, err
	}
	m, err := gateway.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	return &serveMetrics{m}, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

func (s *serveMetrics) gatewayObserver() gateway.Observer { return s.m }
func (s *serveMetrics) limiterObserver() limiter.Observer { return s.m }
