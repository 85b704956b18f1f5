package app

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/rls"
)

// envOf makes a lookup function and an environment list from a map.
func envOf(m map[string]string) (func(string) (string, bool), []string) {
	var list []string
	for k, v := range m {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }, list
}

func TestRLSEnvDefaults(t *testing.T) {
	t.Parallel()
	e, notes, err := readRLSEnv(envOf(map[string]string{"PATH": "/bin"}))
	if err != nil {
		t.Fatal(err)
	}
	if e.httpAddr != "0.0.0.0:8080" || e.grpcAddr != "0.0.0.0:8081" || e.debugAddr != "0.0.0.0:6070" || e.promAddr != ":9090" {
		t.Errorf("addresses %s %s %s %s", e.httpAddr, e.grpcAddr, e.debugAddr, e.promAddr)
	}
	if e.configDir != "" || e.backend != "redis" || e.redis.socket != "unix" || e.redis.url != "/var/run/nutcracker/ratelimit.sock" ||
		e.redis.typ != "single" || e.maxConnAge != 24*time.Hour || e.maxConnAgeGrace != time.Hour || e.nearRatio != 0.8 {
		t.Errorf("defaults %+v", e)
	}
	if !e.load.AllFiles || !e.load.Recursive || !e.load.DotFiles || e.load.MergeDomains || e.load.Compat {
		t.Errorf("load options %+v", e.load)
	}
	if !e.service.NoFields || e.service.PeerHeaders != nil || e.service.ShadowMode {
		t.Errorf("service options %+v", e.service)
	}
	if e.heapReserveMiB != DefaultHeapReserveMiB {
		t.Errorf("heap reserve %d MiB, want %d", e.heapReserveMiB, DefaultHeapReserveMiB)
	}
	// statsd is envoyproxy/ratelimit's default, on localhost:8125 every 10s.
	if len(notes) != 0 {
		t.Errorf("notes %+v", notes)
	}
	if e.statsd == nil || *e.statsd != (Statsd{Network: "tcp", Addr: "localhost:8125", Interval: 10 * time.Second}) {
		t.Errorf("statsd %+v", e.statsd)
	}
}

func TestRLSEnvReadsEnvoyproxyRatelimitSettings(t *testing.T) {
	t.Parallel()
	e, notes, err := readRLSEnv(envOf(map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "9000", "HOST": "127.0.0.2", "PORT": "9001", "DEBUG_PORT": "9002",
		"GRPC_MAX_CONNECTION_AGE": "5m", "RUNTIME_ROOT": "/srv/rt/current", "RUNTIME_SUBDIRECTORY": "ratelimit",
		"RUNTIME_IGNOREDOTFILES": "true", "MERGE_DOMAIN_CONFIG": "true", "FLOODGATE_COMPAT": "true",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379",
		"REDIS_AUTH": "app:s3cret", "REDIS_SENTINEL_AUTH": "sentinelpw",
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_TYPE": "cluster",
		"REDIS_PERSECOND_URL": "c1:7000,c2:7000", "REDIS_PERSECOND_TLS": "true",
		"SHADOW_MODE": "true", "QUOTA_MODE": "true", "RESPONSE_DYNAMIC_METADATA": "true",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_REMAINING_HEADER": "X-Left", "NEAR_LIMIT_RATIO": "0.9",
		"USE_PROMETHEUS": "true", "EXTRA_TAGS": "team:edge,env:prod", "CACHE_KEY_PREFIX": "rl:",
		"LOCAL_CACHE_SIZE_IN_BYTES": "1000000", "USE_DOG_STATSD": "true", "MEMCACHE_HOST_PORT": "m:11211",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false", "TRACING_ENABLED": "true",
		"FLOODGATE_MAX_DESCRIPTOR_FILES": "5000", "FLOODGATE_MAX_DESCRIPTOR_BYTES": "1000000",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if e.grpcAddr != "127.0.0.1:9000" || e.httpAddr != "127.0.0.2:9001" || e.debugAddr != "0.0.0.0:9002" || e.maxConnAge != 5*time.Minute {
		t.Errorf("addresses %+v", e)
	}
	if e.configDir != filepath.Join("/srv/rt/current", "ratelimit", "config") || e.load.DotFiles || !e.load.MergeDomains || !e.load.Compat ||
		e.load.MaxFiles != 5000 || e.load.MaxBytes != 1000000 {
		t.Errorf("configuration %s %+v", e.configDir, e.load)
	}
	if u, _ := redisURL(&e.redis, "app", "s3cret"); u != "redis+sentinel://app:s3cret@s1:26379,s2:26379/mymaster" || e.redis.sentinelAuth != "sentinelpw" {
		t.Errorf("redis %s %+v", u, e.redis)
	}
	if e.perSecond == nil {
		t.Fatal("no per-second redis")
	}
	if u, _ := redisURL(e.perSecond, "", ""); u != "rediss+cluster://c1:7000,c2:7000" {
		t.Errorf("per-second redis %s", u)
	}
	s := e.service
	if !s.ShadowMode || !s.QuotaMode || !s.DynamicMetadata || s.PeerHeaders == nil ||
		*s.PeerHeaders != (rls.PeerHeaders{Limit: "RateLimit-Limit", Remaining: "X-Left", Reset: "RateLimit-Reset"}) {
		t.Errorf("service %+v", s)
	}
	if e.nearRatio != 0.9 || !e.usePrometheus || e.extraTags["team"] != "edge" || e.extraTags["env"] != "prod" || e.prefix != "rl:" {
		t.Errorf("stats %+v", e)
	}
	var got []string
	for _, n := range notes {
		got = append(got, fmt.Sprintf("%s %v", n.Name, n.Unsupported))
	}
	want := "LOCAL_CACHE_SIZE_IN_BYTES false|MEMCACHE_HOST_PORT true|TRACING_ENABLED true|USE_DOG_STATSD true"
	if strings.Join(got, "|") != want {
		t.Errorf("notes %s, want %s", strings.Join(got, "|"), want)
	}
}

func TestRLSEnvRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]string{
		"BACKEND_TYPE=memcache":                  "no Memcache backend",
		"CONFIG_TYPE=GRPC_XDS_SOTW":              "only FILE is supported",
		"REDIS_TYPE=ring":                        "want single, sentinel or cluster",
		"REDIS_SOCKET_TYPE=udp":                  "want tcp, tcp4, tcp6 or unix",
		"NEAR_LIMIT_RATIO=2":                     "want a number in (0, 1]",
		"PORT=http":                              "PORT=\"http\": want a whole number",
		"SHADOW_MODE=maybe":                      "want true or false",
		"GRPC_MAX_CONNECTION_AGE=1":              "want a duration",
		"EXTRA_TAGS=nocolon":                     "want key:value pairs",
		"LOG_LEVEL=loud":                         "want debug, info, warn or error",
		"FLOODGATE_HEAP_RESERVE_MIB=-1":          "want 0 (none) to 4096",
		"FLOODGATE_HEAP_RESERVE_MIB=9000":        "want 0 (none) to 4096",
		"FLOODGATE_HEAP_RESERVE_MIB=32M":         "want a whole number",
		"FLOODGATE_MAX_DESCRIPTOR_FILES=0":       "FLOODGATE_MAX_DESCRIPTOR_FILES=0, FLOODGATE_MAX_DESCRIPTOR_BYTES=16777216: want at least 1",
		"FLOODGATE_MAX_DESCRIPTOR_BYTES=-1":      "want at least 1",
		"REDIS_TIMEOUT=0":                        `REDIS_TIMEOUT="0": want a positive duration such as 10s`,
		"FLOODGATE_STORE_TIMEOUT=-1ms":           `FLOODGATE_STORE_TIMEOUT="-1ms": want a positive duration such as 250ms`,
		"GRPC_MAX_CONNECTION_AGE_GRACE=0":        `GRPC_MAX_CONNECTION_AGE_GRACE="0": want a positive duration`,
		"STATS_FLUSH_INTERVAL=0s":                `STATS_FLUSH_INTERVAL="0s": want a positive duration`,
		"FLOODGATE_DEBUG_HOSTS=a.svc,b.svc:6070": `"b.svc:6070" is not a host name`,
	} {
		k, v, _ := strings.Cut(env, "=")
		_, _, err := readRLSEnv(envOf(map[string]string{k: v}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", env, err, want)
		}
	}
}

// TestRLSEnvTLSOnlyWhereItCanBe: REDIS_TLS asks for what a Unix socket or
// a plain redis:// URL cannot give; the service refuses to start, naming
// the variables, rather than talk to Redis unencrypted or fail at every
// connection. The password in the URL is not repeated.
func TestRLSEnvTLSOnlyWhereItCanBe(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want string // "" when the settings are accepted
	}{
		{map[string]string{"REDIS_TLS": "true"}, "REDIS_TLS=true with REDIS_SOCKET_TYPE=unix (the default): Redis serves TLS over TCP only"},
		{map[string]string{"REDIS_TLS": "true", "REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/run/redis.sock"}, "set REDIS_SOCKET_TYPE=tcp"},
		{map[string]string{"REDIS_TLS": "true", "REDIS_URL": "redis+sentinel://u:s3cret@s1/m"}, "REDIS_URL is a redis+sentinel:// URL, which speaks without TLS"},
		{map[string]string{"REDIS_TLS": "true", "REDIS_URL": "redis+cluster://cache:7000"}, "give its rediss form"},
		{map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TLS": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "cache:6379"},
			"REDIS_PERSECOND_TLS=true with REDIS_PERSECOND_SOCKET_TYPE=unix"},
		{map[string]string{"REDIS_TLS": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "cache:6379"}, ""},
		{map[string]string{"REDIS_TLS": "true", "REDIS_URL": "rediss://cache:6379"}, ""},
		{map[string]string{"REDIS_TLS": "true", "REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7000"}, ""},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/run/redis.sock"}, ""},
	} {
		_, _, err := readRLSEnv(envOf(c.env))
		_, list := envOf(c.env)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v, want accepted", list, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want %q", list, err, c.want)
		case err != nil && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("%v: the error repeats the password: %v", list, err)
		}
	}
}

// TestRLSEnvReadsRedisURLsAsEnvoyproxyRatelimit: envoyproxy/ratelimit's
// Redis client (radix) takes a redis:// URL in place of each host:port of
// REDIS_URL, and applies REDIS_AUTH and REDIS_TLS to it as to any
// address: REDIS_AUTH's user name and password win, each on its own, over
// the URL's; REDIS_TLS dials TLS to its host; its path (or db parameter)
// selects a database; behind sentinels the URLs' credentials are the
// sentinels'. Run by hand, the peer served with REDIS_URL=redis://host:port
// and REDIS_AUTH=pw on a Redis with requirepass, and with REDIS_TLS=true
// on a Redis TLS port; floodgate rls dropped REDIS_AUTH (its start
// failed with NOAUTH) and refused REDIS_TLS ("REDIS_URL is a redis:// URL,
// which speaks without TLS").
func TestRLSEnvReadsRedisURLsAsEnvoyproxyRatelimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env                    map[string]string
		url, sentUser, sentPwd string
	}{
		{map[string]string{"REDIS_URL": "redis://cache:6379", "REDIS_AUTH": "pw"}, "redis://:pw@cache:6379", "", ""},
		{map[string]string{"REDIS_URL": "redis://cache:6379", "REDIS_AUTH": "app:pw", "REDIS_TLS": "true"}, "rediss://app:pw@cache:6379", "", ""},
		{map[string]string{"REDIS_URL": "redis://u:old@cache:6379/2", "REDIS_AUTH": "new"}, "redis://u:new@cache:6379/2", "", ""},
		{map[string]string{"REDIS_URL": "redis://u:p%40ss@cache:6379?db=3"}, "redis://u:p@ss@cache:6379/3", "", ""},
		{map[string]string{"REDIS_URL": "redis://cache:6379?password=qp&username=qu"}, "redis://qu:qp@cache:6379", "", ""},
		{map[string]string{"REDIS_URL": "redis://cache:6379", "REDIS_SOCKET_TYPE": "tcp"}, "redis://cache:6379", "", ""},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "redis://:pw@a:7000,redis://:pw@b:7000", "REDIS_TLS": "true"},
			"rediss+cluster://:pw@a:7000,b:7000", "", ""},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,redis://su:sp@s1:26379,redis://su:sp@s2:26379", "REDIS_AUTH": "pw"},
			"redis+sentinel://:pw@s1:26379,s2:26379/mymaster", "su", "sp"},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,redis://:sp@s1:26379", "REDIS_SENTINEL_AUTH": "given"},
			"redis+sentinel://s1:26379/mymaster", "", "given"},
		// Floodgate's own URLs are taken whole, as before.
		{map[string]string{"REDIS_URL": "rediss://u:p@cache:6380/1", "REDIS_AUTH": "ignored"}, "rediss://u:p@cache:6380/1", "", ""},
		{map[string]string{"REDIS_URL": "redis+cluster://a:7000,b:7000"}, "redis+cluster://a:7000,b:7000", "", ""},
	} {
		_, list := envOf(c.env)
		e, err := ReadEnvoy(envOf(c.env))
		if err != nil {
			t.Errorf("%v: %v", list, err)
			continue
		}
		st := e.Settings.Store
		if st.URL != c.url || st.Options.SentinelUsername != c.sentUser || st.Options.SentinelPassword != c.sentPwd {
			t.Errorf("%v: store %s, sentinels %q:%q; want %s, %q:%q", list, st.URL, st.Options.SentinelUsername,
				st.Options.SentinelPassword, c.url, c.sentUser, c.sentPwd)
		}
		if (st.Options.TLS != nil) != (c.env["REDIS_TLS"] == "true") {
			t.Errorf("%v: TLS configuration %v, want one with REDIS_TLS=true only", list, st.Options.TLS != nil)
		}
	}
	for env, want := range map[string]string{
		"redis://cache:6379/x":   `database "x" is not a number`,
		"redis://u:s3cret@%zz/0": "address 1 is not a redis:// URL that can be read",
	} {
		_, err := ReadEnvoy(envOf(map[string]string{"REDIS_URL": env}))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("REDIS_URL=%s: %v, want %q without the password", env, err, want)
		}
	}
}

// TestRLSEnvStatsdSink: one statistics sink, as in envoyproxy/ratelimit:
// statsd unless USE_STATSD=false, USE_PROMETHEUS=true or DISABLE_STATS.
func TestRLSEnvStatsdSink(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want *Statsd
	}{
		{map[string]string{"STATSD_HOST": "sd", "STATSD_PORT": "9125", "STATSD_PROTOCOL": "UDP", "STATS_FLUSH_INTERVAL": "2s"},
			&Statsd{Network: "udp", Addr: "sd:9125", Interval: 2 * time.Second}},
		{map[string]string{"USE_STATSD": "false"}, nil},
		{map[string]string{"USE_PROMETHEUS": "true"}, nil},
		{map[string]string{"DISABLE_STATS": "true"}, nil},
	} {
		e, _, err := readRLSEnv(envOf(c.env))
		if err != nil {
			t.Fatal(err)
		}
		if (e.statsd == nil) != (c.want == nil) || e.statsd != nil && *e.statsd != *c.want {
			t.Errorf("%v: statsd %+v, want %+v", c.env, e.statsd, c.want)
		}
	}
	if _, _, err := readRLSEnv(envOf(map[string]string{"STATSD_PROTOCOL": "unix"})); err == nil {
		t.Error("STATSD_PROTOCOL=unix taken")
	}
}

// TestRLSEnvStatsdProtocolUnusedIsNotRefused: with statsd off (USE_STATSD=false,
// USE_PROMETHEUS=true, DISABLE_STATS=true) envoyproxy/ratelimit never reads
// STATSD_PROTOCOL and starts whatever it says, so a rollout that carries an
// old or wrong value along must start floodgate rls too; with statsd on, a
// value no statsd sink can dial still stops the start, naming it.
func TestRLSEnvStatsdProtocolUnusedIsNotRefused(t *testing.T) {
	t.Parallel()
	for _, off := range []map[string]string{{"USE_STATSD": "false"}, {"USE_PROMETHEUS": "true"}, {"DISABLE_STATS": "true"}} {
		env := map[string]string{"STATSD_PROTOCOL": "bogus"}
		for k, v := range off {
			env[k] = v
		}
		e, _, err := readRLSEnv(envOf(env))
		if err != nil {
			t.Errorf("%v: %v, want a start without statsd", env, err)
			continue
		}
		if e.statsd != nil {
			t.Errorf("%v: statsd %+v, want none", env, e.statsd)
		}
	}
	if _, _, err := readRLSEnv(envOf(map[string]string{"STATSD_PROTOCOL": "bogus"})); err == nil ||
		!strings.Contains(err.Error(), "STATSD_PROTOCOL") {
		t.Errorf("STATSD_PROTOCOL=bogus with statsd on: %v, want the start stopped naming it", err)
	}
}

// TestRLSEnvStatsdProtocolFamilies: envoyproxy/ratelimit's statsd sink
// (lyft/gostats' net sink, which reads STATSD_PROTOCOL itself) dials with
// the protocol as given, so udp4, udp6, tcp4 and tcp6 work there, to pin
// an address family; floodgate rls must start with them too.
func TestRLSEnvStatsdProtocolFamilies(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"udp4", "udp6", "tcp4", "tcp6"} {
		e, _, err := readRLSEnv(envOf(map[string]string{"STATSD_PROTOCOL": p}))
		if err != nil {
			t.Errorf("STATSD_PROTOCOL=%s: %v", p, err)
			continue
		}
		if e.statsd == nil || e.statsd.Network != p {
			t.Errorf("STATSD_PROTOCOL=%s: statsd %+v, want the network %s", p, e.statsd, p)
		}
	}
}

// TestRLSMemoryStoreBounded: floodgate rls on its embedded store keeps
// the counters within serve's default cap (256 MiB), evicting the oldest
// past it; it had no cap, and 1.2 million distinct descriptor values took
// 754 MB.
func TestRLSMemoryStoreBounded(t *testing.T) {
	t.Parallel()
	e, err := ReadEnvoy(envOf(map[string]string{"BACKEND_TYPE": "memory"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Settings.Store.Options.MaxBytes; got != config.DefaultMemoryMaxBytes {
		t.Errorf("memory store cap %d, want %d", got, config.DefaultMemoryMaxBytes)
	}
}
