package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/percpu"
	"github.com/floodgate/floodgate/limiter"
)

// DefaultMaxLimits is how many distinct limit names counted for the
// rate-limit service and the library get series of their own before the
// rest are folded into the limit "_other" (the policy file's limits, which
// the gateway and the check API count, and the rules marked Configured
// always get their own).
const DefaultMaxLimits = 1000

// OtherLimit is the limit label of every limit past Options.MaxLimits.
const OtherLimit = "_other"

// MaxLimitNameLen is the longest name of a limit counted for the
// rate-limit service or the library (a name a request may give) that gets
// a series of its own; a longer one is counted under OtherLimit, so that
// Options.MaxLimits bounds the bytes of the series and of a scrape too.
const MaxLimitNameLen = 1024

// Options configure Metrics. The zero value is usable.
type Options struct {
	// MaxLimits bounds the distinct values of the limit label counted
	// for the rate-limit service and the library (0: DefaultMaxLimits).
	// Their names may be given in requests (Envoy descriptors'
	// overrides), which a client chooses: past the bound, new names are
	// counted under OtherLimit so that no client can grow the series
	// without bound. The limits the gateway and the check API count are
	// all named in the policy file, which bounds them: they always get
	// series of their own, however many names requests gave before, and
	// so do the rules marked Configured (the limits of the rate-limit
	// service's descriptor files). The counters of a limit's series keep
	// a cell per CPU: 320 bytes per front end on 2 CPUs, 4 KiB from 32
	// CPUs on.
	MaxLimits int
	// MaxTenants bounds the distinct (route, tenant) pairs of
	// floodgate_overload_shed_tenants_total (0: DefaultMaxTenants): a
	// tenant is whatever a client sends (an address, a header), so while
	// every series is held by a tenant shed within IdleTenant, new
	// tenants are counted as OtherTenant.
	MaxTenants int
	// IdleTenant is how long a tenant must go without being shed before
	// its series of floodgate_overload_shed_tenants_total may be taken
	// back, deleted and given to a tenant shed now (0:
	// DefaultIdleTenant). The series go to the tenants being shed, not to
	// the first ones ever shed, and each of the MaxTenants series changes
	// hands at most once per IdleTenant, however fast a client makes up
	// new names.
	IdleTenant time.Duration
	// Now is the clock the idleness of tenants is measured with (nil:
	// the monotonic clock).
	Now func() time.Time
}

// DefaultMaxTenants is how many tenants get a shed series of their own.
const DefaultMaxTenants = 50

// DefaultIdleTenant is how long a tenant keeps its shed series without
// being shed. Five minutes is many scrape intervals, so a series' last
// value has been scraped before it goes, and as long as the [5m] windows
// of the alerts' increase(), which see nothing more of it by then; it
// bounds the churn to DefaultMaxTenants series per five minutes (one
// every six seconds), whatever the rate of new names.
const DefaultIdleTenant = 5 * time.Minute

// OtherTenant is the tenant label of every tenant shed while each of the
// Options.MaxTenants series was held by a tenant shed within
// Options.IdleTenant.
const OtherTenant = "_other"

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
//	floodgate_upstream_responses_total{route,code}            the gateway's upstream statuses (code 0: unreachable; InvalidStatus: not three digits)
//	floodgate_queue_length{limit}                             requests waiting in a leaky queue
//	floodgate_concurrency_leases_lost_total{limit}            concurrency slots requests in flight lost (expired in an outage, taken meanwhile)
//	floodgate_invalid_tokens_total{reason}                    presented tokens that did not verify
//	floodgate_overload_limit{route}                           a route's cap on requests in flight (fixed or adaptive)
//	floodgate_overload_inflight{route}                        requests forwarded under it and not answered
//	floodgate_overload_queued{route}                          requests waiting for a place
//	floodgate_overload_latency_seconds{route}                 the adaptive limit's latency of its last window
//	floodgate_overload_noload_latency_seconds{route}          its estimate of the upstream's latency without queueing
//	floodgate_overload_shed_total{route,tier,reason}          requests shed (503): full, queue_full, tenant_full, timeout, client_gone, displaced
//	floodgate_overload_shed_tenants_total{route,tenant}       the same by tenant, bounded (Options.MaxTenants, Options.IdleTenant)
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
	lost      *prometheus.CounterVec

	// The families of the vectors above whose series count per CPU
	// (percpu.go).
	decisionsF, nearF, rejectedF, latencyF, upstreamF *family

	latencyBy [4]*perCPUHistogram // by front end

	maxLimits int
	nLimits   atomic.Int64
	makeMu    sync.Mutex // makes each frontSeries and latencySeries once
	limits    sync.Map   // name → *limitSeries
	routes    sync.Map   // route → *routeSeries
	reasons   sync.Map   // token failure reason → prometheus.Counter

	shed       *prometheus.CounterVec
	shedTenant *prometheus.CounterVec
	maxTenants int
	idleTenant time.Duration
	clock      func() time.Duration        // the time since New (Options.Now, or the monotonic clock alone)
	tenantMu   sync.Mutex                  // guards tenants (and the last of each) and tenantScan
	tenants    map[[2]string]*tenantSeries // the (route, tenant) pairs with a series
	tenantScan time.Duration               // no series in tenants is idle before then (by clock)
	folded     sync.Map                    // route → its OtherTenant series (a prometheus.Counter)
	overload   overloadCollector

	lat       routeLatency
	latRoutes sync.Map // route → *latencySeries

	// The series last found by name, in front of limits, latRoutes and
	// routes.
	limitCache nameCache[limitSeries]
	latCache   nameCache[latencySeries]
	routeCache nameCache[routeSeries]
}

// limitSeries caches the children of one limit, so that counting a
// decision does no label lookups.
type limitSeries struct {
	name  string
	front [4]atomic.Pointer[frontSeries] // by limiter.FrontEnd, made on first use
	queue prometheus.Gauge
}

// frontSeries are one limit's counters for one front end: those counted
// on every request per CPU (cs, by the indexes below), the rare ones the
// usual way.
type frontSeries struct {
	cs       *percpu.Counters
	degraded [4]prometheus.Counter // by limiter.Degradation
}

// The counters of a frontSeries' cs.
const (
	cAllowed  = iota
	cDenied   // floodgate_decisions_total
	cShadow   // floodgate_decisions_total
	cNear     // floodgate_near_limit_total
	cRejected // floodgate_rejections_total, code 429
	nCounters
)

// routeSeries counts the upstream statuses of one route. The first
// routeCodes statuses seen count per CPU, each in a counter of cs given
// in the order they came (cells); any further status is counted the
// usual way (plain), so that an upstream answering every status there is
// costs a route at most routeCodes per-CPU counters.
type routeSeries struct {
	name  string
	cs    *percpu.Counters
	cells [600]atomic.Int32 // a status's counter in cs, plus one (0: none)
	given int               // counters of cs given, under Metrics.makeMu
	plain [600]atomic.Pointer[prometheus.Counter]
}

// routeCodes is how many of a route's statuses count per CPU.
const routeCodes = 16

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
			Buckets: storeBuckets,
		}, []string{"front_end"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rejections_total",
			Help: "Requests a front end answered itself: 429 per binding limit, 401 for an invalid token and 403 for a missing or unknown API key (limit \"\").",
		}, []string{"front_end", "limit", "code"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_upstream_responses_total",
			Help: "Upstream responses per route and status code (0: the upstream could not be reached; invalid: a status that is not three digits).",
		}, []string{"route", "code"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_queue_length",
			Help: "Requests waiting for their slot in a leaky queue.",
		}, []string{"limit"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_invalid_tokens_total",
			Help: "Presented tokens that did not verify, by reason.",
		}, []string{"reason"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_concurrency_leases_lost_total",
			Help: "Concurrency slots that requests in flight lost: their lease expired before a renewal reached the store (an outage longer than lease_ttl), and another request took the slot meanwhile, so the limit was exceeded until they ended or took a slot again.",
		}, []string{"limit"}),
		maxLimits: opts.MaxLimits,
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_overload_shed_total",
			Help: "Requests a route's overload control shed (503), by tier and reason: full, queue_full, tenant_full, timeout, client_gone (left while queued), displaced (made room in the queue for a more critical request).",
		}, []string{"route", "tier", "reason"}),
		shedTenant: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_overload_shed_tenants_total",
			Help: "Requests a route's overload control shed, by tenant; a bounded number of tenants have series of their own, those shed lately (the series of a tenant not shed for a while, five minutes by default, is deleted and goes to the next new tenant shed), and the others are counted as _other.",
		}, []string{"route", "tenant"}),
		maxTenants: opts.MaxTenants,
		idleTenant: opts.IdleTenant,
		tenants:    map[[2]string]*tenantSeries{},
	}
	if m.maxTenants <= 0 {
		m.maxTenants = DefaultMaxTenants
	}
	if m.idleTenant <= 0 {
		m.idleTenant = DefaultIdleTenant
	}
	if now := opts.Now; now != nil {
		base := now()
		m.clock = func() time.Duration { return now().Sub(base) }
	} else {
		// time.Since reads the monotonic clock alone: a shed pays half
		// the cost of time.Now.
		base := time.Now()
		m.clock = func() time.Duration { return time.Since(base) }
	}
	if m.maxLimits <= 0 {
		m.maxLimits = DefaultMaxLimits
	}
	m.decisionsF, m.nearF, m.rejectedF, m.latencyF = newFamily(m.decisions), newFamily(m.near), newFamily(m.rejected), newFamily(m.latency)
	m.upstreamF = newFamily(m.upstream)
	for _, c := range []prometheus.Collector{m.decisionsF, m.degraded, m.nearF, m.latencyF, m.rejectedF, m.upstreamF, m.queue, m.tokens, m.lost,
		m.shed, m.shedTenant, &m.overload} {
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
			m.latencyBy[f] = m.latencyF.histogram(storeBuckets, f.String())
		}
	}
	return m, nil
}

// storeBuckets are the bounds of floodgate_store_latency_seconds.
var storeBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// fromPolicy reports whether the limits a front end counts are all named
// in the policy file (the gateway's and the check API's), so that their
// names are bounded by the file and never folded into OtherLimit.
func fromPolicy(f limiter.FrontEnd) bool {
	return f == limiter.FrontGateway || f == limiter.FrontHTTPAPI
}

// configuredSlot marks, on a rule, that its limit is named in a
// configuration file (see Configured).
var configuredSlot = limiter.NewSlot()

// Configured marks r as a rule whose limit is named in a configuration
// file (the rate-limit service's descriptor files), not in a request, and
// returns r: whatever front end counts it, its limit gets a series of its
// own and never counts against Options.MaxLimits, however many names
// requests gave before. A front end marks its rules as it builds them,
// before they decide: a rule counted before it is marked stays unmarked.
func Configured(r *limiter.Rule) *limiter.Rule {
	r.Prepared(configuredSlot, markConfigured)
	return r
}

func markConfigured(*limiter.Rule) any { return true }
func notConfigured(*limiter.Rule) any  { return false }

// configured reports whether Configured marked r.
func configured(r *limiter.Rule) bool {
	v, _ := r.Prepared(configuredSlot, notConfigured).(bool)
	return v
}

// series returns the cached series of a limit name. A name from the
// policy file (policy) always gets a series of its own; any other name
// past the bound is folded into OtherLimit.
func (m *Metrics) series(limit string, policy bool) *limitSeries {
	if s := m.limitCache.get(limit); s != nil && (!policy || s.name == limit) {
		return s
	}
	s := m.seriesByName(limit, policy)
	m.limitCache.put(limit, s)
	return s
}

// seriesByName is series without the cache in front. Only the names
// that are not from the policy count against Options.MaxLimits, so that
// names given in requests can neither grow the series without bound nor
// take the series of a policy's limit counted for the first time later.
func (m *Metrics) seriesByName(limit string, policy bool) *limitSeries {
	if s, ok := m.limits.Load(limit); ok {
		return s.(*limitSeries)
	}
	name := limit
	if !policy && limit != OtherLimit && (len(limit) > MaxLimitNameLen || m.nLimits.Load() >= int64(m.maxLimits)) {
		name = OtherLimit
		if s, ok := m.limits.Load(name); ok {
			return s.(*limitSeries)
		}
	}
	s := &limitSeries{name: name, queue: m.queue.WithLabelValues(name)}
	v, loaded := m.limits.LoadOrStore(name, s)
	if !loaded && !policy {
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
// registries) finds its series by the limit's name, and so does a front
// end counting policy limits (policy) for a rule first counted folded.
func (m *Metrics) ruleSeries(r *limiter.Rule, policy bool) *limitSeries {
	rs := r.Prepared(seriesSlot, func(r *limiter.Rule) any {
		return &ruleSeries{m: m, s: m.series(r.Name(), policy)}
	}).(*ruleSeries)
	if rs.m == m && (!policy || rs.s.name == r.Name()) {
		return rs.s
	}
	return m.series(r.Name(), policy)
}

// of returns the counters of a limit for one front end.
func (m *Metrics) of(s *limitSeries, f limiter.FrontEnd) *frontSeries {
	if int(f) >= len(s.front) {
		f = limiter.FrontLibrary
	}
	if fs := s.front[f].Load(); fs != nil {
		return fs
	}
	m.makeMu.Lock()
	defer m.makeMu.Unlock()
	if fs := s.front[f].Load(); fs != nil {
		return fs // made meanwhile
	}
	fe := f.String()
	fs := &frontSeries{cs: percpu.NewCounters(nCounters)}
	m.decisionsF.counter(fs.cs, cAllowed, fe, s.name, "allowed")
	m.decisionsF.counter(fs.cs, cDenied, fe, s.name, "denied")
	m.decisionsF.counter(fs.cs, cShadow, fe, s.name, "shadow_denied")
	m.nearF.counter(fs.cs, cNear, fe, s.name)
	m.rejectedF.counter(fs.cs, cRejected, fe, s.name, "429")
	for d := limiter.DegradedDeadline; d <= limiter.DegradedBreakerOpen; d++ {
		fs.degraded[d] = m.degraded.WithLabelValues(fe, s.name, d.String())
	}
	s.front[f].Store(fs)
	return fs
}

// ObserveDecision counts one request's decisions (limiter.Observer): one
// outcome per hit, labelled by the request's front end and the hit's
// limit. Peeks decide nothing and are not counted.
func (m *Metrics) ObserveDecision(req *limiter.Request, res *limiter.Result) {
	slot := percpu.Slot()
	if res.StoreLatency > 0 && int(req.Front) < len(m.latencyBy) {
		m.latencyBy[req.Front].observe(slot, res.StoreLatency)
	}
	if req.Peek {
		return
	}
	policy := fromPolicy(req.Front)
	for i := range req.Hits {
		if i >= len(res.Decisions) {
			break
		}
		r := req.Hits[i].Rule
		fs := m.of(m.ruleSeries(r, policy || configured(r)), req.Front)
		d := &res.Decisions[i]
		switch {
		case res.Flags[i]&limiter.ShadowDenied != 0:
			fs.cs.Add(slot, cShadow, 1)
		case d.Allowed:
			fs.cs.Add(slot, cAllowed, 1)
			if limiter.Near(d) {
				fs.cs.Add(slot, cNear, 1)
			}
		default:
			fs.cs.Add(slot, cDenied, 1)
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
		m.of(m.series(limit, fromPolicy(front)), front).cs.Add(percpu.Slot(), cRejected, 1)
		return
	}
	m.rejected.WithLabelValues(front.String(), limit, strconv.Itoa(status)).Inc()
}

// Queued moves a leaky queue's length. Leaky queues are the gateway's:
// limit is a name from the policy file.
func (m *Metrics) Queued(limit string, delta int) { m.series(limit, true).queue.Add(float64(delta)) }

// LeaseLost counts a concurrency slot a request in flight lost (the
// gateway's LeaseObserver). Such limits are the gateway's: limit is a
// name from the policy file. The series of a limit appears at its first
// loss.
func (m *Metrics) LeaseLost(limit string) { m.lost.WithLabelValues(limit).Inc() }

// InvalidStatus is the code label of an upstream status that is not
// three digits: an HTTP/2 upstream's :status is any integer it sends.
const InvalidStatus = "invalid"

// Upstream counts an upstream response of a route. Statuses outside 0
// to 999 share the code InvalidStatus, so that an upstream cannot grow
// the series without bound.
func (m *Metrics) Upstream(route string, status int) {
	if status < 0 || status >= 600 {
		code := InvalidStatus
		if status >= 0 && status <= 999 {
			code = strconv.Itoa(status)
		}
		m.upstream.WithLabelValues(route, code).Inc()
		return
	}
	rs := m.route(route)
	if c := rs.cells[status].Load(); c > 0 {
		rs.cs.Add(percpu.Slot(), int(c-1), 1)
		return
	}
	m.upstreamFirst(rs, status)
}

// upstreamFirst counts a status not counted per CPU yet on its route:
// it gives the status a counter of the route's cs while there are some
// left, and counts it the usual way after.
func (m *Metrics) upstreamFirst(rs *routeSeries, status int) {
	m.makeMu.Lock()
	c := rs.cells[status].Load()
	if c == 0 && rs.given < routeCodes {
		rs.given++
		c = int32(rs.given)
		m.upstreamF.counter(rs.cs, int(c-1), rs.name, strconv.Itoa(status))
		rs.cells[status].Store(c)
	}
	m.makeMu.Unlock()
	if c > 0 {
		rs.cs.Add(percpu.Slot(), int(c-1), 1)
		return
	}
	p := &rs.plain[status]
	pc := p.Load()
	if pc == nil {
		counter := m.upstream.WithLabelValues(rs.name, strconv.Itoa(status))
		p.CompareAndSwap(nil, &counter)
		pc = p.Load()
	}
	(*pc).Inc()
}

// route returns the upstream counters of a route.
func (m *Metrics) route(name string) *routeSeries {
	if rs := m.routeCache.get(name); rs != nil {
		return rs
	}
	v, ok := m.routes.Load(name)
	if !ok {
		v, _ = m.routes.LoadOrStore(name, &routeSeries{name: strings.Clone(name), cs: percpu.NewCounters(routeCodes)})
	}
	rs := v.(*routeSeries)
	m.routeCache.put(name, rs)
	return rs
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

// tenantSeries is the series of one (route, tenant) pair of
// floodgate_overload_shed_tenants_total, in Metrics.tenants.
type tenantSeries struct {
	key  [2]string // route, tenant
	c    prometheus.Counter
	last time.Duration // when the tenant was last shed (Metrics.clock), under Metrics.tenantMu
}

// OverloadShed counts a request shed by a route's overload control; the
// tenant label is bounded (Options.MaxTenants). A tenant shed while every
// series is held by a tenant shed within Options.IdleTenant is counted as
// OtherTenant; otherwise it takes the series of the tenant shed longest
// ago, which is deleted. A tenant is what a client sent: one that is not
// valid UTF-8, which no label value may hold, is counted as OtherTenant.
func (m *Metrics) OverloadShed(route, tier, tenant, reason string) {
	m.shed.WithLabelValues(route, tier, reason).Inc()
	if tenant == OtherTenant || !utf8.ValidString(tenant) {
		m.foldedOf(route).Inc()
		return
	}
	now := m.clock()
	m.tenantMu.Lock()
	c := m.tenantCounter(route, tenant, now)
	m.tenantMu.Unlock()
	if c == nil {
		c = m.foldedOf(route)
	}
	// c is live: a series is taken back only once its tenant has not been
	// shed for IdleTenant, and its last shed is the one just noted.
	c.Inc()
}

// tenantCounter returns the series a shed of tenant on route at now
// counts in, or nil for the route's OtherTenant series. Past the bound, a
// new tenant takes the series of the tenant shed longest ago if that one
// has not been shed for IdleTenant. Its caller holds tenantMu. Looking
// for that tenant visits every series, but only when a new tenant is shed
// at or after tenantScan, which a search that finds none idle moves to
// the instant the oldest would be: a flood of new names makes one search
// per series taken back, and one each time the oldest turns out to have
// been shed meanwhile, not one per name.
func (m *Metrics) tenantCounter(route, tenant string, now time.Duration) prometheus.Counter {
	if s := m.tenants[[2]string{route, tenant}]; s != nil {
		s.last = max(s.last, now) // now was read before the lock
		return s.c
	}
	if len(m.tenants) >= m.maxTenants {
		if now < m.tenantScan {
			return nil
		}
		var oldest *tenantSeries
		for _, s := range m.tenants {
			if oldest == nil || s.last < oldest.last {
				oldest = s
			}
		}
		if oldest == nil {
			return nil
		}
		if idleAt := oldest.last + m.idleTenant; now < idleAt {
			m.tenantScan = idleAt
			return nil
		}
		delete(m.tenants, oldest.key)
		m.shedTenant.DeleteLabelValues(oldest.key[0], oldest.key[1])
	}
	s := &tenantSeries{key: [2]string{strings.Clone(route), strings.Clone(tenant)}, last: now}
	s.c = m.shedTenant.WithLabelValues(s.key[0], s.key[1])
	m.tenants[s.key] = s
	return s.c
}

// foldedOf returns the OtherTenant series of a route.
func (m *Metrics) foldedOf(route string) prometheus.Counter {
	c, ok := m.folded.Load(route)
	if !ok {
		route = strings.Clone(route)
		c, _ = m.folded.LoadOrStore(route, m.shedTenant.WithLabelValues(route, OtherTenant))
	}
	return c.(prometheus.Counter)
}

// WatchOverload makes the overload gauges read the controllers that
// visit visits, at each scrape (a gateway.Gateway calls it).
func (m *Metrics) WatchOverload(visit func(each func(route string, limit, inflight, queued int, latency, noLoad time.Duration))) {
	m.overload.visit.Store(&visit)
}

// overloadCollector makes the overload gauges at each scrape.
type overloadCollector struct {
	visit atomic.Pointer[func(each func(route string, limit, inflight, queued int, latency, noLoad time.Duration))]
}

var (
	overloadLimitDesc    = prometheus.NewDesc("floodgate_overload_limit", "A route's cap on requests in flight to its upstream: fixed, or learnt by the adaptive limit.", []string{"route"}, nil)
	overloadInflightDesc = prometheus.NewDesc("floodgate_overload_inflight", "Requests forwarded under a route's overload control and not answered yet.", []string{"route"}, nil)
	overloadQueuedDesc   = prometheus.NewDesc("floodgate_overload_queued", "Requests waiting for a place under a route's overload control.", []string{"route"}, nil)
	overloadLatencyDesc  = prometheus.NewDesc("floodgate_overload_latency_seconds", "The adaptive limit's mean upstream latency (forwarding to status line) of its last window.", []string{"route"}, nil)
	overloadNoLoadDesc   = prometheus.NewDesc("floodgate_overload_noload_latency_seconds", "The adaptive limit's estimate of the upstream's latency without queueing.", []string{"route"}, nil)
)

func (c *overloadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{overloadLimitDesc, overloadInflightDesc, overloadQueuedDesc, overloadLatencyDesc, overloadNoLoadDesc} {
		ch <- d
	}
}

func (c *overloadCollector) Collect(ch chan<- prometheus.Metric) {
	visit := c.visit.Load()
	if visit == nil {
		return
	}
	(*visit)(func(route string, limit, inflight, queued int, latency, noLoad time.Duration) {
		ch <- prometheus.MustNewConstMetric(overloadLimitDesc, prometheus.GaugeValue, float64(limit), route)
		ch <- prometheus.MustNewConstMetric(overloadInflightDesc, prometheus.GaugeValue, float64(inflight), route)
		ch <- prometheus.MustNewConstMetric(overloadQueuedDesc, prometheus.GaugeValue, float64(queued), route)
		ch <- prometheus.MustNewConstMetric(overloadLatencyDesc, prometheus.GaugeValue, latency.Seconds(), route)
		ch <- prometheus.MustNewConstMetric(overloadNoLoadDesc, prometheus.GaugeValue, noLoad.Seconds(), route)
	})
}
