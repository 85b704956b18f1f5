package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/store/memstore"
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

// registerStateMetrics exports the state of the engine, the stores, the
// policy and the connections, read when /metrics is scraped.
func (s *server) registerStateMetrics() error {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	cs := []prometheus.Collector{
		gauge("floodgate_breaker_open", "1 while the store's circuit breaker is open and limits follow their on_failure.",
			func() float64 { return b2f(s.engine.Stats().BreakerOpen) }),
		counter("floodgate_breaker_opens_total", "Times the store's circuit breaker opened.",
			func() float64 { return float64(s.engine.Stats().BreakerOpens) }),
		counter("floodgate_store_failures_total", "Store calls that failed or missed their deadline.",
			func() float64 { return float64(s.engine.Stats().StoreFailures) }),
		counter("floodgate_config_reloads_total", "New versions of the policy file applied.",
			func() float64 { return float64(s.reloader.Reloads()) }),
		counter("floodgate_config_rejected_total", "Versions of the policy file refused as invalid.",
			func() float64 { return float64(s.reloader.Rejected()) }),
		gauge("floodgate_connections_open", "Client connections the gateway serves now.",
			func() float64 {
				if s.conns == nil {
					return 0
				}
				return float64(s.conns.open.Load())
			}),
		counter("floodgate_connections_shed_total", "Client connections answered 503 and closed because max_connections were open.",
			func() float64 {
				if s.conns == nil {
					return 0
				}
				return float64(s.conns.shed.Load())
			}),
	}
	for _, st := range []struct {
		which string
		store limiter.Store
	}{{"main", s.store}, {"local", s.local}} {
		ms, ok := st.store.(*memstore.Store)
		if !ok {
			continue
		}
		l := prometheus.Labels{"store": st.which}
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_store_keys", ConstLabels: l,
				Help: "Keys the embedded store holds."}, func() float64 { return float64(ms.Stats().Keys) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_store_bytes", ConstLabels: l,
				Help: "Approximate memory of the embedded store's keys, as bounded by server.memory.max_bytes."},
				func() float64 { return float64(ms.Stats().Bytes) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_store_evictions_total", ConstLabels: l,
				Help: "Keys the embedded store evicted to keep within its memory bound."},
				func() float64 { return float64(ms.Stats().Evictions) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_state_file_errors_total", ConstLabels: l,
				Help: "Snapshots of the state file that failed."}, func() float64 { return float64(ms.Stats().SnapshotErrors) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_state_file_failing", ConstLabels: l,
				Help: "1 while the latest snapshot of the state file failed."},
				func() float64 { return b2f(ms.Stats().LastSnapshotError != nil) }),
		)
	}
	for _, c := range cs {
		if err := s.registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}
