package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The time of each request the gateway forwards or answers, per route:
// the gateway's own (from the request's arrival to its end, less the
// upstream's) and the upstream's (from sending the request to the end of
// its answer). Routes come from the policy file, so the series are
// bounded; requests that matched no route are under route "".
//
//	floodgate_gateway_duration_seconds{route}   the gateway's own time per request
//	floodgate_upstream_duration_seconds{route}  the upstream's time per forwarded request

// routeLatency holds the two histograms and their children per route.
type routeLatency struct {
	gateway, upstream *prometheus.HistogramVec
}

// latencySeries are one route's children.
type latencySeries struct {
	gateway, upstream prometheus.Observer
}

func (m *Metrics) registerLatency(reg prometheus.Registerer) error {
	m.lat.gateway = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "floodgate_gateway_duration_seconds",
		Help:    "The gateway's own time per request and route: from its arrival to its end, less the upstream's time.",
		Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"route"})
	m.lat.upstream = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "floodgate_upstream_duration_seconds",
		Help:    "The upstream's time per forwarded request and route: from sending the request to the end of its answer.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route"})
	for _, c := range []prometheus.Collector{m.lat.gateway, m.lat.upstream} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Latency observes a request of route: the gateway's own time and, when it
// was forwarded, the upstream's (gateway.LatencyObserver).
func (m *Metrics) Latency(route string, gateway, upstream time.Duration, forwarded bool) {
	v, ok := m.latRoutes.Load(route)
	if !ok {
		v, _ = m.latRoutes.LoadOrStore(route, &latencySeries{gateway: m.lat.gateway.WithLabelValues(route),
			upstream: m.lat.upstream.WithLabelValues(route)})
	}
	s := v.(*latencySeries)
	s.gateway.Observe(gateway.Seconds())
	if forwarded {
		s.upstream.Observe(upstream.Seconds())
	}
}
