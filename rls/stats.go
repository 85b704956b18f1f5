package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
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
}

// limitStats are the counters of one series: of every statistics name
// with its labels.
type limitStats struct {
	labels []string // domain, key1[, key2]
	c      [5]atomic.Uint64
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
	if ratio < 0 || ratio > 1 {
		return nil, errors.New("rls: stats: the near-limit ratio must be between 0 and 1")
	}
	s := &Stats{near: float32(ratio), maxKeys: int64(opts.MaxKeys), consts: opts.ConstLabels, millis: opts.ResponseTimeMilliseconds}
	if s.maxKeys <= 0 {
		s.maxKeys = DefaultMaxStatKeys
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
	for _, c := range []prometheus.Collector{s.errors, s.requests, s.responseTime, s.loadOK, s.loadErr, s.globalShadow, statsCollector{s}} {
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
	} else {
		s.loadErr.WithLabelValues().Inc()
	}
}

// UnaryInterceptor counts gRPC calls and their durations, by method (the
// last part of the method's full name), as envoyproxy/ratelimit's server
// does for every call (health checks included).
func (s *Stats) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		s.requests.WithLabelValues(method).Inc()
		resp, err := handler(ctx, req)
		d := time.Since(start).Seconds()
		if s.millis {
			d *= 1000
		}
		s.responseTime.WithLabelValues(method).Observe(d)
		return resp, err
	}
}

func (s *Stats) serviceError() {
	if s != nil {
		s.errors.WithLabelValues("service_error").Inc()
	}
}

func (s *Stats) storeError() {
	if s != nil {
		s.errors.WithLabelValues("redis_error").Inc()
	}
}

func (s *Stats) globalShadowed() {
	if s != nil {
		s.globalShadow.WithLabelValues().Inc()
	}
}

// domainNotFound counts n descriptors of a request for an unknown domain.
func (s *Stats) domainNotFound(domain string, n int) {
	if s == nil {
		return
	}
	// The series is named after the escaped domain: domains that escape
	// alike are one series.
	name := escapeMetricName(sanitizeStat(domain))
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
}

// count adds one descriptor's hits to the statistics named key: hits of a
// window that counted before and then after the request, against a limit
// of threshold; over says the descriptor was over its limit, shadow that
// it is in shadow mode. As envoyproxy/ratelimit, the hits of a request
// that crosses the limit are split: those past the limit are over_limit,
// those between the near-limit threshold and the limit near_limit.
func (s *Stats) count(key string, static bool, hits, before, after, threshold int64, over, shadow bool) {
	ls := s.limit(key, static)
	near := int64(math.Floor(float64(float32(threshold) * s.near)))
	ls.c[statTotal].Add(uint64(hits))
	if over {
		overHits := hits
		if before < threshold {
			overHits = after - threshold
			ls.c[statNear].Add(uint64(threshold - max(near, before)))
		}
		ls.c[statOver].Add(uint64(overHits))
		if shadow {
			ls.c[statShadow].Add(uint64(overHits))
		}
		return
	}
	ls.c[statWithin].Add(uint64(hits))
	if after > near {
		nearHits := hits
		if before < near {
			nearHits = after - near
		}
		ls.c[statNear].Add(uint64(nearHits))
	}
}

// limit returns the counters of the series of the statistics named key:
// the series of its labels, shared by every name that has them, or, for a
// name from requests whose series would pass the bound, its domain's
// FoldedKey. A name is remembered (so that the next count is one lookup)
// while the names from requests are within the bound.
func (s *Stats) limit(key string, static bool) *limitStats {
	if v, ok := s.keys.Load(key); ok {
		return v.(*limitStats)
	}
	ls := s.seriesOf(statLabels(key), static)
	if !static && s.dynamic.Load() >= s.maxKeys {
		return ls
	}
	v, loaded := s.keys.LoadOrStore(key, ls)
	if !loaded && !static {
		s.dynamic.Add(1)
	}
	return v.(*limitStats)
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

var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitizeStat cleans a statistics name as envoyproxy/ratelimit does: ':'
// and '|' become '_', and so do the dots of IPv4 addresses.
func sanitizeStat(s string) string {
	if strings.ContainsAny(s, ":|") {
		s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
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
