package gateway

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter"
)

// Metrics is the gateway's Prometheus instrumentation. It implements
// Observer and limiter.Observer (for the degraded decisions the engine
// makes when its store fails). Register it on a registry of your own; there
// are no package-level metrics.
//
// Series (limit and route names come from the policy file, so their number
// is bounded by it):
//
//	floodgate_decisions_total{limit,outcome}       allowed, denied, shadow_denied
//	floodgate_degraded_decisions_total{limit}      decided by the failure policy
//	floodgate_near_limit_total{limit}              allowed with ≤10% of the capacity left
//	floodgate_rejections_total{limit,code}         the gateway's 429s (per binding limit) and 403s (limit "")
//	floodgate_store_latency_seconds                one engine call
//	floodgate_upstream_responses_total{route,code} upstream statuses (code 0: unreachable)
//	floodgate_queue_length{limit}                  requests waiting in a leaky queue
type Metrics struct {
	decisions *prometheus.CounterVec
	degraded  *prometheus.CounterVec
	near      *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	latency   prometheus.Histogram
	upstream  *prometheus.CounterVec
	queue     *prometheus.GaugeVec

	limits sync.Map // name → *limitSeries
	routes sync.Map // route → *routeSeries
}

// routeSeries caches the upstream status counters of one route.
type routeSeries struct {
	codes [600]atomic.Pointer[prometheus.Counter]
}

// limitSeries caches the children of one limit, so that the request path
// does no label lookups.
type limitSeries struct {
	allowed, denied, shadow, near, degraded, rejected prometheus.Counter
	queue                                             prometheus.Gauge
}

// NewMetrics creates the gateway's metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Decisions per limit: allowed, denied or shadow_denied (a shadow limit that would have denied).",
		}, []string{"limit", "outcome"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_degraded_decisions_total",
			Help: "Decisions made by a limit's failure policy because the store failed, timed out or its breaker was open.",
		}, []string{"limit"}),
		near: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_near_limit_total",
			Help: "Allowed requests that left at most 10% of the limit's capacity.",
		}, []string{"limit"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rejections_total",
			Help: "Requests the gateway answered itself: 429 per binding limit, 403 (limit \"\") for a missing or unknown API key.",
		}, []string{"limit", "code"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floodgate_store_latency_seconds",
			Help:    "Time of one call to the engine and its store.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_upstream_responses_total",
			Help: "Upstream responses per route and status code (0: the upstream could not be reached).",
		}, []string{"route", "code"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_queue_length",
			Help: "Requests waiting for their slot in a leaky queue.",
		}, []string{"limit"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.degraded, m.near, m.rejected, m.latency, m.upstream, m.queue} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("gateway: metrics already registered on this registry")
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) series(limit string) *limitSeries {
	if s, ok := m.limits.Load(limit); ok {
		return s.(*limitSeries)
	}
	s := &limitSeries{
		allowed:  m.decisions.WithLabelValues(limit, Allowed.String()),
		denied:   m.decisions.WithLabelValues(limit, Denied.String()),
		shadow:   m.decisions.WithLabelValues(limit, ShadowDenied.String()),
		near:     m.near.WithLabelValues(limit),
		degraded: m.degraded.WithLabelValues(limit),
		rejected: m.rejected.WithLabelValues(limit, "429"),
		queue:    m.queue.WithLabelValues(limit),
	}
	v, _ := m.limits.LoadOrStore(limit, s)
	return v.(*limitSeries)
}

// Decision counts one limit's decision.
func (m *Metrics) Decision(limit string, o Outcome, near bool) {
	s := m.series(limit)
	switch o {
	case Allowed:
		s.allowed.Inc()
		if near {
			s.near.Inc()
		}
	case Denied:
		s.denied.Inc()
	case ShadowDenied:
		s.shadow.Inc()
	}
}

// Rejected counts a 429 (per binding limit) or a 403.
func (m *Metrics) Rejected(limit string, status int) {
	if status == 429 && limit != "" {
		m.series(limit).rejected.Inc()
		return
	}
	m.rejected.WithLabelValues(limit, strconv.Itoa(status)).Inc()
}

// StoreLatency observes one engine call.
func (m *Metrics) StoreLatency(d time.Duration) { m.latency.Observe(d.Seconds()) }

// Queued moves a leaky queue's length.
func (m *Metrics) Queued(limit string, delta int) { m.series(limit).queue.Add(float64(delta)) }

// Upstream counts an upstream response.
func (m *Metrics) Upstream(route string, status int) {
	if status < 0 || status >= 600 {
		m.upstream.WithLabelValues(route, strconv.Itoa(status)).Inc()
		return
	}
	rs, ok := m.routes.Load(route)
	if !ok {
		rs, _ = m.routes.LoadOrStore(route, new(routeSeries))
	}
	slot := &rs.(*routeSeries).codes[status]
	c := slot.Load()
	if c == nil {
		counter := m.upstream.WithLabelValues(route, strconv.Itoa(status))
		slot.CompareAndSwap(nil, &counter)
		c = slot.Load()
	}
	(*c).Inc()
}

// ObserveDecision counts the engine's degraded decisions (limiter.Observer).
func (m *Metrics) ObserveDecision(e limiter.Event) {
	if e.Degraded && e.Rule != nil {
		m.series(e.Rule.Limit.Name).degraded.Inc()
	}
}

var (
	_ Observer         = (*Metrics)(nil)
	_ limiter.Observer = (*Metrics)(nil)
)
