package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/percpu"
)

// The time of each request the gateway forwards or answers, per route:
// the gateway's own (from the request's arrival to its end, less the
// upstream's) and the upstream's (from sending the request to the end of
// its answer). Routes come from the policy file, so the series are
// bounded; requests that matched no route are under route "".
//
//	floodgate_gateway_duration_seconds{route}   the gateway's own time per request
//	floodgate_upstream_duration_seconds{route}  the upstream's time per forwarded request

// routeLatency holds the two histograms' families, whose series count
// per CPU (percpu.go).
type routeLatency struct {
	gateway, upstream *family
}

// latencySeries are one route's series.
type latencySeries struct {
	gateway, upstream *perCPUHistogram
}

// The bounds of the two histograms.
var (
	gatewayBuckets  = []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
	upstreamBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
)

func (m *Metrics) registerLatency(reg prometheus.Registerer) error {
	m.lat.gateway = newFamily(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "floodgate_gateway_duration_seconds",
		Help:    "The gateway's own time per request and route: from its arrival to its end, less the upstream's time.",
		Buckets: gatewayBuckets,
	}, []string{"route"}))
	m.lat.upstream = newFamily(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "floodgate_upstream_duration_seconds",
		Help:    "The upstream's time per forwarded request and route: from sending the request to the end of its answer.",
		Buckets: upstreamBuckets,
	}, []string{"route"}))
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
	s := m.latCache.get(route)
	if s == nil {
		v, ok := m.latRoutes.Load(route)
		if !ok {
			v = m.latencyOf(route)
		}
		s = v.(*latencySeries)
		m.latCache.put(route, s)
	}
	slot := percpu.Slot()
	s.gateway.observe(slot, gateway)
	if forwarded {
		s.upstream.observe(slot, upstream)
	}
}

// latencyOf makes the series of a route, once.
func (m *Metrics) latencyOf(route string) any {
	m.makeMu.Lock()
	defer m.makeMu.Unlock()
	if v, ok := m.latRoutes.Load(route); ok {
		return v
	}
	route = strings.Clone(route)
	v := &latencySeries{gateway: m.lat.gateway.histogram(gatewayBuckets, route),
		upstream: m.lat.upstream.histogram(upstreamBuckets, route)}
	m.latRoutes.Store(route, v)
	return v
}
