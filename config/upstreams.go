package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// Values of routes[].balance.
const (
	BalanceRoundRobin    = "round_robin"
	BalanceLeastRequests = "least_requests"
)

// Defaults of a pool's health (routes[].health).
const (
	DefaultHealthInterval  = 5 * time.Second
	DefaultHealthTimeout   = 2 * time.Second
	DefaultHealthHealthy   = 2
	DefaultHealthUnhealthy = 3
	DefaultHealthFailures  = 3
	DefaultHealthEject     = 10 * time.Second
)

// Health watches the targets of a pool. Passive health is always on
// (unless failures is 0): a target that fails to connect or answers 5xx
// Failures times in a row is taken out for Eject. Active health checks
// run when Path is set: every Interval each target is asked GET Path; a
// 2xx or 3xx within Timeout is a pass, and Unhealthy failures in a row
// take it out until Healthy passes in a row bring it back. A check fails
// at Timeout only when the target has given nothing in that time (no byte
// of its answer, its TLS handshake or no connection accepted): one whose
// answer has reached the gateway's socket, or whose request the gateway
// had not yet written, is waited for up to one Interval more, so that a
// gateway short of CPU does not take out a target that answered at once.
type Health struct {
	// Path is the path asked by active checks ("" for none).
	Path string `yaml:"path"`
	// Interval is the time between two checks of a target (default 5s).
	Interval time.Duration `yaml:"interval"`
	// Timeout bounds one check (default 2s): the target's time to answer
	// its request once written (see Health).
	Timeout time.Duration `yaml:"timeout"`
	// Healthy is the passes in a row that bring a target back (default 2).
	Healthy int `yaml:"healthy"`
	// Unhealthy is the failed checks in a row that take a target out
	// (default 3).
	Unhealthy int `yaml:"unhealthy"`
	// Failures is the failed requests in a row (no connection, or a 5xx
	// answer) that take a target out for Eject (default 3; 0 turns passive
	// health off).
	Failures int `yaml:"failures"`
	// Eject is how long a target that failed passively stays out
	// (default 10s).
	Eject time.Duration `yaml:"eject"`
}

// pool validates a route's pool (upstreams, balance, health,
// upstream_tls) and reports whether the route has one: then its upstream
// is the pool's first target.
func (v *validator) pool(r *Route, path string) bool {
	v.upstreamTLS(path+".upstream_tls", &r.UpstreamTLS)
	if !v.written(path+".upstreams") && len(r.Upstreams) == 0 {
		if r.Balance != "" {
			v.errorf(path+".balance", "balance needs upstreams, a pool of targets")
		}
		if r.Health != (Health{}) {
			v.errorf(path+".health", "health needs upstreams, a pool of targets")
		}
		return false
	}
	if r.Upstream != "" {
		v.errorf(path+".upstream", "a route has upstream (one URL) or upstreams (a pool), not both")
	}
	if len(r.Upstreams) == 0 {
		v.errorf(path+".upstreams", "a pool needs at least one target: an http:// or https:// URL")
		return true
	}
	r.UpstreamURLs = nil
	seen := map[string]int{}
	for j, s := range r.Upstreams {
		field := fmt.Sprintf("%s.upstreams[%d]", path, j)
		u, why := upstreamURL(s, "a target")
		if why != "" {
			v.errorf(field, "%s", why)
			continue
		}
		key := u.Scheme + "://" + u.Host
		if k, dup := seen[key]; dup {
			v.errorf(field, "same target as upstreams[%d]", k)
			continue
		}
		seen[key] = j
		if first := r.UpstreamURLs; len(first) > 0 && (u.EscapedPath() != first[0].EscapedPath() || u.RawQuery != first[0].RawQuery) {
			v.errorf(field, "the targets of a pool differ only in scheme, host and port: want the path and query of upstreams[0]")
			continue
		}
		r.UpstreamURLs = append(r.UpstreamURLs, u)
	}
	if len(r.UpstreamURLs) > 0 {
		r.UpstreamURL = r.UpstreamURLs[0]
	}
	switch want := choices["routes[].balance"]; {
	case r.Balance == "":
		r.Balance = BalanceRoundRobin
	case !slices.Contains(want, r.Balance):
		v.errorf(path+".balance", "balance must be %s, got %q", wordList(want), r.Balance)
	}
	v.health(&r.Health, path+".health")
	return true
}

// health validates a pool's health settings and fills in the defaults.
func (v *validator) health(h *Health, path string) {
	if h.Path != "" && (h.Path[0] != '/' || badPathChar(h.Path)) {
		v.errorf(path+".path", "a health check path starts with / and holds no spaces or control characters, got %q", h.Path)
	}
	for _, d := range []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{{"interval", &h.Interval, DefaultHealthInterval}, {"timeout", &h.Timeout, DefaultHealthTimeout}, {"eject", &h.Eject, DefaultHealthEject}} {
		switch {
		case !v.written(path + "." + d.name):
			*d.p = d.def
		case *d.p <= 0:
			v.errorf(path+"."+d.name, "must be a positive duration")
		}
	}
	for _, n := range []struct {
		name string
		p    *int
		def  int
		min  int
	}{{"healthy", &h.Healthy, DefaultHealthHealthy, 1}, {"unhealthy", &h.Unhealthy, DefaultHealthUnhealthy, 1}, {"failures", &h.Failures, DefaultHealthFailures, 0}} {
		switch {
		case !v.written(path + "." + n.name):
			*n.p = n.def
		case *n.p < n.min || *n.p > 1000:
			v.errorf(path+"."+n.name, "must be from %d to 1000, got %d", n.min, *n.p)
		}
	}
	if h.Path != "" && h.Timeout > h.Interval {
		v.errorf(path+".timeout", "a check's timeout (%s) must not exceed its interval (%s)", h.Timeout, h.Interval)
	}
}

// badPathChar reports whether p holds a space or a control character.
func badPathChar(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] == 0x7f {
			return true
		}
	}
	return false
}

// upstreamURL reads the URL of an upstream (what names it in a problem:
// "upstream", "a target"), or says what is wrong with it: a URL that does
// not parse, a scheme but http or https, no host, a port out of range.
func upstreamURL(s, what string) (*url.URL, string) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("bad URL: %v", errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, what + " must be an http:// or https:// URL"
	case u.Hostname() == "":
		return nil, what + " URL has no host"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Sprintf("%s URL has port %s: want 1 to 65535", what, p)
		}
	}
	return u, ""
}
