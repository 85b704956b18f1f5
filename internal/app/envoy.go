package app

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/hostcheck"
	"github.com/floodgate/floodgate/internal/tlsfile"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/rls"
	"github.com/floodgate/floodgate/store"
)

// rlsEnv is what "floodgate rls" takes from envoyproxy/ratelimit's
// environment variables, with the same defaults.
type rlsEnv struct {
	httpAddr, debugAddr, grpcAddr string
	grpcUDS                       string
	maxConnAge, maxConnAgeGrace   time.Duration
	grpcTLS                       bool
	tlsCert, tlsKey               string
	clientCA, clientSAN           string

	logLevel slog.Level
	logJSON  bool

	forceStart bool
	// configDir is the directory of the descriptor files ("" when
	// RUNTIME_SUBDIRECTORY is empty: no configuration, as there).
	configDir string
	// dirMustExist stops the start when configDir does not exist
	// (RUNTIME_WATCH_ROOT=false); without it (RUNTIME_WATCH_ROOT=true)
	// the files are those envoyproxy/ratelimit reads then, of
	// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY (rls.LoadOptions.App).
	dirMustExist bool
	load         rls.LoadOptions

	backend      string // redis or memory
	storeTimeout time.Duration
	// heapReserveMiB is FLOODGATE_HEAP_RESERVE_MIB.
	heapReserveMiB int
	redis          redisEnv
	perSecond      *redisEnv // REDIS_PERSECOND: a second Redis for per-second limits
	prefix         string
	jitter         int64 // EXPIRATION_JITTER_MAX_SECONDS

	service           rls.Options
	nearRatio         float64
	healthyWithConfig bool

	usePrometheus      bool
	promAddr, promPath string
	debugHosts         []string
	promMillis         bool
	extraTags          map[string]string
	disableStats       bool
	statsd             *Statsd
}

// redisEnv is one Redis deployment's settings.
type redisEnv struct {
	socket, url, typ   string
	auth, sentinelAuth string
	tls                bool
	cert, key, ca      string
	skipVerify         bool
	timeout            time.Duration
	window             time.Duration

	// fromURLs says that url's addresses were given as redis:// URLs
	// (peerURLs), which are reached over TCP whatever socket says; db
	// is the database number one of them selects ("" for none), and
	// urlUser and urlPass the credentials they hold, for the servers or,
	// behind sentinels, for the sentinels.
	fromURLs         bool
	db               string
	urlUser, urlPass string
}

// EnvoyNote is a variable that floodgate rls does not honour: unsupported
// (a warning) or without effect here (for information).
type EnvoyNote struct {
	Name, Msg   string
	Unsupported bool
}

// envReader reads typed variables, collecting the first bad value.
type envReader struct {
	lookup func(string) (string, bool)
	err    error
	seen   map[string]bool
}

func (r *envReader) get(name string) (string, bool) {
	r.seen[name] = true
	v, ok := r.lookup(name)
	return v, ok && v != ""
}

func (r *envReader) str(name, def string) string {
	if v, ok := r.get(name); ok {
		return v
	}
	return def
}

// hosts reads a comma-separated list of host names (hostcheck.ValidName):
// no ports, no schemes.
func (r *envReader) hosts(name string) []string {
	v, ok := r.get(name)
	if !ok {
		return nil
	}
	var out []string
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if !hostcheck.ValidName(h) && r.err == nil {
			r.err = fmt.Errorf("rls: %s=%q: %q is not a host name (no port, no scheme; IP addresses and localhost are always taken)", name, v, h)
		}
		out = append(out, h)
	}
	return out
}

func (r *envReader) bool(name string, def bool) bool {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("rls: %s=%q: want true or false", name, v)
	}
	return b
}

func (r *envReader) int(name string, def int) int {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("rls: %s=%q: want a whole number", name, v)
	}
	return n
}

func (r *envReader) dur(name string, def time.Duration) time.Duration {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("rls: %s=%q: want a duration such as 10s", name, v)
	}
	return d
}

// positiveDur reads a duration that, when set, must be positive: 0 or a
// negative value is refused, saying why the bound it sets must stay,
// rather than replaced by a default without a word.
func (r *envReader) positiveDur(name string, def time.Duration, example, why string) time.Duration {
	v, set := r.get(name)
	d := r.dur(name, def)
	if set && d <= 0 && r.err == nil {
		r.err = fmt.Errorf("rls: %s=%q: want a positive duration such as %s: %s", name, v, example, why)
	}
	return d
}

func (r *envReader) float(name string, def float64) float64 {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("rls: %s=%q: want a number", name, v)
	}
	return f
}

// tags parses "k1:v1,k2:v2".
func (r *envReader) tags(name string) map[string]string {
	v, ok := r.get(name)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, found := strings.Cut(kv, ":")
		if !found || k == "" {
			if r.err == nil {
				r.err = fmt.Errorf("rls: %s=%q: want key:value pairs separated by commas", name, v)
			}
			continue
		}
		out[k] = val
	}
	return out
}

// noEffect lists envoyproxy/ratelimit's variables that change nothing
// here, and why.
var noEffect = map[string]string{
	"LOCAL_CACHE_SIZE_IN_BYTES":                    "answers are the same without envoyproxy/ratelimit's over-limit cache",
	"REDIS_POOL_SIZE":                              "requests share pipelined connections",
	"REDIS_PERSECOND_POOL_SIZE":                    "requests share pipelined connections",
	"REDIS_PIPELINE_LIMIT":                         "deprecated: without effect in envoyproxy/ratelimit too",
	"REDIS_PERSECOND_PIPELINE_LIMIT":               "deprecated: without effect in envoyproxy/ratelimit too",
	"REDIS_CLUSTER_PIPELINE_PARALLELISM":           "commands to every cluster node are pipelined",
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": "commands to every cluster node are pipelined",
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":                 "requests share pipelined connections",
	"REDIS_POOL_ON_EMPTY_WAIT_DURATION":            "requests share pipelined connections",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR":       "requests share pipelined connections",
	"REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION":  "requests share pipelined connections",
	"REDIS_STARTUP_INITIAL_INTERVAL":               "the store connects in the background and reconnects by itself",
	"REDIS_STARTUP_MAX_INTERVAL":                   "the store connects in the background and reconnects by itself",
	"REDIS_STARTUP_MAX_ELAPSED_TIME":               "the store connects in the background and reconnects by itself",
}

// unsupported lists envoyproxy/ratelimit's variables (or prefixes, ending
// in _) that Floodgate does not implement, and what to do instead.
var unsupported = map[string]string{
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "not emulated; Floodgate's default mode never counts a request over the limit",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION":    "the health check does not follow the Redis connection",
	"USE_DOG_STATSD":                          "no DogStatsD; the statistics are served for Prometheus",
	"USE_DOG_STATSD_MOGRIFIERS":               "no DogStatsD; the statistics are served for Prometheus",
	"DOG_STATSD_MOGRIFIER":                    "no DogStatsD; the statistics are served for Prometheus",
	"PROMETHEUS_MAPPER_YAML":                  "the statistics follow envoyproxy/ratelimit's default mapping only",
	"MEMCACHE_":                               "no Memcache backend",
	"CONFIG_GRPC_XDS_":                        "no xDS configuration; descriptor files only",
	"XDS_CLIENT_":                             "no xDS configuration; descriptor files only",
	"TRACING_":                                "not read; spans are exported as the standard OTEL_* variables say (OTEL_EXPORTER_OTLP_ENDPOINT ...)",
}

// DefaultHeapReserveMiB is the default of FLOODGATE_HEAP_RESERVE_MIB.
const DefaultHeapReserveMiB = 32

// readRLSEnv reads the settings through lookup (os.LookupEnv). notes lists
// the variables set that are not honoured; err is a setting that cannot
// work.
func readRLSEnv(lookup func(string) (string, bool), environ []string) (*rlsEnv, []EnvoyNote, error) {
	r := &envReader{lookup: lookup, seen: map[string]bool{}}
	e := &rlsEnv{}
	e.httpAddr = net.JoinHostPort(r.str("HOST", "0.0.0.0"), strconv.Itoa(r.int("PORT", 8080)))
	e.debugAddr = net.JoinHostPort(r.str("DEBUG_HOST", "0.0.0.0"), strconv.Itoa(r.int("DEBUG_PORT", 6070)))
	e.grpcAddr = net.JoinHostPort(r.str("GRPC_HOST", "0.0.0.0"), strconv.Itoa(r.int("GRPC_PORT", 8081)))
	e.grpcUDS = r.str("GRPC_UDS", "")
	e.maxConnAge = r.dur("GRPC_MAX_CONNECTION_AGE", 24*time.Hour)
	e.maxConnAgeGrace = r.positiveDur("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour, "1h",
		"it bounds how long the calls in flight keep a connection open past its age (gRPC reads 0 as no bound)")
	// gRPC adds a jitter of ±10% to the age, drawn at each connection: a
	// negative age, or one under 10ns, would end the process there.
	if (e.maxConnAge < 0 || e.maxConnAge > 0 && e.maxConnAge < rls.MinConnectionAge) && r.err == nil {
		r.err = fmt.Errorf("rls: GRPC_MAX_CONNECTION_AGE=%v: want 0 (none) or at least %v", e.maxConnAge, rls.MinConnectionAge)
	}
	e.grpcTLS = r.bool("GRPC_SERVER_USE_TLS", false)
	e.tlsCert, e.tlsKey = r.str("GRPC_SERVER_TLS_CERT", ""), r.str("GRPC_SERVER_TLS_KEY", "")
	e.clientCA, e.clientSAN = r.str("GRPC_CLIENT_TLS_CACERT", ""), r.str("GRPC_CLIENT_TLS_SAN", "")

	level := strings.ToLower(r.str("LOG_LEVEL", "warn"))
	switch level {
	case "trace", "debug":
		e.logLevel = slog.LevelDebug
	case "info":
		e.logLevel = slog.LevelInfo
	case "warn", "warning":
		e.logLevel = slog.LevelWarn
	case "error", "fatal", "panic":
		e.logLevel = slog.LevelError
	default:
		r.err = fmt.Errorf("rls: LOG_LEVEL=%q: want debug, info, warn or error", level)
	}
	e.logJSON = strings.EqualFold(r.str("LOG_FORMAT", "text"), "json")

	if ct := r.str("CONFIG_TYPE", "FILE"); !strings.EqualFold(ct, "FILE") && r.err == nil {
		r.err = fmt.Errorf("rls: CONFIG_TYPE=%q: only FILE is supported (descriptor files)", ct)
	}
	e.forceStart = r.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	root := r.str("RUNTIME_ROOT", "/srv/runtime_data/current")
	sub := r.str("RUNTIME_SUBDIRECTORY", "")
	app := r.str("RUNTIME_APPDIRECTORY", "config")
	// Both kinds of update RUNTIME_WATCH_ROOT chooses between are followed
	// either way (package internal/watch). What it changes is the start:
	// envoyproxy/ratelimit watching the directory itself ends at once when
	// it does not exist, where watching the root it waits for it.
	e.dirMustExist = !r.bool("RUNTIME_WATCH_ROOT", true)
	if sub != "" && app != "" {
		e.configDir = filepath.Join(root, sub, app)
	}
	e.load = rls.LoadOptions{AllFiles: true, Recursive: true, DotFiles: !r.bool("RUNTIME_IGNOREDOTFILES", false),
		MergeDomains: r.bool("MERGE_DOMAIN_CONFIG", false), Compat: r.bool("FLOODGATE_COMPAT", false),
		MaxFiles: r.int("FLOODGATE_MAX_DESCRIPTOR_FILES", rls.DefaultMaxFiles),
		MaxBytes: int64(r.int("FLOODGATE_MAX_DESCRIPTOR_BYTES", rls.DefaultMaxBytes))}
	if (e.load.MaxFiles < 1 || e.load.MaxBytes < 1) && r.err == nil {
		r.err = fmt.Errorf("rls: FLOODGATE_MAX_DESCRIPTOR_FILES=%d, FLOODGATE_MAX_DESCRIPTOR_BYTES=%d: want at least 1",
			e.load.MaxFiles, e.load.MaxBytes)
	}

	e.backend = strings.ToLower(r.str("BACKEND_TYPE", "redis"))
	switch e.backend {
	case "redis", "memory":
	case "memcache":
		if r.err == nil {
			r.err = fmt.Errorf("rls: BACKEND_TYPE=memcache: no Memcache backend; use redis (or memory for one instance)")
		}
	default:
		if r.err == nil {
			r.err = fmt.Errorf("rls: BACKEND_TYPE=%q: want redis or memory", e.backend)
		}
	}
	tls := redisEnv{cert: r.str("REDIS_TLS_CLIENT_CERT", ""), key: r.str("REDIS_TLS_CLIENT_KEY", ""),
		ca: r.str("REDIS_TLS_CACERT", ""), skipVerify: r.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)}
	readRedis := func(prefix, defURL, sentinelAuth string) redisEnv {
		re := tls
		re.socket = strings.ToLower(r.str(prefix+"SOCKET_TYPE", "unix"))
		re.typ = strings.ToLower(r.str(prefix+"TYPE", "single"))
		re.url = r.str(prefix+"URL", defURL)
		re.auth = r.str(prefix+"AUTH", "")
		re.sentinelAuth = r.str(sentinelAuth, "")
		re.tls = r.bool(prefix+"TLS", false)
		re.timeout = r.positiveDur(prefix+"TIMEOUT", 10*time.Second, "10s",
			"it bounds connecting to Redis and each write to it, and Floodgate keeps a bound on every call to Redis (envoyproxy/ratelimit reads 0 as no timeout)")
		re.window = r.dur(prefix+"PIPELINE_WINDOW", 0)
		// As envoyproxy/ratelimit dials it: tcp4 and tcp6 over that family
		// of addresses only, for a single instance (a cluster's and the
		// sentinels' are dialled over either).
		if re.socket != "tcp" && re.socket != "tcp4" && re.socket != "tcp6" && re.socket != "unix" && r.err == nil {
			r.err = fmt.Errorf("rls: %sSOCKET_TYPE=%q: want tcp, tcp4, tcp6 or unix", prefix, re.socket)
		}
		if re.typ != "single" && re.typ != "sentinel" && re.typ != "cluster" && r.err == nil {
			r.err = fmt.Errorf("rls: %sTYPE=%q: want single, sentinel or cluster", prefix, re.typ)
		}
		if err := re.peerURLs(prefix); err != nil && r.err == nil {
			r.err = err
		}
		if re.tls && r.err == nil {
			r.err = tlsContradiction(prefix, &re)
		}
		return re
	}
	e.redis = readRedis("REDIS_", "/var/run/nutcracker/ratelimit.sock", "REDIS_SENTINEL_AUTH")
	if r.bool("REDIS_PERSECOND", false) {
		ps := readRedis("REDIS_PERSECOND_", "/var/run/nutcracker/ratelimitpersecond.sock", "REDIS_PERSECOND_SENTINEL_AUTH")
		e.perSecond = &ps
	}
	e.prefix = r.str("CACHE_KEY_PREFIX", "")
	e.jitter = int64(r.int("EXPIRATION_JITTER_MAX_SECONDS", 300))
	e.storeTimeout = r.positiveDur("FLOODGATE_STORE_TIMEOUT", 0, limiter.DefaultTimeout.String(),
		"it is the deadline of each store call, past which on_failure decides (as server.store_timeout, which must be positive too)")
	e.heapReserveMiB = r.int("FLOODGATE_HEAP_RESERVE_MIB", DefaultHeapReserveMiB)
	if (e.heapReserveMiB < 0 || e.heapReserveMiB > 4096) && r.err == nil {
		r.err = fmt.Errorf("rls: FLOODGATE_HEAP_RESERVE_MIB=%d: want 0 (none) to 4096", e.heapReserveMiB)
	}

	e.nearRatio = r.float("NEAR_LIMIT_RATIO", 0.8)
	if !(e.nearRatio > 0 && e.nearRatio <= 1) { // NaN too
		if r.err == nil {
			r.err = fmt.Errorf("rls: NEAR_LIMIT_RATIO=%v: want a number in (0, 1]", e.nearRatio)
		}
	}
	e.healthyWithConfig = r.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)
	e.service = rls.Options{
		ShadowMode:      r.bool("SHADOW_MODE", false),
		QuotaMode:       r.bool("QUOTA_MODE", false),
		DynamicMetadata: r.bool("RESPONSE_DYNAMIC_METADATA", false),
		NoFields:        !r.bool("FLOODGATE_RATELIMIT_HEADERS", false),
	}
	if r.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		e.service.PeerHeaders = &rls.PeerHeaders{
			Limit:     r.str("LIMIT_LIMIT_HEADER", rls.DefaultPeerHeaders.Limit),
			Remaining: r.str("LIMIT_REMAINING_HEADER", rls.DefaultPeerHeaders.Remaining),
			Reset:     r.str("LIMIT_RESET_HEADER", rls.DefaultPeerHeaders.Reset),
		}
	}
	e.usePrometheus = r.bool("USE_PROMETHEUS", false)
	e.promAddr = r.str("PROMETHEUS_ADDR", ":9090")
	e.promPath = r.str("PROMETHEUS_PATH", "/metrics")
	e.debugHosts = r.hosts("FLOODGATE_DEBUG_HOSTS")
	e.promMillis = r.bool("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false)
	e.extraTags = r.tags("EXTRA_TAGS")
	e.disableStats = r.bool("DISABLE_STATS", false)
	sd := &Statsd{Network: strings.ToLower(r.str("STATSD_PROTOCOL", "tcp")),
		Addr:     net.JoinHostPort(r.str("STATSD_HOST", "localhost"), strconv.Itoa(r.int("STATSD_PORT", 8125))),
		Interval: r.positiveDur("STATS_FLUSH_INTERVAL", 10*time.Second, "10s", "it is the time between two flushes of the statistics")}
	// As there, one sink: statsd unless the statistics are off or go to
	// Prometheus (envoyproxy/ratelimit refuses to start with both).
	if r.bool("USE_STATSD", true) && !e.disableStats && !e.usePrometheus {
		e.statsd = sd
	}
	// Checked only for a sink that dials it: without statsd
	// envoyproxy/ratelimit never reads it and starts whatever it says.
	switch sd.Network {
	case "tcp", "udp", "tcp4", "tcp6", "udp4", "udp6": // as net.Dial takes them there
	default:
		if e.statsd != nil && r.err == nil {
			r.err = fmt.Errorf("rls: STATSD_PROTOCOL=%q: want tcp or udp (or tcp4, tcp6, udp4, udp6)", sd.Network)
		}
	}
	if r.err != nil {
		return nil, nil, r.err
	}
	return e, rlsNotes(r, e, environ), nil
}

// rlsNotes lists the variables of environ that are set but not honoured.
func rlsNotes(r *envReader, e *rlsEnv, environ []string) []EnvoyNote {
	var notes []EnvoyNote
	for _, kv := range environ {
		name, v, _ := strings.Cut(kv, "=")
		if v == "" || r.seen[name] {
			if msg, ok := noEffect[name]; ok && v != "" {
				notes = append(notes, EnvoyNote{Name: name, Msg: msg})
			}
			continue
		}
		if msg, ok := noEffect[name]; ok {
			notes = append(notes, EnvoyNote{Name: name, Msg: msg})
			continue
		}
		for p, msg := range unsupported {
			if name == p || (strings.HasSuffix(p, "_") && strings.HasPrefix(name, p)) || strings.HasPrefix(name, p+"_") {
				if b, err := strconv.ParseBool(v); err == nil && !b {
					break // switched off
				}
				notes = append(notes, EnvoyNote{Name: name, Msg: msg, Unsupported: true})
				break
			}
		}
	}
	sort.Slice(notes, func(i, j int) bool { return notes[i].Name < notes[j].Name })
	return notes
}

// Envoy is what floodgate rls reads from envoyproxy/ratelimit's
// environment: the settings, the log's level and format, and the
// variables set that it does not honour.
type Envoy struct {
	Settings *Settings
	LogLevel slog.Level
	LogJSON  bool
	Notes    []EnvoyNote
}

// ReadEnvoy reads envoyproxy/ratelimit's environment variables through
// lookup (os.LookupEnv); environ lists them all ("NAME=value", os.Environ)
// for the notes. An error is a setting that cannot work.
func ReadEnvoy(lookup func(string) (string, bool), environ []string) (*Envoy, error) {
	e, notes, err := readRLSEnv(lookup, environ)
	if err != nil {
		return nil, err
	}
	set, err := e.settings()
	if err != nil {
		return nil, err
	}
	return &Envoy{Settings: set, LogLevel: e.logLevel, LogJSON: e.logJSON, Notes: notes}, nil
}

// settings are the process settings e describes.
func (e *rlsEnv) settings() (*Settings, error) {
	set := &Settings{Engine: Engine{Timeout: e.storeTimeout}}
	r := &RLS{Addr: e.grpcAddr, Load: e.load, ForceStart: e.forceStart, WaitForConfig: true, Service: e.service,
		MaxConnectionAge: e.maxConnAge, MaxConnectionAgeGrace: e.maxConnAgeGrace, HealthyWithConfig: e.healthyWithConfig,
		HTTPAddr: e.httpAddr, DebugAddr: e.debugAddr, DebugHosts: e.debugHosts, HeapReserveMiB: e.heapReserveMiB}
	if e.grpcUDS != "" {
		r.Network, r.Addr = "unix", e.grpcUDS
	}
	if e.grpcTLS {
		r.TLS = TLS{Cert: e.tlsCert, Key: e.tlsKey, ClientCA: e.clientCA, ClientSAN: e.clientSAN,
			Source: "GRPC_SERVER_TLS_CERT/KEY, GRPC_CLIENT_TLS_*", CASource: "GRPC_CLIENT_TLS_CACERT"}
	}
	if e.configDir != "" {
		r.Paths = []string{e.configDir}
		r.PathsMustExist = e.dirMustExist
		if !e.dirMustExist {
			// Watching the root, envoyproxy/ratelimit reads the files of
			// ROOT/SUBDIRECTORY named APPDIRECTORY.*: those of the
			// directory APPDIRECTORY, and config.yaml or config.d/ beside it.
			r.Paths = []string{filepath.Dir(e.configDir)}
			r.Load.App = filepath.Base(e.configDir)
		}
	}
	if !e.disableStats {
		r.Stats = &rls.StatsOptions{NearLimitRatio: e.nearRatio, ConstLabels: e.extraTags, ResponseTimeMilliseconds: e.promMillis,
			PeerNames: e.load.Compat && len(statsdTagsOf(e.extraTags)) > 0}
		r.Statsd = e.statsd
	}
	if e.usePrometheus {
		r.PromAddr, r.PromPath = e.promAddr, e.promPath
	}
	set.RLS = r
	if e.backend == "memory" {
		// Bounded as serve's embedded store is by default: counters of
		// distinct descriptor values past the cap evict the oldest.
		set.Store = Store{URL: "memory", Options: store.Options{MaxBytes: config.DefaultMemoryMaxBytes}}
		return set, nil
	}
	r.PeerKeys = &rls.PeerKeyOptions{Prefix: e.prefix, Jitter: e.jitter}
	// On Redis, two processes on the same ports count on the same
	// counters: the ports may be shared, as envoyproxy/ratelimit shares
	// them, for a process started before the one it replaces has stopped.
	r.ReusePort = true
	var err error
	if set.Store, err = redisStore(&e.redis, e.prefix); err != nil {
		return nil, err
	}
	if e.perSecond != nil {
		ps, err := redisStore(e.perSecond, e.prefix)
		if err != nil {
			return nil, fmt.Errorf("rls: REDIS_PERSECOND: %w", err)
		}
		set.Store.PerSecond = &ps
	}
	return set, nil
}

// redisStore is one Redis deployment as envoyproxy/ratelimit's settings
// describe it.
func redisStore(re *redisEnv, prefix string) (Store, error) {
	var tc *tls.Config
	if re.tls {
		var err error
		if tc, err = redisTLS(re); err != nil {
			return Store{}, err
		}
	}
	user, pass := authOf(re.auth)
	o := store.Options{Prefix: prefix, DialTimeout: re.timeout, WriteTimeout: re.timeout, TLS: tc, MaxFlushDelay: re.window}
	if re.typ == "single" && (re.socket == "tcp4" || re.socket == "tcp6") {
		o.Network = re.socket
	}
	o.SentinelUsername, o.SentinelPassword = authOf(re.sentinelAuth)
	// As envoyproxy/ratelimit's Redis client: the user name and the
	// password of the URLs stand in for those the variable leaves out,
	// each on its own; behind sentinels the URLs are the sentinels'.
	if re.typ == "sentinel" {
		o.SentinelUsername = cmp.Or(o.SentinelUsername, re.urlUser)
		o.SentinelPassword = cmp.Or(o.SentinelPassword, re.urlPass)
	} else {
		user, pass = cmp.Or(user, re.urlUser), cmp.Or(pass, re.urlPass)
	}
	u, err := redisURL(re, user, pass)
	if err != nil {
		return Store{}, err
	}
	return Store{URL: u, Options: o}, nil
}

// authOf splits REDIS_AUTH's "user:password" (or "password" alone), as
// envoyproxy/ratelimit does.
func authOf(auth string) (user, pass string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// peerURLs reads the addresses of REDIS_URL given as redis:// URLs as
// envoyproxy/ratelimit's Redis client reads them, in place of host:port:
// each becomes its host and port, reached over TCP; the user name and
// password of its user information (or of its username and password
// parameters) stand in for those REDIS_AUTH leaves out (behind sentinels,
// REDIS_SENTINEL_AUTH), and a single instance's database number (its
// path, or its db parameter) is selected. REDIS_TLS applies to them as to
// any address. Floodgate's own URLs (rediss://, redis+cluster:// ...) are
// left whole, as redisURL takes them; a sentinel's master name is not an
// address. The URL is not repeated in an error: it may hold a password.
func (re *redisEnv) peerURLs(prefix string) error {
	addrs := strings.Split(re.url, ",")
	first := 0
	if re.typ == "sentinel" {
		first = 1 // the master's name
	}
	for _, a := range addrs {
		if strings.Contains(a, "://") && !strings.HasPrefix(a, "redis://") {
			return nil // a URL of Floodgate's own, or another: taken whole
		}
	}
	for i := first; i < len(addrs); i++ {
		a := addrs[i]
		if !strings.HasPrefix(a, "redis://") {
			continue
		}
		u, err := url.Parse(a)
		if err != nil || u.Host == "" {
			return fmt.Errorf("rls: %sURL: address %d is not a redis:// URL that can be read (want redis://[user:password@]host:port[/db])", prefix, i+1)
		}
		q := u.Query()
		user, pass := q.Get("username"), q.Get("password")
		if n := u.User.Username(); n != "" {
			user = n
		}
		if p, ok := u.User.Password(); ok {
			pass = p
		}
		if re.urlUser == "" && re.urlPass == "" {
			re.urlUser, re.urlPass = user, pass
		}
		db := q.Get("db")
		if u.Path != "" && u.Path != "/" {
			db = u.Path[1:]
		}
		if db != "" && re.typ == "single" {
			if n, err := strconv.Atoi(db); err != nil || n < 0 {
				return fmt.Errorf("rls: %sURL: database %q is not a number", prefix, db)
			}
			re.db = db
		}
		addrs[i] = u.Host
		re.fromURLs = true
	}
	if re.fromURLs {
		re.url = strings.Join(addrs, ",")
	}
	return nil
}

// tlsContradiction says why a Redis deployment asked for TLS cannot have
// it, or nil: a URL of Floodgate's own given whole with a plain scheme, or
// a single instance on a Unix socket (Redis serves TLS over TCP only). The
// URL itself is not repeated: it may hold a password.
func tlsContradiction(prefix string, re *redisEnv) error {
	if re.fromURLs {
		return nil // redis:// URLs as envoyproxy/ratelimit reads them: TCP, with REDIS_TLS's TLS
	}
	if scheme, _, ok := strings.Cut(re.url, "://"); ok {
		if !strings.HasPrefix(strings.ToLower(scheme), "rediss") {
			return fmt.Errorf("rls: %sTLS=true, but %sURL is a %s:// URL, which speaks without TLS: give its rediss form", prefix, prefix, scheme)
		}
		return nil
	}
	if re.socket == "unix" && re.typ == "single" {
		return fmt.Errorf("rls: %sTLS=true with %sSOCKET_TYPE=unix (the default): Redis serves TLS over TCP only; set %sSOCKET_TYPE=tcp", prefix, prefix, prefix)
	}
	return nil
}

// redisURL turns REDIS_URL and REDIS_TYPE into a store URL: host:port for
// a single instance (or a URL of Floodgate's own, kept as given),
// "master,h1:p1,..." for sentinels, "h1:p1,h2:p2,..." for a cluster; the
// addresses of redis:// URLs as peerURLs left them.
func redisURL(re *redisEnv, user, pass string) (string, error) {
	if strings.Contains(re.url, "://") {
		return re.url, nil
	}
	userinfo := ""
	if pass != "" {
		userinfo = url.PathEscape(user) + ":" + url.PathEscape(pass) + "@"
	}
	if re.socket == "unix" && re.typ == "single" && !re.fromURLs {
		path, err := filepath.Abs(re.url)
		if err != nil {
			return "", fmt.Errorf("rls: REDIS_URL=%q: %w", re.url, err)
		}
		return "redis+unix://" + userinfo + path, nil
	}
	scheme := "redis"
	if re.tls {
		scheme = "rediss"
	}
	hosts := strings.Split(re.url, ",")
	switch re.typ {
	case "sentinel":
		if len(hosts) < 2 {
			return "", fmt.Errorf("rls: REDIS_URL=%q: a sentinel URL is the master's name then the sentinels, separated by commas", re.url)
		}
		return scheme + "+sentinel://" + userinfo + strings.Join(hosts[1:], ",") + "/" + hosts[0], nil
	case "cluster":
		return scheme + "+cluster://" + userinfo + re.url, nil
	}
	if len(hosts) != 1 {
		return "", fmt.Errorf("rls: REDIS_URL=%q: a single instance has one address", re.url)
	}
	if re.db != "" {
		return scheme + "://" + userinfo + re.url + "/" + re.db, nil
	}
	return scheme + "://" + userinfo + re.url, nil
}

// redisTLS is the client TLS configuration of REDIS_TLS_*: the
// certificates of REDIS_TLS_CACERT are trusted beside the system's roots,
// as envoyproxy/ratelimit trusts them.
func redisTLS(re *redisEnv) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if re.cert != "" || re.key != "" {
		pair, err := tlsfile.KeyPair(re.cert, re.key)
		if err != nil {
			return nil, fmt.Errorf("rls: REDIS_TLS_CLIENT_CERT/KEY: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	if re.ca != "" {
		// Added to the system's roots, as envoyproxy/ratelimit adds it:
		// one REDIS_TLS_CACERT serves REDIS_ and REDIS_PERSECOND_ alike,
		// one of which may hold a certificate of a public CA.
		pem, err := tlsfile.Read(re.ca)
		if err != nil {
			return nil, fmt.Errorf("rls: REDIS_TLS_CACERT: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("rls: REDIS_TLS_CACERT: %w in %s", tlsfile.ErrNoCertificate, re.ca)
		}
		tc.RootCAs = pool
	}
	if re.skipVerify {
		// Skip the host name only: the chain is still checked.
		roots := tc.RootCAs
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("rls: redis: no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return tc, nil
}

// statsdTagsOf are the EXTRA_TAGS gostats appends to names: those with a
// key and a value.
func statsdTagsOf(tags map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range tags {
		if k != "" && v != "" {
			out[k] = v
		}
	}
	return out
}
