package app

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate/floodgate/internal/buildinfo"
	"github.com/floodgate/floodgate/internal/h2guard"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/redisstore"
)

// newMetrics builds the registry behind /metrics: Floodgate's series and
// the Go runtime's and the process's.
func newMetrics() (*metrics.Metrics, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(buildInfo(buildinfo.Read())); err != nil {
		return nil, nil, err
	}
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		return nil, nil, err
	}
	return m, reg, nil
}

// buildInfo is floodgate_build_info: 1, labelled with the build's version,
// commit and Go version, so that a query can tell which build each
// instance runs.
func buildInfo(in buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_build_info",
		Help:        "1, labelled with the build of Floodgate that runs: its module version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": in.Version, "commit": in.Commit, "go_version": in.GoVersion}})
	g.Set(1)
	return g
}

// metricsHandler serves reg's series. A collector that fails (a series
// collected twice, a value that cannot be written) costs only what it
// failed to give: the rest is served with 200, and the error is logged and
// counted in promhttp_metric_handler_errors_total{cause="gathering"}, so
// that one broken collector never takes Floodgate's series away.
func metricsHandler(reg *prometheus.Registry, log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError,
		ErrorLog: scrapeErrorLog{log}, Registry: reg})
}

// scrapeErrorLog writes the errors of a scrape to a logger.
type scrapeErrorLog struct{ log *slog.Logger }

// Println logs one error of a scrape.
func (l scrapeErrorLog) Println(v ...any) {
	l.log.Error("metrics: scrape incomplete", "err", fmt.Sprint(v...))
}

// gauge and counter are series read when /metrics is scraped.
func gauge(name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
}

func counter(name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
}

// shedHelp is the help of floodgate_connections_shed_total.
const shedHelp = "Client connections answered 503 (on a TLS listener, a TLS alert; on the rate-limit service's gRPC listener, none) " +
	"and closed because the listener's bound of connections open at once was reached: server.max_connections for listener=\"gateway\", " +
	"a quarter of the open-file limit for listener=\"api\" (the check API), half of it for listener=\"rls_grpc\" " +
	"(Envoy's calls; a quarter in floodgate serve), a sixteenth (at least 64) for listener=\"rls_http\" (/json and /healthcheck)."

// shedCounter is floodgate_connections_shed_total of one listener: the
// connections that the listener ln returns (nil before it opens, or when
// it is off) has shed.
func shedCounter(listener string, ln func() *connLimit) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_connections_shed_total", Help: shedHelp,
		ConstLabels: prometheus.Labels{"listener": listener}},
		func() float64 {
			l := ln()
			if l == nil {
				return 0
			}
			return float64(l.shed.Load())
		})
}

// h2CutHelp is the help of floodgate_http2_connections_cut_total.
const h2CutHelp = "HTTP/2 connections sent a GOAWAY with ENHANCE_YOUR_CALM and closed because their client spent its budget " +
	"of frames that are not requests (PING, SETTINGS, WINDOW_UPDATE... or streams the server refused), by front " +
	"(serve: the gateway listener; rls: the rate-limit service's gRPC listener) and by the kind of frame that spent most of it."

// h2CutCounters are floodgate_http2_connections_cut_total of one front,
// one series for each kind of frame, read from count.
func h2CutCounters(front string, count func(h2guard.Kind) int64) []prometheus.Collector {
	cs := make([]prometheus.Collector, 0, h2guard.NumKinds)
	for k := range h2guard.NumKinds {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_http2_connections_cut_total", Help: h2CutHelp,
			ConstLabels: prometheus.Labels{"front": front, "frame": k.String()}},
			func() float64 { return float64(count(k)) }))
	}
	return cs
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// stateMetrics are the series of the engine's and the stores' state,
// read when /metrics is scraped.
func stateMetrics(eng *limiter.Limiter, main, local limiter.Store) []prometheus.Collector {
	cs := []prometheus.Collector{
		gauge("floodgate_breaker_open", "1 while a circuit breaker of the store is open (the store's, or one Redis Cluster node's) and the limits it refuses follow their on_failure.",
			func() float64 { return b2f(eng.Stats().BreakerOpen) }),
		counter("floodgate_breaker_opens_total", "Times a circuit breaker of the store (the store's, or one Redis Cluster node's) opened.",
			func() float64 { return float64(eng.Stats().BreakerOpens) }),
		counter("floodgate_store_failures_total", "Store calls that failed or missed their deadline.",
			func() float64 { return float64(eng.Stats().StoreFailures) }),
		counter("floodgate_store_queue_timeouts_total", "Store calls whose deadline passed while they waited in this process (not held against the store); any at all mean the deadline is too short for the load.",
			func() float64 { return float64(eng.Stats().QueueTimeouts) }),
		counter("floodgate_store_slot_waits_total", "Store calls that waited for one of the engine's in-flight slots.",
			func() float64 { return float64(eng.Stats().SlotWaits) }),
		counter("floodgate_store_late_deadlines_total", "Deadlines noticed well after they passed because this process did not run.",
			func() float64 { return float64(eng.Stats().LateDeadlines) }),
		gauge("floodgate_store_calls_in_flight", "Store calls in flight now.",
			func() float64 { return float64(eng.Stats().InFlight) }),
		counter("floodgate_deny_cache_hits_total", "Requests answered by the deny cache without a store call.",
			func() float64 { return float64(eng.Stats().DenyCacheHits) }),
		gauge("floodgate_deny_cache_entries", "Keys the deny cache holds.",
			func() float64 { return float64(eng.Stats().DenyCacheEntries) }),
		counter("floodgate_deny_cache_evictions_total", "Deny cache entries dropped to make room before they expired.",
			func() float64 { return float64(eng.Stats().DenyCacheEvictions) }),
		counter("floodgate_lease_takes_total", "Hits of leased limits decided from a lease, without a store call.",
			func() float64 { return float64(eng.Stats().LeaseTakes) }),
		counter("floodgate_lease_grants_total", "Store calls that took leases for leased limits.",
			func() float64 { return float64(eng.Stats().LeaseGrants) }),
		gauge("floodgate_leased_keys", "Keys of leased limits holding a lease now.",
			func() float64 { return float64(eng.Stats().LeasedKeys) }),
		counter("floodgate_leases_dropped_total", "Leases dropped to keep within the bound on leased keys; their units go back to the store.",
			func() float64 { return float64(eng.Stats().LeasesDropped) }),
		gauge("floodgate_dropped_leases_waiting", "Give-backs of leased units waiting to go to the store or for its answer: those of dropped leases, and of refused requests whose lease was renewed meanwhile.",
			func() float64 { return float64(eng.Stats().DroppedLeasesWaiting) }),
		counter("floodgate_lease_units_not_returned_total", "Leased units not known to have gone back to the store (their give-back failed, or too many waited).",
			func() float64 { return float64(eng.Stats().LeaseUnitsNotReturned) }),
	}
	if rs, ok := main.(*redisstore.Store); ok {
		cs = append(cs,
			gauge("floodgate_store_evictable", "1 when a Redis server may evict the limiter's keys (maxmemory with a maxmemory-policy other than noeviction).",
				func() float64 { return b2f(rs.Eviction().Evictable) }),
			counter("floodgate_store_script_calls_total", "Script calls made to Redis (a call decides a batch of requests).",
				func() float64 { c, _ := rs.Calls(); return float64(c) }),
			counter("floodgate_store_requests_total", "Requests Redis decided.",
				func() float64 { _, r := rs.Calls(); return float64(r) }))
	}
	for _, st := range []struct {
		which string
		store limiter.Store
	}{{"main", main}, {"local", local}} {
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
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_store_denying_evictions_total", ConstLabels: l,
				Help: "Keys the embedded store evicted while they were denying, each a client held back that starts over."},
				func() float64 { return float64(ms.Stats().DenyingEvictions) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_store_reservation_evictions_total", ConstLabels: l,
				Help: "Reservations the embedded store dropped to keep within its table of reservations in flight; each settles at its estimate."},
				func() float64 { return float64(ms.Stats().ReservationEvictions) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_store_reservations_expired_total", ConstLabels: l,
				Help: "Reservations the embedded store settled at their estimates because no settle came within their TTL."},
				func() float64 { return float64(ms.Stats().ReservationsExpired) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_state_file_errors_total", ConstLabels: l,
				Help: "Snapshots of the state file that failed."}, func() float64 { return float64(ms.Stats().SnapshotErrors) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_state_file_failing", ConstLabels: l,
				Help: "1 while the latest snapshot of the state file failed."},
				func() float64 { return b2f(ms.Stats().LastSnapshotError != nil) }),
		)
	}
	return cs
}

// register registers every collector of cs.
func register(reg prometheus.Registerer, cs []prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// serveMetrics are floodgate serve's series of the policy and the
// gateway's connections, read when /metrics is scraped.
func (s *server) serveMetrics() []prometheus.Collector {
	return append([]prometheus.Collector{
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
		gauge("floodgate_connections_parked", "Client connections kept alive and idle long enough to be parked (edge engine): they hold no buffers and, on Linux, no goroutine.",
			func() float64 {
				if s.edge == nil {
					return 0
				}
				return float64(s.edge.Parked())
			}),
		shedCounter("gateway", func() *connLimit { return s.conns }),
		shedCounter("api", s.apiConns.Load),
		newTargetHealth(s),
	}, h2CutCounters("serve", s.h2cuts.Count)...)
}
