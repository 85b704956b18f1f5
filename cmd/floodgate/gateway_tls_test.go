package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testcerts"
)

// gatewayPKI is a server CA with a certificate for a.example and one for
// b.example and *.wild.example, a client CA with a client certificate,
// and an upstream's own CA with a certificate for upstream.internal.
type gatewayPKI struct {
	dir              string
	server, clients  *testcerts.CA
	a, b, caller, gw testcerts.Pair
	upstream         *testcerts.CA
	upstreamPair     testcerts.Pair
}

func newGatewayPKI(t *testing.T) *gatewayPKI {
	t.Helper()
	p := &gatewayPKI{dir: t.TempDir()}
	must := func(pair testcerts.Pair, err error) testcerts.Pair {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return pair
	}
	var err error
	if p.server, err = testcerts.NewCA(p.dir, "server"); err != nil {
		t.Fatal(err)
	}
	if p.clients, err = testcerts.NewCA(p.dir, "clients"); err != nil {
		t.Fatal(err)
	}
	if p.upstream, err = testcerts.NewCA(p.dir, "upstream"); err != nil {
		t.Fatal(err)
	}
	p.a = must(p.server.ServerFor("a", "a.example"))
	p.b = must(p.server.ServerFor("b", "b.example", "*.wild.example"))
	p.caller = must(p.clients.Client("caller", "caller"))
	p.gw = must(p.clients.Client("gateway", "gateway"))
	p.upstreamPair = must(p.upstream.ServerFor("upstream.internal", "upstream.internal"))
	return p
}

// served returns the certificate the gateway at addr serves to a client
// asking for sni ("" asks for none).
func (p *gatewayPKI) served(addr, sni string) (*x509.Certificate, error) {
	tc := &tls.Config{RootCAs: p.server.Pool, ServerName: sni, InsecureSkipVerify: sni == ""}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// client returns an HTTPS client of the gateway asking for a.example:
// HTTP/2 when h2, else HTTP/1.1 on a new connection each request.
func (p *gatewayPKI) client(h2 bool, certs ...tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: p.server.Pool, ServerName: "a.example", Certificates: certs}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}
	if !h2 {
		tc.NextProtos = []string{"http/1.1"}
		tr.DisableKeepAlives = true
		tr.ForceAttemptHTTP2 = false
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

// TestGatewayTLS runs floodgate serve with server.tls on both engines: a
// client gets the certificate of the name it asks for (exact, wildcard,
// none: the first); HTTP/2 by ALPN and HTTP/1.1 are served and limited
// per request; the upstream is told https; a route reaches an https
// upstream of a private CA with a client certificate and a server name;
// the certificate renewed under load (with SIGHUP) fails no request; with
// a client CA a client without a certificate is refused at the handshake;
// and server.upstream.tls reaches an https upstream as a route's
// upstream_tls does.
func TestGatewayTLS(t *testing.T) { forEngines(t, testGatewayTLS) }

func testGatewayTLS(t *testing.T, engine string) {
	p := newGatewayPKI(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("X-Forwarded-Proto"))
	}))
	defer plain.Close()
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	upCert, err := tls.LoadX509KeyPair(p.upstreamPair.Cert, p.upstreamPair.Key)
	if err != nil {
		t.Fatal(err)
	}
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{upCert}, ClientCAs: p.clients.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	secure.StartTLS()
	defer secure.Close()

	cfg := filepath.Join(p.dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  tls:
    certs: [{cert: a.crt, key: a.key}, {cert: b.crt, key: b.key}]
routes:
  - {name: limited, match: {paths: ["/limited"]}, upstream: %s}
  - name: secure
    match: {paths: ["/secure"]}
    upstream: %s
    upstream_tls: {ca: upstream-ca.crt, cert: gateway.crt, key: gateway.key, server_name: upstream.internal}
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: five, algorithm: fixed_window, limit: 5, window: 1h, match: {routes: [limited]}}
`, plain.URL, secure.URL, plain.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, _, stop, _ := startServe(t, "--engine", engine, "--config", cfg, "--watch=false", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr, ok := strings.CutPrefix(gw, "https://")
	if !ok {
		t.Fatalf("the gateway says %s, not https://", gw)
	}

	for sni, want := range map[string]string{"a.example": "a.example", "b.example": "b.example", "x.wild.example": "b.example", "": "a.example"} {
		c, err := p.served(addr, sni)
		if err != nil || len(c.DNSNames) == 0 || c.DNSNames[0] != want {
			t.Errorf("SNI %q: served %v (%v), want the certificate of %s", sni, c.DNSNames, err, want)
		}
	}

	h2, h1 := p.client(true), p.client(false)
	var codes []int
	for range 8 {
		resp, err := h2.Get(gw + "/limited")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("HTTP/%d.%d, want HTTP/2 by ALPN", resp.ProtoMajor, resp.ProtoMinor)
		}
		if resp.StatusCode == 200 && string(body) != "https" {
			t.Errorf("the upstream was told X-Forwarded-Proto %q", body)
		}
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 200 200 429 429 429]" {
		t.Errorf("HTTP/2 over TLS against 5 an hour: %v", codes)
	}
	resp, err := h1.Get(gw + "/limited")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode != 429 {
		t.Errorf("HTTP/1.1 over TLS after the HTTP/2 requests: HTTP/%d %d, want HTTP/1 429", resp.ProtoMajor, resp.StatusCode)
	}
	resp, err = h1.Get(gw + "/secure")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "gateway" {
		t.Errorf("https upstream of a private CA: %d %q, want 200 and the gateway's client certificate", resp.StatusCode, body)
	}

	// The certificate renewed while 300 requests come, half of them each
	// on a new connection (a handshake): none fails.
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := h2
			if w%2 == 1 {
				c = h1
			}
			for sent.Add(1) <= 300 {
				resp, err := c.Get(gw + "/load")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	waitUntil(t, "some requests", 20*time.Second, func() bool { return sent.Load() > 60 })
	renewed, err := p.server.ServerFor("a", "a.example")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(renewed.Cert, renewed.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the renewed certificate", 10*time.Second, func() bool {
		c, err := p.served(addr, "a.example")
		return err == nil && c.SerialNumber.Cmp(pair.Leaf.SerialNumber) == 0
	})
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of 300 requests failed while the certificate was renewed; the first: %v", n, firstErr.Load())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// With a client CA, a client certificate is required.
	mcfg := filepath.Join(p.dir, "mtls.yaml")
	if err := os.WriteFile(mcfg, []byte(fmt.Sprintf(`version: 1
server:
  tls: {certs: [{cert: a.crt, key: a.key}], client_ca: clients-ca.crt, min_version: "1.3"}
  upstream:
    tls: {ca: upstream-ca.crt, cert: gateway.crt, key: gateway.key, server_name: upstream.internal}
routes:
  - {name: secure, match: {paths: ["/secure"]}, upstream: %s}
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
`, secure.URL, plain.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, _, _, _ = startServe(t, "--engine", engine, "--config", mcfg, "--watch=false", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	caller, err := tls.LoadX509KeyPair(p.caller.Cert, p.caller.Key)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*http.Client{p.client(true), p.client(false)} {
		if resp, err := c.Get(gw + "/x"); err == nil {
			resp.Body.Close()
			t.Errorf("a client without a certificate was served: %d", resp.StatusCode)
		}
	}
	for _, c := range []*http.Client{p.client(true, caller), p.client(false, caller)} {
		resp, err := c.Get(gw + "/x")
		if err != nil {
			t.Fatalf("a client with a certificate of the client CA: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS.Version != tls.VersionTLS13 {
			t.Errorf("a client with a certificate of the client CA: %d, TLS %x", resp.StatusCode, resp.TLS.Version)
		}
	}
	// server.upstream.tls reaches the https upstream of every route.
	resp, err = p.client(false, caller).Get(gw + "/secure")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "gateway" {
		t.Errorf("https upstream through server.upstream.tls: %d %q", resp.StatusCode, body)
	}
}

// TestGatewayTLSPastMaxConnections: past server.max_connections a TLS
// client is refused in TLS (a fatal internal_error alert), which it can
// report, not with a plaintext 503 it takes for a broken handshake; the
// connections within the cap complete their handshakes.
func TestGatewayTLSPastMaxConnections(t *testing.T) {
	forEngines(t, testGatewayTLSPastMaxConnections)
}

func testGatewayTLSPastMaxConnections(t *testing.T, engine string) {
	p := newGatewayPKI(t)
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	cfg := filepath.Join(p.dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  max_connections: 2
  tls: {certs: [{cert: a.crt, key: a.key}]}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
`, up.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--watch=false", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr := strings.TrimPrefix(gw, "https://")
	dial := func() (*tls.Conn, error) {
		tc := &tls.Config{RootCAs: p.server.Pool, ServerName: "a.example"}
		return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	}
	// Two connections take the cap.
	for range 2 {
		c, err := dial()
		if err != nil {
			t.Fatalf("a connection within the cap: %v", err)
		}
		defer c.Close()
	}
	waitUntil(t, "two open connections", 10*time.Second, func() bool {
		_, _, text := get(t, admin+"/metrics")
		return strings.Contains(text, "floodgate_connections_open 2\n")
	})
	for i := range 5 {
		c, err := dial()
		if err == nil {
			c.Close()
			t.Fatalf("connection %d past the cap of 2 completed its handshake", i+3)
		}
		if !strings.Contains(err.Error(), "remote error: tls: internal error") {
			t.Errorf("connection %d past the cap: %v, want the server's internal_error alert", i+3, err)
		}
	}
	_, _, text := get(t, admin+"/metrics")
	if !strings.Contains(text, "floodgate_connections_shed_total{listener=\"gateway\"} 5\n") {
		t.Errorf("want 5 connections shed in /metrics:\n%s", grepLines(text, "floodgate_connections_"))
	}
}
