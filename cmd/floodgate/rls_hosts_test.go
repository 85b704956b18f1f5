package main

import (
	"strings"
	"testing"
)

// TestRLSDebugPortChecksHost: the debug port (DEBUG_PORT) and the
// Prometheus address (PROMETHEUS_ADDR) of floodgate rls serve only requests
// that name them by an IP address (Prometheus scraping the pod), localhost
// or a name in FLOODGATE_DEBUG_HOSTS (a Service's name); any other Host,
// such as a name a page rebinds to the listener's address (DNS rebinding)
// to read /rlconfig, /stats or /metrics as its own origin, or to start CPU
// profiles, is answered 421 with the reason.
func TestRLSDebugPortChecksHost(t *testing.T) {
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 10}\n"})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "USE_PROMETHEUS": "true",
		"PROMETHEUS_ADDR": "127.0.0.1:0", "FLOODGATE_DEBUG_HOSTS": "ratelimit.ns.svc"}))
	for _, c := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:6070", 200},
		{"10.1.2.3:6070", 200},
		{"localhost", 200},
		{"ratelimit.ns.svc:6070", 200},
		{"RateLimit.NS.svc.", 200},
		{"rebound.example:6070", 421},
		{"rebound.example", 421},
		{"ratelimit.ns.svc.rebound.example", 421},
	} {
		for _, url := range []string{p.debug + "/metrics", p.debug + "/rlconfig", p.debug + "/stats", p.debug + "/", p.prom + "/metrics"} {
			code, _, body := get(t, url, "Host", c.host)
			if code != c.want {
				t.Errorf("%s with Host %q: %d %.80q, want %d", url, c.host, code, body, c.want)
			}
			if c.want == 421 && !strings.Contains(body, "FLOODGATE_DEBUG_HOSTS") {
				t.Errorf("%s with Host %q: the answer gives no reason: %q", url, c.host, body)
			}
		}
	}
}
