package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testcerts"
)

// TestPool: a route's pool takes its targets, balance and health with
// their defaults; a pool with no targets, a target with another path,
// one URL beside a pool and health without a pool are refused with their
// positions.
func TestPool(t *testing.T) {
	f, err := Parse("p.yaml", []byte(`
routes:
  - name: api
    match: {paths: ["/**"]}
    upstreams: ["http://10.0.0.1:8080/v1", "https://10.0.0.2/v1"]
    balance: least_requests
    health: {path: /healthz, interval: 3s, unhealthy: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Routes[0]
	if len(r.UpstreamURLs) != 2 || r.UpstreamURL != r.UpstreamURLs[0] || r.UpstreamURLs[1].Host != "10.0.0.2" {
		t.Errorf("targets %v, upstream %v", r.UpstreamURLs, r.UpstreamURL)
	}
	want := Health{Path: "/healthz", Interval: 3 * time.Second, Timeout: DefaultHealthTimeout, Healthy: DefaultHealthHealthy, Unhealthy: 2,
		Failures: DefaultHealthFailures, Eject: DefaultHealthEject}
	if r.Balance != BalanceLeastRequests || r.Health != want {
		t.Errorf("balance %q, health %+v", r.Balance, r.Health)
	}
	for src, msg := range map[string]string{
		"    upstreams: []\n": "p.yaml:4:16: routes[0].upstreams: a pool needs at least one target",
		"    upstreams: [\"http://a:1/x\", \"http://b:1/y\"]\n":   "p.yaml:4:33: routes[0].upstreams[1]: the targets of a pool differ only in scheme, host and port",
		"    upstreams: [\"http://a:1\", \"http://a:1\"]\n":       "p.yaml:4:31: routes[0].upstreams[1]: same target as upstreams[0]",
		"    upstreams: [\"ftp://a\"]\n":                          "p.yaml:4:17: routes[0].upstreams[0]: a target must be an http:// or https:// URL",
		"    upstreams: [\"http://a:99999999\"]\n":                "p.yaml:4:17: routes[0].upstreams[0]: a target URL has port 99999999: want 1 to 65535",
		"    upstreams: [\"http://a:1\", \"http://b:0\"]\n":       "p.yaml:4:31: routes[0].upstreams[1]: a target URL has port 0: want 1 to 65535",
		"    upstream: http://127.0.0.1:99999999\n":               "p.yaml:4:15: routes[0].upstream: upstream URL has port 99999999: want 1 to 65535",
		"    upstream: http://:8080\n":                            "p.yaml:4:15: routes[0].upstream: upstream URL has no host",
		"    upstream: http://[::1]:65536/x\n":                    "p.yaml:4:15: routes[0].upstream: upstream URL has port 65536",
		"    upstream: http://a\n    upstreams: [\"http://b\"]\n": "p.yaml:4:15: routes[0].upstream: a route has upstream (one URL) or upstreams (a pool), not both",
		"    upstream: http://a\n    health: {path: /h}\n":        "p.yaml:5:13: routes[0].health: health needs upstreams",
		"    upstreams: [\"http://a\"]\n    balance: random\n":    `p.yaml:5:14: routes[0].balance: balance must be round_robin or least_requests, got "random"`,
	} {
		_, err := Parse("p.yaml", []byte("routes:\n  - name: api\n    match: {paths: [\"/**\"]}\n"+src))
		if err == nil || !strings.HasPrefix(err.Error(), msg) {
			t.Errorf("%s: %v\nwant %s", src, err, msg)
		}
	}
}

// TestGatewayTLS: server.tls takes certificates and a client CA relative
// to the file; a missing file, a key of another certificate, a client CA
// that holds none and a client_auth without a client CA are refused with
// their positions, as floodgate check shows them.
func TestGatewayTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Server("a"); err != nil {
		t.Fatal(err)
	}
	b, err := ca.Server("b")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.pem"), []byte("nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "g.yaml")
	f, err := Parse(name, []byte("server:\n  tls:\n    certs: [{cert: a.crt, key: a.key}, {cert: b.crt, key: b.key}]\n    client_ca: ca-ca.crt\n"))
	if err != nil {
		t.Fatal(err)
	}
	tl := f.Server.TLS
	if tl.Certs[1].CertPath != b.Cert || tl.ClientCAPath != ca.File || tl.ClientAuth != ClientAuthRequire || tl.MinVersion != TLSVersion12 {
		t.Errorf("tls %+v", tl)
	}
	for src, msg := range map[string]string{
		"    certs: [{cert: gone.crt, key: a.key}]\n":                        "g.yaml:3:20: server.tls.certs[0].cert: cannot read the certificate",
		"    certs: [{cert: a.crt, key: b.key}]\n":                           "g.yaml:3:32: server.tls.certs[0].key: the key does not go with the certificate a.crt",
		"    certs: [{cert: a.crt}]\n":                                       "g.yaml:3:13: server.tls.certs[0].key: a certificate needs its key",
		"    certs: [{cert: a.crt, key: a.key}]\n    client_ca: empty.pem\n": "g.yaml:4:16: server.tls.client_ca: no PEM certificate",
		"    certs: [{cert: a.crt, key: a.key}]\n    client_auth: require\n": "g.yaml:4:18: server.tls.client_auth: client_auth require needs client_ca",
		"    certs: [{cert: a.crt, key: a.key}]\n    min_version: \"1.1\"\n": `g.yaml:4:18: server.tls.min_version: min_version must be 1.2 or 1.3, got "1.1"`,
		"    certs: []\n": "g.yaml:3:12: server.tls.certs: TLS needs at least one certificate",
	} {
		_, err := Parse(name, []byte("server:\n  tls:\n"+src))
		if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(dir, msg)) {
			t.Errorf("%s: %v\nwant %s", src, err, msg)
		}
	}
	_, err = Parse(name, []byte("server:\n  upstream:\n    tls: {ca: gone.pem}\n"))
	if err == nil || !strings.Contains(err.Error(), "g.yaml:3:15: server.upstream.tls.ca: cannot read the CA bundle") {
		t.Errorf("upstream CA missing: %v", err)
	}
}
