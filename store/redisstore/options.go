package redisstore

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Mode says how the store reaches Redis.
type Mode uint8

// Modes, chosen by the URL's scheme.
const (
	Standalone Mode = iota + 1 // redis://, rediss://
	Cluster                    // redis+cluster://, rediss+cluster://
	Sentinel                   // redis+sentinel://, rediss+sentinel://
)

// String returns standalone, cluster or sentinel.
func (m Mode) String() string {
	switch m {
	case Standalone:
		return "standalone"
	case Cluster:
		return "cluster"
	case Sentinel:
		return "sentinel"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Address is a parsed Redis URL.
type Address struct {
	Mode Mode
	// TLS is set by the rediss schemes.
	TLS bool
	// Unix is set by redis+unix: Hosts then holds the path of a standalone
	// server's Unix socket.
	Unix bool
	// Hosts are host:port pairs: the server, the cluster's seed nodes or
	// the sentinels.
	Hosts    []string
	Username string
	Password string
	// DB is the database number (standalone and Sentinel only).
	DB int
	// MasterSet is the name of the primary that the sentinels watch.
	MasterSet string
}

// ParseURL parses one of
//
//	redis://[user:password@]host[:port][/db]
//	rediss://[user:password@]host[:port][/db]                    (TLS)
//	redis+cluster://[user:password@]host:port[,host:port...]
//	redis+sentinel://[user:password@]host:port[,host:port...]/master[/db]
//	redis+unix://[user:password@]/path/of/the.sock               (a standalone server's Unix socket)
//
// (rediss+cluster and rediss+sentinel for TLS). The port defaults to 6379
// (26379 for sentinels). A user name or password is percent-encoded: one
// holding a / written as it is (a base64 password, say) is refused, with
// a message that shows none of it; no message shows a password.
func ParseURL(raw string) (Address, error) {
	bad := func(format string, args ...any) (Address, error) {
		return Address{}, fmt.Errorf("redisstore: address %q: %s", redact(raw), fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return bad("want a URL such as redis://host:6379, redis+cluster://h1:6379,h2:6379 or redis+sentinel://h1:26379/mymaster")
	}
	var a Address
	switch strings.ToLower(scheme) {
	case "redis+unix":
		return parseUnix(raw, rest)
	case "redis":
		a.Mode = Standalone
	case "rediss":
		a.Mode, a.TLS = Standalone, true
	case "redis+cluster":
		a.Mode = Cluster
	case "rediss+cluster":
		a.Mode, a.TLS = Cluster, true
	case "redis+sentinel":
		a.Mode = Sentinel
	case "rediss+sentinel":
		a.Mode, a.TLS = Sentinel, true
	default:
		return bad("unknown scheme %q (want redis, rediss, redis+cluster, rediss+cluster, redis+sentinel, rediss+sentinel or redis+unix)", scheme)
	}
	if strings.Contains(rest, "?") || strings.Contains(rest, "#") {
		return bad("query parameters and fragments are not supported; use the store's options")
	}
	hostpart, path, _ := strings.Cut(rest, "/")
	if !strings.Contains(hostpart, "@") && strings.Contains(path, "@") {
		// A "/" in the user information (a base64 password, say) ends
		// the host part early: what follows is not a host, and the
		// parts of it a message would show are the password's.
		return bad("a user name or password holding / must write it %%2F")
	}
	if at := strings.LastIndex(hostpart, "@"); at >= 0 {
		info := hostpart[:at]
		hostpart = hostpart[at+1:]
		user, pass, hasPass := strings.Cut(info, ":")
		var err error
		if a.Username, err = url.PathUnescape(user); err != nil {
			return bad("bad user name: %v", err)
		}
		if hasPass {
			if a.Password, err = url.PathUnescape(pass); err != nil {
				return bad("bad password: %v", err)
			}
		}
	}
	defPort := "6379"
	if a.Mode == Sentinel {
		defPort = "26379"
	}
	if hostpart == "" {
		return bad("no host")
	}
	for _, h := range strings.Split(hostpart, ",") {
		if h == "" {
			return bad("empty host in list")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// No port given (or a bare IPv6 address in brackets).
			host, port = strings.Trim(h, "[]"), defPort
			if strings.ContainsAny(host, "[]") {
				return bad("bad host %q", h)
			}
		}
		if host == "" {
			return bad("empty host in %q", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return bad("bad port %q", port)
		}
		a.Hosts = append(a.Hosts, net.JoinHostPort(host, port))
	}
	if a.Mode == Standalone && len(a.Hosts) > 1 {
		return bad("redis:// takes one host; use redis+cluster:// or redis+sentinel:// for several")
	}
	segs := []string{}
	if path != "" {
		segs = strings.Split(path, "/")
	}
	if a.Mode == Sentinel {
		if len(segs) == 0 || segs[0] == "" {
			return bad("redis+sentinel:// needs the master's name as its path: redis+sentinel://host:26379/mymaster")
		}
		a.MasterSet, segs = segs[0], segs[1:]
	}
	if len(segs) > 1 {
		return bad("path %q has too many parts", path)
	}
	if len(segs) == 1 && segs[0] != "" {
		if a.Mode == Cluster {
			return bad("a cluster has only database 0")
		}
		db, err := strconv.Atoi(segs[0])
		if err != nil || db < 0 {
			return bad("database %q is not a number", segs[0])
		}
		a.DB = db
	}
	return a, nil
}

// parseUnix reads redis+unix://[user[:password]@]/path/of/the.sock, raw
// being the whole URL and rest what follows its "://".
func parseUnix(raw, rest string) (Address, error) {
	bad := func(why string) (Address, error) {
		return Address{}, fmt.Errorf("redisstore: address %q: %s", redact(raw), why)
	}
	a := Address{Mode: Standalone, Unix: true}
	if at := strings.Index(rest, "@/"); at >= 0 {
		user, pass, _ := strings.Cut(rest[:at], ":")
		var err error
		if a.Username, err = url.PathUnescape(user); err == nil {
			a.Password, err = url.PathUnescape(pass)
		}
		if err != nil {
			return bad("bad credentials: " + err.Error())
		}
		rest = rest[at+1:]
	}
	if !strings.HasPrefix(rest, "/") || len(rest) < 2 || strings.ContainsAny(rest, "?#") {
		return bad("want redis+unix:///path/of/the.sock")
	}
	a.Hosts = []string{rest}
	return a, nil
}

// redact hides the password of a URL in error messages: all of what
// comes before the URL's last @ is its user information, so that a
// password holding a / (which ParseURL refuses) is hidden too.
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if hasPass {
		user += ":xxxxx"
	}
	return scheme + "://" + user + "@" + rest[at+1:]
}

// clientOption turns the address and options into rueidis' options.
func (a Address) clientOption(o *Options) rueidis.ClientOption {
	opt := rueidis.ClientOption{
		InitAddress:  a.Hosts,
		Username:     a.Username,
		Password:     a.Password,
		SelectDB:     a.DB,
		DisableCache: true, // no server-assisted client cache: every decision reads the server
		Dialer:       net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second},
		// Decisions are writes: a retried script could charge twice.
		DisableRetry: true,
		// Every connection sends its calls in its pipeline from the
		// start, also a call alone on it: a call whose context has a
		// deadline is otherwise written and read with the connection's
		// own deadline, and one that passes (a caller with a short
		// deadline, answered or read late) closes the connection,
		// failing the calls queued behind it that had time to spare. In
		// the pipeline a call whose context ends is given up alone.
		AlwaysPipelining: true,
		ConnWriteTimeout: o.WriteTimeout,
		ClientName:       "floodgate",
	}
	opt.PipelineMultiplex = -1 // one connection
	if o.PipelineMultiplex > 0 {
		opt.PipelineMultiplex = o.PipelineMultiplex
	}
	switch {
	case o.MaxFlushDelay == 0 && o.MaxBatch != 1 && o.MaxBatch >= 0:
		// Batching gathers the requests; the pipeline writes at once.
	case o.MaxFlushDelay == 0:
		opt.MaxFlushDelay = DefaultMaxFlushDelay
	case o.MaxFlushDelay > 0:
		opt.MaxFlushDelay = o.MaxFlushDelay
	}
	if a.TLS {
		cfg := o.TLSConfig
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		} else {
			cfg = cfg.Clone()
		}
		if cfg.ServerName == "" && len(a.Hosts) == 1 {
			cfg.ServerName, _, _ = net.SplitHostPort(a.Hosts[0])
		}
		opt.TLSConfig = cfg
	}
	switch a.Mode {
	case Standalone:
		opt.ForceSingleClient = true
	case Sentinel:
		opt.Sentinel = rueidis.SentinelOption{
			MasterSet:               a.MasterSet,
			Dialer:                  opt.Dialer,
			TLSConfig:               opt.TLSConfig,
			Username:                o.SentinelUsername,
			Password:                o.SentinelPassword,
			TopologyRefreshInterval: 5 * time.Second,
		}
	case Cluster:
		opt.ClusterOption.ShardsRefreshInterval = 10 * time.Second
	}
	return opt
}
