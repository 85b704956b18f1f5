package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter"
)

// DefaultMaxLimits is how many distinct limit names get series of their
// own before the rest are folded into the limit "_other".
const DefaultMaxLimits = 1000

// OtherLimit is the limit label of every limit past Options.MaxLimits.
const OtherLimit = "_other"

// Options configure Metrics. The zero value is usable.
type Options struct {
	// MaxLimits bounds the distinct values of the limit label
	// (0: DefaultMaxLimits). Limit names come from the configuration,
	// except the names of limits given in requests (Envoy descriptors'
	// overrides), which a client chooses: past the bound, new names are
	// counted under OtherLimit so that no client can grow the series
	// without bound.
	MaxLimits int
}

// Metrics is Floodgate's Prometheus instrumentation. It is the engine's
// Observer, so that every decision is counted once, whichever front end
// asked for it, and it takes the events only a front end sees (the
// gateway's own answers, upstream statuses, queue lengths, invalid
// tokens). Register it on a registry of your own; there are no
// package-level metrics. Its methods are safe for concurrent use.
//
// Series:
//
//	floodgate_decisions_total{front_end,limit,outcome}        allowed, denied, shadow_denied (peeks are not counted)
//	floodgate_degraded_decisions_total{front_end,limit,reason} decided by the failure policy: deadline, store_error, breaker_open
//	floodgate_near_limit_total{front_end,limit}               allowed with ≤10% of the capacity left
//	floodgate_store_latency_seconds{front_end}                one store call of the engine
//	floodgate_rejections_total{front_end,limit,code}          answers of a front end itself: 429 per binding limit, 401 and 403 (limit "")
//	floodgate_upstream_responses_total{route,code}            the gateway's upstream statuses (code 0: unreachable)
//	floodgate_queue_length{limit}                             requests waiting in a leaky queue
//	floodgate_invalid_tokens_total{reason}                    presented tokens that did not verify
//	floodgate_gateway_duration_seconds{route}                 the gateway's own time per request (latency.go)
//	floodgate_upstream_duration_seconds{route}                the upstream's time per forwarded request
type Metrics struct {
	decisions *prometheus.CounterVec
	degraded  *prometheus.CounterVec
	near      *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	rejected  *prometheus.CounterVec
	upstream  *prometheus.CounterVec
	queue     *prometheus.GaugeVec
	tokens    *prometheus.CounterVec

	latencyBy [4]prometheus.Observer // by front end

	maxLimits int
	nLimits   atomic.Int64
	limits    sync.Map // name → *limitSeries
	routes    sync.Map // route → *routeSeries
	reasons   sync.Map // token failure reason → prometheus.Counter
	lat       routeLatency
	latRoutes sync.Map // route → *latencySeries
}

// limitSeries caches the children of one limit, so that counting a
// decision does no label lookups.
type limitSeries struct {
	name  string
	front [4]atomic.Pointer[frontSeries] // by limiter.FrontEnd, made on first use
	queue prometheus.Gauge
}

// frontSeries are one limit's counters for one front end.
type frontSeries struct {
	allowed, denied, shadow, near prometheus.Counter
	degraded                      [4]prometheus.Counter // by limiter.Degradation
	rejected                      prometheus.Counter    // 429s naming this limit
}

// routeSeries caches the upstream status counters of one route.
type routeSeries struct {
	codes [600]atomic.Pointer[prometheus.Counter]
}

// New creates the metrics and registers them on reg.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Decisions per front end and limit: allowed, denied, or shadow_denied (a shadow limit that would have denied).",
		}, []string{"front_end", "limit", "outcome"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_degraded_decisions_total",
			Help: "Decisions made by a limit's failure policy, by reason: deadline (the store did not answer in time), store_error, breaker_open.",
		}, []string{"front_end", "limit", "reason"}),
		near: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_near_limit_total",
			Help: "Allowed decisions that left at most 10% of the limit's capacity.",
		}, []string{"front_end", "limit"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_store_latency_seconds",
			Help:    "Time of one store call of the engine (stores in this process are not timed).",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"front_end"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rejections_total",
			Help: "Requests a front end answered itself: 429 per binding limit, 401 for an invalid token and 403 for a missing or unknown API key (limit \"\").",
		}, []string{"front_end", "limit", "code"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_upstream_responses_total",
			Help: "Upstream responses per route and status code (0: the upstream could not be reached).",
		}, []string{"route", "code"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_queue_length",
			Help: "Requests waiting for their slot in a leaky queue.",
		}, []string{"limit"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_invalid_tokens_total",
			Help: "Presented tokens that did not verify, by reason.",
		}, []string{"reason"}),
		maxLimits: opts.MaxLimits,
	}
	if m.maxLimits <= 0 {
		m.maxLimits = DefaultMaxLimits
	}
	for _, c := range []prometheus.Collector{m.decisions, m.degraded, m.near, m.latency, m.rejected, m.upstream, m.queue, m.tokens} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("metrics: already registered on this registry")
			}
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	if err := m.registerLatency(reg); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	for _, f := range limiter.FrontEnds() {
		if int(f) < len(m.latencyBy) {
			m.latencyBy[f] = m.latency.WithLabelValues(f.String())
		}
	}
	return m, nil
}

// series returns the cached series of a limit name, folding names past the
// bound into OtherLimit.
func (m *Metrics) series(limit string) *limitSeries {
	if s, ok := m.limits.Load(limit); ok {
		return s.(*limitSeries)
	}
	name := limit
	if m.nLimits.Load() >= int64(m.maxLimits) && limit != OtherLimit {
		name = OtherLimit
		if s, ok := m.limits.Load(name); ok {
			return s.(*limitSeries)
		}
	}
	s := &limitSeries{name: name, queue: m.queue.WithLabelValues(name)}
	v, loaded := m.limits.LoadOrStore(name, s)
	if !loaded {
		m.nLimits.Add(1)
	}
	return v.(*limitSeries)
}

// seriesSlot keeps, on each rule, its limit's series (a *ruleSeries) in
// the first Metrics that counted it.
var seriesSlot = limiter.NewSlot()

// ruleSeries is a rule's series in one Metrics.
type ruleSeries struct {
	m *Metrics
	s *limitSeries
}

// ruleSeries returns the series of a rule's limit (series by its name),
// found by the rule itself: a decision costs a field read on the rule, not
// a hash of the name. The series lives on the rule (limiter.Rule.Prepared)
// and goes with it; a second Metrics counting the same rule (tests, two
// registries) finds its series by the limit's name.
func (m *Metrics) ruleSeries(r *limiter.Rule) *limitSeries {
	rs := r.Prepared(seriesSlot, func(r *limiter.Rule) any {
		return &ruleSeries{m: m, s: m.series(r.Name())}
	}).(*ruleSeries)
	if rs.m == m {
		return rs.s
	}
	return m.series(r.Name())
}

// of returns the counters of a limit for one front end.
func (m *Metrics) of(s *limitSeries, f limiter.FrontEnd) *frontSeries {
	if int(f) >= len(s.front) {
		f = limiter.FrontLibrary
	}
	if fs := s.front[f].Load(); fs != nil {
		return fs
	}
	fe := f.String()
	fs := &frontSeries{
		allowed:  m.decisions.WithLabelValues(fe, s.name, "allowed"),
		denied:   m.decisions.WithLabelValues(fe, s.name, "denied"),
		shadow:   m.decisions.WithLabelValues(fe, s.name, "shadow_denied"),
		near:     m.near.WithLabelValues(fe, s.name),
		rejected: m.rejected.WithLabelValues(fe, s.name, "429"),
	}
	for d := limiter.DegradedDeadline; d <= limiter.DegradedBreakerOpen; d++ {
		fs.degraded[d] = m.degraded.WithLabelValues(fe, s.name, d.String())
	}
	s.front[f].CompareAndSwap(nil, fs) // the children are the same either way
	return s.front[f].Load()
}

// ObserveDecision counts one request's decisions (limiter.Observer): one
// outcome per hit, labelled by the request's front end and the hit's
// limit. Peeks decide nothing and are not counted.
func (m *Metrics) ObserveDecision(req *limiter.Request, res *limiter.Result) {
	if res.StoreLatency > 0 && int(req.Front) < len(m.latencyBy) {
		m.latencyBy[req.Front].Observe(res.StoreLatency.Seconds())
	}
	if req.Peek {
		return
	}
	for i := range req.Hits {
		if i >= len(res.Decisions) {
			break
		}
		fs := m.of(m.ruleSeries(req.Hits[i].Rule), req.Front)
		d := &res.Decisions[i]
		switch {
		case res.Flags[i]&limiter.ShadowDenied != 0:
			fs.shadow.Inc()
		case d.Allowed:
			fs.allowed.Inc()
			if limiter.Near(d) {
				fs.near.Inc()
			}
		default:
			fs.denied.Inc()
		}
		if res.Degraded != limiter.NotDegraded && int(res.Degraded) < len(fs.degraded) {
			fs.degraded[res.Degraded].Inc()
		}
	}
}

// Rejected counts an answer a front end gave itself: a 429 naming its
// binding limit, or a 401 or 403 (limit "").
func (m *Metrics) Rejected(front limiter.FrontEnd, limit string, status int) {
	if status == 429 && limit != "" {
		m.of(m.series(limit), front).rejected.Inc()
		return
	}
	m.rejected.WithLabelValues(front.String(), limit, strconv.Itoa(status)).Inc()
}

// Queued moves a leaky queue's length.
func (m *Metrics) Queued(limit string, delta int) { m.series(limit).queue.Add(float64(delta)) }

// Upstream counts an upstream response of a route.
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

// InvalidToken counts a presented token that did not verify; reason is
// one of a small fixed set (expired, signature, malformed ...).
func (m *Metrics) InvalidToken(reason string) {
	c, ok := m.reasons.Load(reason)
	if !ok {
		c, _ = m.reasons.LoadOrStore(reason, m.tokens.WithLabelValues(reason))
	}
	c.(prometheus.Counter).Inc()
}

var _ limiter.Observer = (*Metrics)(nil)
