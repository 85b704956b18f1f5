package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate/floodgate/internal/testcerts"
)

// tlsPKI is a server CA with one server certificate, and a client CA with
// a client certificate named envoy and one named other.
type tlsPKI struct {
	server          *testcerts.CA
	serverPair      testcerts.Pair
	client          *testcerts.CA
	envoy, stranger tls.Certificate
}

func newTLSPKI(t *testing.T, dir string) *tlsPKI {
	t.Helper()
	p := &tlsPKI{}
	var err error
	if p.server, err = testcerts.NewCA(dir, "server"); err != nil {
		t.Fatal(err)
	}
	if p.serverPair, err = p.server.Server("floodgate"); err != nil {
		t.Fatal(err)
	}
	if p.client, err = testcerts.NewCA(dir, "clients"); err != nil {
		t.Fatal(err)
	}
	load := func(name string, dns ...string) tls.Certificate {
		pair, err := p.client.Client(name, dns...)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.LoadX509KeyPair(pair.Cert, pair.Key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	p.envoy, p.stranger = load("envoy", "envoy"), load("other", "other")
	return p
}

// clientTLS trusts the server CA and presents certs.
func (p *tlsPKI) clientTLS(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: p.server.Pool, Certificates: certs, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
}

// renew writes a new server certificate over the old files and returns
// its serial number.
func (p *tlsPKI) renew(t *testing.T) *big.Int {
	t.Helper()
	pair, err := p.server.Server("floodgate")
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.LoadX509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber
}

// servedSerial is the serial number of the certificate addr serves.
func servedSerial(addr string, tc *tls.Config) (*big.Int, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// askRLS sends one ShouldRateLimit over TLS with tc.
func askRLS(addr string, tc *tls.Config) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	return err
}

// httpsStatus GETs url over TLS with tc.
func httpsStatus(url string, tc *tls.Config) (int, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if strings.HasSuffix(url, "/v1/check") {
		req, _ = http.NewRequest(http.MethodPost, url, strings.NewReader(`{"limit":"cap","key":"k"}`))
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestServeListenersMutualTLS: the rate-limit service, the check API and
// the admin listener of floodgate serve each take a client CA and a name:
// a client with a certificate of that CA carrying the name is served, one
// without a certificate or with another name is refused at the handshake;
// and each reads its certificate again when its files change.
func TestServeListenersMutualTLS(t *testing.T) {
	dir := t.TempDir()
	p := newTLSPKI(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "rls.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, apiAddr := anyPort, anyPort
	cfg := filepath.Join(dir, "gw.yaml")
	tlsFields := func(prefix string) string {
		return fmt.Sprintf("%scert: %s\n%skey: %s\n%sclient_ca: %s\n%sclient_san: envoy\n", prefix, p.serverPair.Cert, prefix, p.serverPair.Key,
			prefix, p.client.File, prefix)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  listen: 127.0.0.1:0
  admin_listen: 127.0.0.1:0
  grpc_listen: %q
  rls_config: [rls.yaml]
  api_listen: %q
  api_auth: none
%s%s  admin:
%s
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: cap, algorithm: fixed_window, limit: 100, window: 1h, key: global}
`, grpcAddr, apiAddr, indent(tlsFields("grpc_tls_"), "  "), indent(tlsFields("api_tls_"), "  "), indent(tlsFields("tls_"), "    "))), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := startProc(t, "--config", cfg, "--log-level", "warn")
	grpcAddr, apiAddr = listenedOn(t, proc.out.String(), rlsOn), listenedOn(t, proc.out.String(), apiOn)
	if !strings.HasPrefix(proc.admin, "https://") || !strings.Contains(proc.out.String(), "check API on https://") {
		t.Fatalf("the admin listener and the check API do not say they take TLS:\n%s", proc.out.String())
	}
	adminAddr := strings.TrimPrefix(proc.admin, "https://")
	good, bare, wrong := p.clientTLS(p.envoy), p.clientTLS(), p.clientTLS(p.stranger)

	if err := askRLS(grpcAddr, good); err != nil {
		t.Errorf("rate-limit service, client certificate named envoy: %v", err)
	}
	for name, tc := range map[string]*tls.Config{"no client certificate": bare, "a certificate named other": wrong} {
		if err := askRLS(grpcAddr, tc); err == nil {
			t.Errorf("rate-limit service, %s: served", name)
		}
	}
	for _, url := range []string{"https://" + apiAddr + "/v1/check", "https://" + adminAddr + "/healthz"} {
		if code, err := httpsStatus(url, good); err != nil || code != http.StatusOK {
			t.Errorf("%s, client certificate named envoy: %d, %v", url, code, err)
		}
		for name, tc := range map[string]*tls.Config{"no client certificate": bare, "a certificate named other": wrong} {
			if code, err := httpsStatus(url, tc); err == nil {
				t.Errorf("%s, %s: served, %d", url, name, code)
			}
		}
	}

	// A renewed certificate is served without a restart, on every
	// listener.
	serial := p.renew(t)
	for _, addr := range []string{grpcAddr, apiAddr, adminAddr} {
		var got *big.Int
		waitUntil(t, "the renewed certificate on "+addr, 10*time.Second, func() bool {
			got, _ = servedSerial(addr, good)
			return got != nil && got.Cmp(serial) == 0
		})
	}
	if err := askRLS(grpcAddr, good); err != nil {
		t.Errorf("rate-limit service after the renewal: %v", err)
	}

	// A client CA taken out of the bundle (a compromised one) and another
	// put in: the old CA's clients are refused, the new one's served,
	// without a restart, on every listener.
	next, err := testcerts.NewCA(dir, "next")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := next.Client("envoy", "envoy")
	if err != nil {
		t.Fatal(err)
	}
	nextEnvoy, err := tls.LoadX509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(next.File)
	if err != nil {
		t.Fatal(err)
	}
	writeByRename(t, p.client.File, b)
	fresh := p.clientTLS(nextEnvoy)
	waitUntil(t, "the rate-limit service to follow its client CA", 10*time.Second, func() bool {
		return askRLS(grpcAddr, fresh) == nil && askRLS(grpcAddr, good) != nil
	})
	for _, url := range []string{"https://" + apiAddr + "/v1/check", "https://" + adminAddr + "/healthz"} {
		waitUntil(t, url+" to follow its client CA", 10*time.Second, func() bool {
			code, err := httpsStatus(url, fresh)
			_, errOld := httpsStatus(url, good)
			return err == nil && code == http.StatusOK && errOld != nil
		})
	}
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

// TestServeReloadsCertificates: the rate-limit service and the admin
// listener, set up with only a certificate and a key, serve a renewed
// certificate without a restart.
func TestServeReloadsCertificates(t *testing.T) {
	dir := t.TempDir()
	p := newTLSPKI(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "rls.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr := anyPort
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  listen: 127.0.0.1:0
  admin_listen: 127.0.0.1:0
  grpc_listen: %q
  rls_config: [rls.yaml]
  grpc_tls_cert: %s
  grpc_tls_key: %s
  admin:
    tls_cert: %s
    tls_key: %s
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
`, grpcAddr, p.serverPair.Cert, p.serverPair.Key, p.serverPair.Cert, p.serverPair.Key)), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := startProc(t, "--config", cfg, "--log-level", "warn")
	grpcAddr = listenedOn(t, proc.out.String(), rlsOn)
	adminAddr := strings.TrimPrefix(proc.admin, "https://")
	tc := p.clientTLS()
	if err := askRLS(grpcAddr, tc); err != nil {
		t.Fatal(err)
	}
	serial := p.renew(t)
	for _, addr := range []string{grpcAddr, adminAddr} {
		var got *big.Int
		waitUntil(t, "the renewed certificate on "+addr, 10*time.Second, func() bool {
			got, _ = servedSerial(addr, tc)
			return got != nil && got.Cmp(serial) == 0
		})
	}
}

// TestRLSCommandMutualTLS: floodgate rls with GRPC_SERVER_USE_TLS and
// GRPC_CLIENT_TLS_CACERT and _SAN serves only clients whose certificate
// that CA signed with that name (not one without a certificate, one with
// another name, nor one with that name from another CA), and a renewed
// certificate without a restart.
func TestRLSCommandMutualTLS(t *testing.T) {
	dir := t.TempDir()
	p := newTLSPKI(t, dir)
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"})
	rp := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "GRPC_SERVER_USE_TLS": "true",
		"GRPC_SERVER_TLS_CERT": p.serverPair.Cert, "GRPC_SERVER_TLS_KEY": p.serverPair.Key,
		"GRPC_CLIENT_TLS_CACERT": p.client.File, "GRPC_CLIENT_TLS_SAN": "envoy"}))
	good := p.clientTLS(p.envoy)
	if err := askRLS(rp.grpc, good); err != nil {
		t.Errorf("client certificate named envoy: %v", err)
	}
	// A certificate named envoy that another CA signed.
	rogue, err := testcerts.NewCA(t.TempDir(), "clients")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := rogue.Client("envoy", "envoy")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := tls.LoadX509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]*tls.Config{"no client certificate": p.clientTLS(), "a certificate named other": p.clientTLS(p.stranger),
		"a certificate named envoy of another CA": p.clientTLS(forged)} {
		if err := askRLS(rp.grpc, tc); err == nil {
			t.Errorf("%s: served", name)
		}
	}
	serial := p.renew(t)
	waitUntil(t, "the renewed certificate", 10*time.Second, func() bool {
		got, _ := servedSerial(rp.grpc, good)
		return got != nil && got.Cmp(serial) == 0
	})
}
