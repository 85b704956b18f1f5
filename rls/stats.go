package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// DefaultMaxStatKeys is how many series that hold values from requests
// (detailed_metric, value_to_metric, limit overrides, unknown domains) are
// made before the names of new ones are folded into FoldedKey.
const DefaultMaxStatKeys = 10000

// FoldedKey is the key1 label of the statistics folded past
// StatsOptions.MaxKeys, and the domain of folded unknown domains.
const FoldedKey = "_other"

// MaxStatNameLen is the longest statistics name made from request values
// (and unknown domain) that gets a series of its own: a longer one is
// folded into FoldedKey as one past StatsOptions.MaxKeys is, so that the
// bound on their number bounds the memory they hold and the size of a
// scrape too (a request's values may be up to a megabyte long).
const MaxStatNameLen = 1024

// StatsOptions configure Stats. The zero value is usable.
type StatsOptions struct {
	// NearLimitRatio is the share of a limit past which hits count as
	// near_limit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO); 0 means 0.8.
	NearLimitRatio float64
	// MaxKeys bounds the series that hold values from requests, and the
	// statistics names remembered for them (0: DefaultMaxStatKeys). Names
	// made only of the configuration are never folded.
	MaxKeys int
	// ConstLabels are added to every series (envoyproxy/ratelimit's
	// EXTRA_TAGS).
	ConstLabels prometheus.Labels
	// ResponseTimeMilliseconds measures ratelimit_service_response_time_seconds
	// in milliseconds, as envoyproxy/ratelimit's
	// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS does.
	ResponseTimeMilliseconds bool
	// Statsd, when set, also receives the statistics as
	// envoyproxy/ratelimit sends them to statsd: the times of gRPC calls as
	// they end, the counters (what they counted since the last flush) and
	// gauges at every FlushStatsd. See FlushStatsd.
	Statsd StatsdSink
	// PeerNames names the series as envoyproxy/ratelimit's Prometheus
	// exporter does when EXTRA_TAGS are set (ConstLabels): its default
	// mapping then matches none of its statistics, so that each becomes a
	// series of its own, named after its whole statsd name (the tags
	// included) with every character but letters, digits and '_' made
	// '_', without labels: ratelimit_service_rate_limit_D_K_total_hits___env_prod
	// for the statistic ratelimit.service.rate_limit.D.K.total_hits and
	// EXTRA_TAGS=env:prod. The times of gRPC calls are then summaries in
	// milliseconds (quantiles 0.5, 0.9 and 0.99, over ten minutes), and
	// the Go runtime's statistics are there too (ratelimit_go_*). These
	// series replace the others of Stats.
	PeerNames bool
}

// StatsdSink receives statistics in statsd's terms: name is the whole
// statsd name, EXTRA_TAGS included.
type StatsdSink interface {
	Counter(name string, delta uint64)
	Gauge(name string, value uint64)
	Timer(name string, milliseconds float64)
}

// Stats counts envoyproxy/ratelimit's statistics and exposes them as its
// Prometheus exporter does (its default statsd-exporter mapping): the
// statistic ratelimit.service.rate_limit.DOMAIN.KEY1[.KEY2...].STAT
// becomes the series ratelimit_service_rate_limit_STAT{domain, key1[,
// key2]}, for STAT total_hits, over_limit, near_limit, within_limit and
// shadow_mode, counted as envoyproxy/ratelimit counts them. The parts
// past the third are dropped, so every name that differs only there (a
// descriptor of three levels or more with detailed_metric, limits given
// in requests that share their first two entries) is folded onto one
// series that counts their sum; so are names that the clean-up makes
// alike, and an empty key2 is no key2. Series appear with their first
// count. Besides:
//
//	ratelimit_service_should_rate_limit_error{err_type}   redis_error (the store failed), service_error (a bad request)
//	ratelimit_service_total_requests{grpc_method}         gRPC calls (see UnaryInterceptor)
//	ratelimit_service_response_time_seconds{grpc_method}  their duration
//	ratelimit_service_config_load_success, ratelimit_service_config_load_error
//	ratelimit_service_global_shadow_mode                  answers the global shadow mode turned to OK
//	ratelimit_service_rate_limit_DOMAIN_domain_not_found  descriptors of requests for an unknown domain
//
// (unknown domains whose names the exporter escapes alike, "a-b" and
// "a_b", are one series). Series that hold values from requests are
// bounded by MaxKeys: past it, a name whose series does not exist yet is
// counted as DOMAIN._other (an unknown domain as _other). Stats is safe
// for concurrent use; a nil *Stats counts nothing.
type Stats struct {
	near    float32
	maxKeys int64
	consts  prometheus.Labels
	millis  bool

	// keys remembers the series of each statistics name seen (those from
	// requests while dynamic < maxKeys); series holds one *limitStats per
	// label set, which every name with those labels shares.
	keys      sync.Map // statistics name → *limitStats
	series    sync.Map // labels joined by 0xff → *limitStats
	dynamic   atomic.Int64
	dynSeries atomic.Int64
	folded    atomic.Uint64

	domains     sync.Map // unknown domain, escaped as in its series' name → *notFound
	domainCount atomic.Int64

	errors       *prometheus.CounterVec
	requests     *prometheus.CounterVec
	responseTime *prometheus.HistogramVec
	// The counters below have no labels; they are vectors so that, as
	// envoyproxy/ratelimit's, they appear with their first count.
	loadOK       *prometheus.CounterVec
	loadErr      *prometheus.CounterVec
	globalShadow *prometheus.CounterVec

	descs [2][5]*prometheus.Desc // [key2 present][stat]

	// sd and what only it needs: per-name counters, of the service, of
	// gRPC methods and of unknown domains.
	sd      StatsdSink
	sdTags  string // EXTRA_TAGS as gostats appends them to a name
	svc     [svcStats]sdCounter
	methods sync.Map // gRPC method → *sdCounter
	sdDoms  sync.Map // unknown domain, cleaned → *sdCounter
	sdDomN  atomic.Int64
	flushMu sync.Mutex // serializes FlushStatsd (the counters' last values)
	// perName keeps the counters of every statistics name (statsd or
	// PeerNames); peerNames names the series after them.
	perName, peerNames bool
	times              sync.Map  // gRPC method → prometheus.Summary, with peerNames
	calls              sync.Map  // gRPC method's full name → *callStats
	rtLast             [5]uint64 // the runtime's counters at the last flush; guarded by flushMu
}

// sdCounter is a counter of one statistics name: sent to statsd as what
// it counted since the last flush, exposed under the name with
// StatsOptions.PeerNames.
type sdCounter struct {
	name string           // the whole statsd name
	desc *prometheus.Desc // with PeerNames
	n    atomic.Uint64
	last uint64 // guarded by Stats.flushMu
}

// named makes c the counter of the statistics name.
func (s *Stats) named(c *sdCounter, name string) *sdCounter {
	c.name = name
	if s.peerNames {
		c.desc = prometheus.NewDesc(escapeMetricName(name), peerHelp, nil, nil)
	}
	return c
}

// peerHelp is the help text of the series of StatsOptions.PeerNames, the
// exporter's.
const peerHelp = "Metric autogenerated by statsd_exporter."

// delta returns what c counted since the previous call.
func (c *sdCounter) delta() uint64 {
	n := c.n.Load()
	d := n - c.last
	c.last = n
	return d
}

// The service's own counters, in statsd.
const (
	svcLoadOK = iota
	svcLoadErr
	svcGlobalShadow
	svcRedisErr
	svcServiceErr
	svcStats
)

var svcNames = [svcStats]string{
	"ratelimit.service.config_load_success", "ratelimit.service.config_load_error", "ratelimit.service.global_shadow_mode",
	"ratelimit.service.call.should_rate_limit.redis_error", "ratelimit.service.call.should_rate_limit.service_error",
}

// limitStats are the counters of one series: of every statistics name
// with its labels.
type limitStats struct {
	labels []string // domain, key1[, key2]
	c      [5]atomic.Uint64
}

// nameStats are the counters of one statistics name: its series and,
// for statsd, its own.
type nameStats struct {
	series *limitStats
	sd     *[5]sdCounter // nil without statsd
}

// notFound counts the descriptors of unknown domains of one series.
type notFound struct {
	desc *prometheus.Desc
	n    atomic.Uint64
}

// The statistics of a limit, in envoyproxy/ratelimit's names.
const (
	statTotal = iota
	statOver
	statNear
	statWithin
	statShadow
)

var statNames = [5]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

// NewStats registers the statistics on reg.
func NewStats(reg prometheus.Registerer, opts StatsOptions) (*Stats, error) {
	ratio := opts.NearLimitRatio
	if ratio == 0 {
		ratio = 0.8
	}
	if !(ratio >= 0 && ratio <= 1) { // NaN too
		return nil, errors.New("rls: stats: the near-limit ratio must be between 0 and 1")
	}
	s := &Stats{near: float32(ratio), maxKeys: int64(opts.MaxKeys), consts: opts.ConstLabels, millis: opts.ResponseTimeMilliseconds,
		sd: opts.Statsd, sdTags: statsdTags(opts.ConstLabels), peerNames: opts.PeerNames}
	s.perName = s.sd != nil || s.peerNames
	if s.maxKeys <= 0 {
		s.maxKeys = DefaultMaxStatKeys
	}
	for i := range s.svc {
		s.named(&s.svc[i], svcNames[i]+s.sdTags)
	}
	const help = "Counted as envoyproxy/ratelimit counts it."
	for i, name := range statNames {
		s.descs[0][i] = prometheus.NewDesc("ratelimit_service_rate_limit_"+name, help, []string{"domain", "key1"}, s.consts)
		s.descs[1][i] = prometheus.NewDesc("ratelimit_service_rate_limit_"+name, help, []string{"domain", "key1", "key2"}, s.consts)
	}
	s.errors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_should_rate_limit_error",
		Help: "Requests that failed: redis_error (the store), service_error (the request).", ConstLabels: s.consts}, []string{"err_type"})
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_total_requests",
		Help: "gRPC calls.", ConstLabels: s.consts}, []string{"grpc_method"})
	s.responseTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ratelimit_service_response_time_seconds",
		Help: "Duration of gRPC calls.", ConstLabels: s.consts, Buckets: prometheus.DefBuckets}, []string{"grpc_method"})
	s.loadOK = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success",
		Help: "Configurations loaded.", ConstLabels: s.consts}, nil)
	s.loadErr = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error",
		Help: "Configurations that did not load.", ConstLabels: s.consts}, nil)
	s.globalShadow = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_global_shadow_mode",
		Help: "Answers the global shadow mode turned from OVER_LIMIT to OK.", ConstLabels: s.consts}, nil)
	cs := []prometheus.Collector{s.errors, s.requests, s.responseTime, s.loadOK, s.loadErr, s.globalShadow, statsCollector{s}}
	if s.peerNames {
		cs = []prometheus.Collector{peerCollector{s}}
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls: stats: %w", err)
		}
	}
	return s, nil
}

// ObserveLoad counts a configuration that loaded (err nil) or did not.
func (s *Stats) ObserveLoad(err error) {
	if s == nil {
		return
	}
	if err == nil {
		s.loadOK.WithLabelValues().Inc()
		s.svc[svcLoadOK].n.Add(1)
	} else {
		s.loadErr.WithLabelValues().Inc()
		s.svc[svcLoadErr].n.Add(1)
	}
}

// UnaryInterceptor counts gRPC calls and their durations, by method (the
// last part of the method's full name), as envoyproxy/ratelimit's server
// does for every call (health checks included).
func (s *Stats) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		c := s.call(info.FullMethod)
		c.requests.Inc()
		if c.sd != nil {
			c.sd.n.Add(1)
		}
		resp, err := handler(ctx, req)
		el := time.Since(start)
		d := el.Seconds()
		if s.millis {
			d *= 1000
		}
		c.time.Observe(d)
		if s.sd != nil {
			// As envoyproxy/ratelimit: whole milliseconds, sent at once.
			s.sd.Timer(c.sdTimer, float64(el.Milliseconds()))
		}
		if c.summary != nil {
			c.summary.Observe(float64(el.Milliseconds()))
		}
		return resp, err
	}
}

// callStats are the statistics of one gRPC method's calls, found once so
// that a call looks up neither label values nor names.
type callStats struct {
	requests prometheus.Counter
	time     prometheus.Observer
	sd       *sdCounter         // with statsd or PeerNames
	sdTimer  string             // the statsd name of the calls' times
	summary  prometheus.Summary // with PeerNames
}

// call returns the statistics of a gRPC method, by its full name (the
// methods of the services registered: a bounded set).
func (s *Stats) call(fullMethod string) *callStats {
	if c, ok := s.calls.Load(fullMethod); ok {
		return c.(*callStats)
	}
	m := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	c := &callStats{requests: s.requests.WithLabelValues(m), time: s.responseTime.WithLabelValues(m),
		sdTimer: "ratelimit_server." + m + ".response_time" + s.sdTags}
	if s.perName {
		c.sd = s.method(m)
	}
	if s.peerNames {
		c.summary = s.time(m)
	}
	v, _ := s.calls.LoadOrStore(fullMethod, c)
	return v.(*callStats)
}

// method returns the statsd counter of a gRPC method's calls.
func (s *Stats) method(m string) *sdCounter {
	if c, ok := s.methods.Load(m); ok {
		return c.(*sdCounter)
	}
	c, _ := s.methods.LoadOrStore(m, s.named(new(sdCounter), "ratelimit_server."+m+".total_requests"+s.sdTags))
	return c.(*sdCounter)
}

// time returns the summary of a gRPC method's times (PeerNames): the
// exporter's for a timer it maps to nothing.
func (s *Stats) time(m string) prometheus.Summary {
	if v, ok := s.times.Load(m); ok {
		return v.(prometheus.Summary)
	}
	v, _ := s.times.LoadOrStore(m, prometheus.NewSummary(prometheus.SummaryOpts{
		Name:       escapeMetricName("ratelimit_server." + m + ".response_time" + s.sdTags),
		Help:       peerHelp,
		Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
		MaxAge:     10 * time.Minute,
	}))
	return v.(prometheus.Summary)
}

func (s *Stats) serviceError() {
	if s != nil {
		s.errors.WithLabelValues("service_error").Inc()
		s.svc[svcServiceErr].n.Add(1)
	}
}

func (s *Stats) storeError() {
	if s != nil {
		s.errors.WithLabelValues("redis_error").Inc()
		s.svc[svcRedisErr].n.Add(1)
	}
}

func (s *Stats) globalShadowed() {
	if s != nil {
		s.globalShadow.WithLabelValues().Inc()
		s.svc[svcGlobalShadow].n.Add(1)
	}
}

// domainNotFound counts n descriptors of a request for an unknown domain.
func (s *Stats) domainNotFound(domain string, n int) {
	if s == nil {
		return
	}
	// The series is named after the escaped domain: domains that escape
	// alike are one series.
	name := FoldedKey
	if len(domain) <= MaxStatNameLen {
		name = escapeMetricName(sanitizeStat(domain))
	}
	c, ok := s.domains.Load(name)
	if !ok {
		if s.domainCount.Load() >= s.maxKeys {
			name = FoldedKey
		}
		nf := &notFound{desc: prometheus.NewDesc("ratelimit_service_rate_limit_"+name+"_domain_not_found",
			"Descriptors of requests for an unknown domain.", nil, s.consts)}
		c, ok = s.domains.LoadOrStore(name, nf)
		if !ok && name != FoldedKey {
			s.domainCount.Add(1)
		}
	}
	c.(*notFound).n.Add(uint64(n))
	if s.perName {
		s.sdDomain(domain).n.Add(uint64(n))
	}
}

// sdDomain returns the statsd counter of an unknown domain's descriptors:
// one per domain name (as cleaned for statistics) up to the bound, then
// _other's.
func (s *Stats) sdDomain(domain string) *sdCounter {
	name := FoldedKey
	if len(domain) <= MaxStatNameLen {
		name = sanitizeStat(domain)
	}
	if c, ok := s.sdDoms.Load(name); ok {
		return c.(*sdCounter)
	}
	if s.sdDomN.Load() >= s.maxKeys {
		name = FoldedKey
	}
	c, loaded := s.sdDoms.LoadOrStore(name, s.named(new(sdCounter), "ratelimit.service.rate_limit."+name+".domain_not_found"+s.sdTags))
	if !loaded && name != FoldedKey {
		s.sdDomN.Add(1)
	}
	return c.(*sdCounter)
}

// count adds one descriptor's hits to the statistics named key: hits of a
// window that counted before and then after the request, against a limit
// of threshold; over says the descriptor was over its limit, shadow that
// it is in shadow mode. As envoyproxy/ratelimit, the hits of a request
// that crosses the limit are split: those past the limit are over_limit,
// those between the near-limit threshold and the limit near_limit.
func (s *Stats) count(key string, static bool, hits, before, after, threshold int64, over, shadow bool) {
	ls, sd := s.limit(key, static)
	add := func(stat int, n int64) {
		ls.c[stat].Add(uint64(n))
		if sd != nil {
			sd[stat].n.Add(uint64(n))
		}
	}
	near := int64(math.Floor(float64(float32(threshold) * s.near)))
	add(statTotal, hits)
	if over {
		overHits := hits
		if before < threshold {
			overHits = after - threshold
			add(statNear, threshold-max(near, before))
		}
		add(statOver, overHits)
		if shadow {
			add(statShadow, overHits)
		}
		return
	}
	add(statWithin, hits)
	if after > near {
		nearHits := hits
		if before < near {
			nearHits = after - near
		}
		add(statNear, nearHits)
	}
}

// limit returns the counters of the series of the statistics named key:
// the series of its labels, shared by every name that has them, or, for a
// name from requests whose series would pass the bound, its domain's
// FoldedKey. A name is remembered (so that the next count is one lookup)
// while the names from requests are within the bound. With statsd, it
// also returns the name's own counters; a name past the bound counts in
// its domain's DOMAIN._other.
func (s *Stats) limit(key string, static bool) (*limitStats, *[5]sdCounter) {
	if v, ok := s.keys.Load(key); ok {
		ns := v.(*nameStats)
		return ns.series, ns.sd
	}
	long := !static && len(key) > MaxStatNameLen
	var labels []string
	if long {
		// Only the domain is kept of a name too long for a series.
		domain := key
		if i := strings.IndexByte(key, '.'); i >= 0 {
			domain = key[:i]
		}
		labels = []string{statLabels(domain)[0], FoldedKey}
	} else {
		labels = statLabels(key)
	}
	ls := s.seriesOf(labels, static || long)
	if long || !static && s.dynamic.Load() >= s.maxKeys {
		if !s.perName {
			return ls, nil
		}
		// The folded name's own counters, made once as a name of the
		// configuration would be; the series stays the one found above.
		folded := labels[0] + "." + FoldedKey
		v, ok := s.keys.Load(folded)
		if !ok {
			fs := s.seriesOf([]string{labels[0], FoldedKey}, true)
			v, _ = s.keys.LoadOrStore(folded, s.newNameStats(folded, fs))
		}
		return ls, v.(*nameStats).sd
	}
	v, loaded := s.keys.LoadOrStore(key, s.newNameStats(key, ls))
	if !loaded && !static {
		s.dynamic.Add(1)
	}
	ns := v.(*nameStats)
	return ns.series, ns.sd
}

// newNameStats makes the counters of the statistics named key, of series
// ls.
func (s *Stats) newNameStats(key string, ls *limitStats) *nameStats {
	ns := &nameStats{series: ls}
	if s.perName {
		ns.sd = new([5]sdCounter)
		prefix := "ratelimit.service.rate_limit." + sanitizeStat(key) + "."
		for i := range ns.sd {
			s.named(&ns.sd[i], prefix+statNames[i]+s.sdTags)
		}
	}
	return ns
}

// FlushStatsd sends the statistics to StatsOptions.Statsd as
// envoyproxy/ratelimit's statsd sink does at each of its flushes (every
// STATS_FLUSH_INTERVAL): every counter that counted since the previous
// flush, as what it counted then, and the Go runtime's gauges (and
// counters, as their growth) under ratelimit.go. Names are
// envoyproxy/ratelimit's, each followed by EXTRA_TAGS as ".__key=value"
// in the order of the keys:
//
//	ratelimit.service.rate_limit.DOMAIN.KEY[_VALUE][.KEY[_VALUE]...].STAT  total_hits, over_limit, near_limit, within_limit, shadow_mode
//	ratelimit.service.rate_limit.DOMAIN.domain_not_found
//	ratelimit.service.config_load_success, ratelimit.service.config_load_error, ratelimit.service.global_shadow_mode
//	ratelimit.service.call.should_rate_limit.redis_error, ...service_error
//	ratelimit_server.METHOD.total_requests                               (and, sent as each call ends, ratelimit_server.METHOD.response_time in ms)
//
// FlushStatsd does nothing without a sink.
func (s *Stats) FlushStatsd() {
	if s == nil || s.sd == nil {
		return
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.eachCounter(func(c *sdCounter) {
		if d := c.delta(); d != 0 {
			s.sd.Counter(c.name, d)
		}
	})
	s.flushRuntime()
}

// eachCounter calls f with every statsd counter: the descriptors' (per
// name), the service's, the gRPC methods' and the domains'.
func (s *Stats) eachCounter(f func(*sdCounter)) {
	s.keys.Range(func(_, v any) bool {
		for i := range v.(*nameStats).sd {
			f(&v.(*nameStats).sd[i])
		}
		return true
	})
	for i := range s.svc {
		f(&s.svc[i])
	}
	for _, m := range []*sync.Map{&s.methods, &s.sdDoms} {
		m.Range(func(_, v any) bool {
			f(v.(*sdCounter))
			return true
		})
	}
}

// seriesOf returns the series of labels, made on first use; a series from
// requests past the bound is its domain's FoldedKey instead.
func (s *Stats) seriesOf(labels []string, static bool) *limitStats {
	id := strings.Join(labels, "\xff")
	if v, ok := s.series.Load(id); ok {
		return v.(*limitStats)
	}
	if !static && s.dynSeries.Load() >= s.maxKeys {
		s.folded.Add(1)
		labels = []string{labels[0], FoldedKey}
		id = strings.Join(labels, "\xff")
		static = true
	}
	v, loaded := s.series.LoadOrStore(id, &limitStats{labels: labels})
	if !loaded && !static {
		s.dynSeries.Add(1)
	}
	return v.(*limitStats)
}

// statLabels are the labels the exporter's default mapping gives a
// statistics name: its first three parts, split at dots, after
// envoyproxy/ratelimit's clean-up of the name. An empty third part is
// none (Prometheus takes an empty label for a missing one), and bytes
// that are not UTF-8 become U+FFFD (a label value must be UTF-8).
func statLabels(key string) []string {
	parts := strings.SplitN(strings.ToValidUTF8(sanitizeStat(key), "\uFFFD"), ".", 4)
	if len(parts) > 3 {
		parts = parts[:3]
	}
	if len(parts) == 3 && parts[2] == "" {
		parts = parts[:2]
	}
	for len(parts) < 2 {
		parts = append(parts, "")
	}
	return parts
}

// statUnsafe reports the characters sanitizeStat replaces, besides the
// dots of addresses.
func statUnsafe(r rune) bool { return r == ':' || r == '|' || r < 0x20 || r == 0x7f }

var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitizeStat cleans a statistics name as envoyproxy/ratelimit does: ':'
// and '|' become '_', and so do the dots of IPv4 addresses. Control
// characters become '_' too: a name from a request (a descriptor's value
// with detailed_metric, an unknown domain) must stay one statsd line, and
// a newline in it would start a line of the caller's own.
func sanitizeStat(s string) string {
	if strings.ContainsFunc(s, statUnsafe) {
		s = strings.Map(func(r rune) rune {
			if statUnsafe(r) {
				return '_'
			}
			return r
		}, s)
	}
	if strings.Count(s, ".") >= 3 && ipv4.MatchString(s) {
		s = ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
	}
	return s
}

// statsCollector exposes the counters of limitStats. Its series have two
// or three labels, as the exporter's do, so it describes none up front
// (an unchecked collector).
type statsCollector struct{ s *Stats }

func (statsCollector) Describe(chan<- *prometheus.Desc) {}

// Collect sends one metric per series (each label set once: the names
// that share it share its counters).
func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.series.Range(func(_, v any) bool {
		ls := v.(*limitStats)
		k2 := 0
		if len(ls.labels) == 3 {
			k2 = 1
		}
		for i := range ls.c {
			if n := ls.c[i].Load(); n > 0 {
				ch <- constCounter(s.descs[k2][i], float64(n), ls.labels...)
			}
		}
		return true
	})
	s.domains.Range(func(_, v any) bool {
		nf := v.(*notFound)
		if n := nf.n.Load(); n > 0 {
			ch <- constCounter(nf.desc, float64(n))
		}
		return true
	})
}

// constCounter is a counter's value at collection time; a metric that
// cannot be made is reported as invalid rather than panicking in the
// scrape.
func constCounter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, prometheus.CounterValue, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, fmt.Errorf("rls: stats: %w", err))
	}
	return m
}

// escapeMetricName makes s part of a metric name as the statsd exporter
// does: every character but letters, digits and '_' becomes '_'.
// (a run of dashes becomes one '_').
func escapeMetricName(s string) string {
	var b strings.Builder
	var prev rune
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_':
			b.WriteRune(c)
		case c == '-' && prev == '-':
			continue
		default:
			b.WriteByte('_')
		}
		prev = c
	}
	return b.String()
}

// flushRuntime sends the Go runtime's statistics as gostats' runtime
// statistics, which envoyproxy/ratelimit sends under ratelimit.go: the
// gauges every time, the counters as their growth since the last flush
// when they grew. (gostats sends its gauge sys as 0 and never its counter
// lookups; so does this.)
func (s *Stats) flushRuntime() {
	counters, gauges := runtimeStats()
	for i, c := range counters {
		if d := c.v - s.rtLast[i]; d != 0 {
			s.sd.Counter("ratelimit.go."+c.name+s.sdTags, d)
		}
		s.rtLast[i] = c.v
	}
	for _, g := range gauges {
		s.sd.Gauge("ratelimit.go."+g.name+s.sdTags, g.v)
	}
}

// runtimeStat is one of gostats' runtime statistics.
type runtimeStat struct {
	name string
	v    uint64
}

// runtimeStats are gostats' runtime statistics now: its counters (totals
// since the start) and its gauges.
func runtimeStats() ([5]runtimeStat, []runtimeStat) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return [5]runtimeStat{{"totalAlloc", m.TotalAlloc}, {"mallocs", m.Mallocs}, {"frees", m.Frees}, {"pauseTotalNs", m.PauseTotalNs}, {"numGC", uint64(m.NumGC)}},
		[]runtimeStat{
			{"alloc", m.Alloc}, {"sys", 0}, {"heapAlloc", m.HeapAlloc}, {"heapSys", m.HeapSys}, {"heapIdle", m.HeapIdle},
			{"heapInuse", m.HeapInuse}, {"heapReleased", m.HeapReleased}, {"heapObjects", m.HeapObjects},
			{"nextGC", m.NextGC}, {"lastGC", m.LastGC}, {"gcCPUPercent", uint64(m.GCCPUFraction * 100)},
			{"numGoroutine", uint64(runtime.NumGoroutine())},
		}
}

// peerCollector exposes the series of StatsOptions.PeerNames: one per
// statistics name that counted, the times' summaries and the runtime's
// statistics. It describes none up front (an unchecked collector).
type peerCollector struct{ s *Stats }

func (peerCollector) Describe(chan<- *prometheus.Desc) {}

func (c peerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.eachCounter(func(sc *sdCounter) {
		if n := sc.n.Load(); n > 0 {
			ch <- constCounter(sc.desc, float64(n))
		}
	})
	s.times.Range(func(_, v any) bool {
		v.(prometheus.Summary).Collect(ch)
		return true
	})
	counters, gauges := runtimeStats()
	for _, rs := range counters {
		if rs.v > 0 {
			ch <- constCounter(prometheus.NewDesc(escapeMetricName("ratelimit.go."+rs.name+s.sdTags), peerHelp, nil, nil), float64(rs.v))
		}
	}
	for _, rs := range gauges {
		d := prometheus.NewDesc(escapeMetricName("ratelimit.go."+rs.name+s.sdTags), peerHelp, nil, nil)
		m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, float64(rs.v))
		if err != nil {
			m = prometheus.NewInvalidMetric(d, fmt.Errorf("rls: stats: %w", err))
		}
		ch <- m
	}
}

// statsdTags is how gostats appends tags to a statsd name: ".__key=value"
// for each tag, in the order of the keys, the characters '.', ':' and '|'
// of a value made '_'; a tag with an empty key or value is left out.
func statsdTags(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k, v := range tags {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	clean := strings.NewReplacer(".", "_", ":", "_", "|", "_")
	for _, k := range keys {
		b.WriteString(".__")
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(clean.Replace(tags[k]))
	}
	return b.String()
}
