package app

import (
	"time"

	"github.com/floodgate/floodgate/rls"
	"github.com/floodgate/floodgate/store"
)

// Settings are what a process that decides needs to start: its store,
// its engine's settings, and Envoy's rate-limit service when it serves
// one. The policy file's server section is one source of them (Serve),
// envoyproxy/ratelimit's environment variables another (EnvoySettings).
type Settings struct {
	Store  Store
	Engine Engine
	// RLS is Envoy's rate-limit service, nil when the process serves
	// none.
	RLS *RLS
}

// Store names the store of the counters.
type Store struct {
	// URL names the store (package store): "memory", "redis://..." ...
	URL     string
	Options store.Options
	// PerSecond, when set, keeps the hits of per-second limits in a store
	// of their own (envoyproxy/ratelimit's REDIS_PERSECOND).
	PerSecond *Store
}

// Engine holds the engine's settings (limiter.Options); zero values are
// the engine's defaults.
type Engine struct {
	Timeout, HardTimeout time.Duration
	MaxKeyBytes          int
	Instances            int
}

// Statsd is where and how often the rate-limit service's statistics are
// sent to statsd (envoyproxy/ratelimit's USE_STATSD, STATSD_HOST,
// STATSD_PORT, STATSD_PROTOCOL and STATS_FLUSH_INTERVAL).
type Statsd struct {
	// Network is "tcp" or "udp"; Addr is host:port.
	Network, Addr string
	// Interval is the time between two flushes of the counters.
	Interval time.Duration
}

// RLS is Envoy's rate-limit service (RLS v3 gRPC) and, for floodgate rls,
// the HTTP listeners envoyproxy/ratelimit has beside it.
type RLS struct {
	// Network is "tcp" (default) or "unix"; Addr the address or socket.
	Network, Addr string
	// TLS serves gRPC over TLS when it names a certificate.
	TLS TLS
	// Paths are the descriptor files or directories (none: the service
	// starts without a configuration and answers every domain as unknown).
	Paths []string
	// PathsMustExist stops the start when one of Paths does not exist
	// (RUNTIME_WATCH_ROOT=false, as envoyproxy/ratelimit, which watches the
	// directory itself then); otherwise the service starts and waits for it.
	PathsMustExist bool
	Load           rls.LoadOptions
	// ForceStart starts without a configuration when the files do not
	// load (FORCE_START_WITHOUT_INITIAL_CONFIG).
	ForceStart bool
	// PeerKeys, when set and the store is Redis, keeps the counters of
	// domains in compatibility mode under envoyproxy/ratelimit's keys, with
	// its expiry (rls.PeerCounter).
	PeerKeys *rls.PeerKeyOptions
	// WaitForConfig starts when the files do not load, as
	// envoyproxy/ratelimit does, answering every request with an error
	// (rls.ErrNoConfig) until a version that loads arrives.
	WaitForConfig bool
	Service       rls.Options
	// Stats are envoyproxy/ratelimit's statistics, nil for none.
	Stats *rls.StatsOptions
	// Statsd, when set, also sends the statistics to a statsd server.
	Statsd                                  *Statsd
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// HealthyWithConfig reports unhealthy until a configuration with a
	// domain is loaded.
	HealthyWithConfig bool
	// HTTPAddr serves /json and /healthcheck, DebugAddr /rlconfig,
	// /metrics and /debug/pprof/, PromAddr the metrics on PromPath ("" for
	// none of each).
	HTTPAddr, DebugAddr, PromAddr, PromPath string
	// DebugHosts are the names, besides IP addresses and localhost, by
	// which the debug port and the Prometheus address may be reached
	// (hostcheck); a request naming another host is answered 421.
	DebugHosts []string
	// HeapReserveMiB is the heap reserve that RunRLS holds, in MiB (0:
	// none; see holdHeapReserve).
	HeapReserveMiB int
	// ReusePort opens the TCP listeners with SO_REUSEPORT, as
	// envoyproxy/ratelimit does: a new process can listen on the ports of
	// one still running and take over as it drains (a hot restart, or the
	// switch from envoyproxy/ratelimit on one host). Only for a store the
	// processes share: on the embedded store each would count apart.
	ReusePort bool
}
