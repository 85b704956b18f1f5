package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ownCA is a CA made in the test, which can issue certificates of any
// validity (testcerts issues only valid ones).
type ownCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newOwnCA(t *testing.T) *ownCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "own CA"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &ownCA{cert: cert, key: key, pool: pool}
}

var ownSerial = big.NewInt(100)

// issue writes a server certificate for dns (and 127.0.0.1) valid from
// notBefore to notAfter, and its key, at certPath and keyPath (each by
// rename), and returns its serial number.
func (ca *ownCA) issue(t *testing.T, certPath, keyPath, dns string, notBefore, notAfter time.Time) *big.Int {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial := new(big.Int).Add(ownSerial, big.NewInt(1))
	ownSerial = serial
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: dns},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{dns}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeByRename(t, keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	writeByRename(t, certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return serial
}

func writeByRename(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A file's time moves with the kernel's tick: make the change seen.
	later := time.Now().Add(time.Duration(ownSerial.Int64()-100) * time.Second)
	if err := os.Chtimes(path+".tmp", later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// servedCert returns the certificate addr serves to a client trusting pool
// (the chain and the name are not checked: an expired one is returned).
func servedCert(addr string) (*x509.Certificate, error) {
	tc := &tls.Config{InsecureSkipVerify: true, ServerName: "gw.example"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// startTLSGateway runs serve with server.tls serving gw.crt and gw.key of
// dir, and returns the gateway's address and serve's logs.
func startTLSGateway(t *testing.T, engine, dir, extra string) (addr string, logs *lockedBuffer) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  tls: {certs: [{cert: gw.crt, key: gw.key}]%s}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
`, extra, up.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, _, _, _, logs := startServeLogged(t, "--engine", engine, "--config", cfg, "--watch=false", "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--log-level", "warn")
	addr, ok := strings.CutPrefix(gw, "https://")
	if !ok {
		t.Fatalf("the gateway says %s, not https://", gw)
	}
	return addr, logs
}

// TestGatewayTLSRefusesCBCSuites: docs/engines.md says the gateway
// listener takes, in TLS 1.2, ECDHE with AEAD ciphers only. A client that
// offers nothing but ECDHE with AES-CBC-SHA (no AEAD) must be refused at
// the handshake, on both engines.
func TestGatewayTLSRefusesCBCSuites(t *testing.T) { forEngines(t, testGatewayTLSRefusesCBCSuites) }

func testGatewayTLSRefusesCBCSuites(t *testing.T, engine string) {
	dir := t.TempDir()
	ca := newOwnCA(t)
	ca.issue(t, filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"), "gw.example", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	addr, _ := startTLSGateway(t, engine, dir, "")
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA} {
		tc := &tls.Config{RootCAs: ca.pool, ServerName: "gw.example", MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
		if err == nil {
			conn.Close()
			t.Errorf("TLS 1.2 with %s (CBC, no AEAD) was accepted", tls.CipherSuiteName(suite))
		}
	}
	// An AEAD suite still is.
	tc := &tls.Config{RootCAs: ca.pool, ServerName: "gw.example", MaxVersion: tls.VersionTLS12,
		CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		t.Fatalf("TLS 1.2 with ECDHE and AES-GCM: %v", err)
	}
	conn.Close()
}

// TestGatewayTLSKeepsCertificateOverExpiredOne: a certificate renewed
// badly (the files rewritten with a pair that matches but expired
// yesterday, as a restored backup would be) is not served in place of the
// valid one, neither on SIGHUP nor when the files are looked at again, and
// the problem is logged.
func TestGatewayTLSKeepsCertificateOverExpiredOne(t *testing.T) {
	forEngines(t, testGatewayTLSKeepsCertificateOverExpiredOne)
}

func testGatewayTLSKeepsCertificateOverExpiredOne(t *testing.T, engine string) {
	dir := t.TempDir()
	ca := newOwnCA(t)
	certPath, keyPath := filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key")
	good := ca.issue(t, certPath, keyPath, "gw.example", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	addr, logs := startTLSGateway(t, engine, dir, "")
	if c, err := servedCert(addr); err != nil || c.SerialNumber.Cmp(good) != 0 {
		t.Fatalf("served %v (%v), want the valid certificate", c, err)
	}
	ca.issue(t, certPath, keyPath, "gw.example", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past SIGHUP and the once-a-second look at the files
	for range 3 {
		c, err := servedCert(addr)
		if err != nil {
			t.Fatalf("a handshake after the expired pair was written: %v", err)
		}
		if c.SerialNumber.Cmp(good) != 0 {
			t.Fatalf("the gateway serves the certificate that expired at %v in place of the valid one", c.NotAfter)
		}
		// The valid certificate still verifies for a client.
		tc := &tls.Config{RootCAs: ca.pool, ServerName: "gw.example"}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
		if err != nil {
			t.Fatalf("a verifying client: %v", err)
		}
		conn.Close()
	}
	if !strings.Contains(logs.String(), "gw.crt") {
		t.Errorf("the expired certificate was not logged:\n%s", logs.String())
	}
}

// TestTLSCertificateThatDoesNotLoadIsLogged: a certificate rewritten with
// the key of another one, on the gateway listener (no SIGHUP: the files
// are looked at again once a second), leaves the last good certificate
// served, and says so in the log: otherwise the operator learns of the
// failed renewal only when the old certificate expires.
func TestTLSCertificateThatDoesNotLoadIsLogged(t *testing.T) {
	dir := t.TempDir()
	ca := newOwnCA(t)
	certPath, keyPath := filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key")
	good := ca.issue(t, certPath, keyPath, "gw.example", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	other := filepath.Join(dir, "other.key")
	ca.issue(t, filepath.Join(dir, "other.crt"), other, "other.example", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	addr, logs := startTLSGateway(t, "fast", dir, "")
	b, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	writeByRename(t, keyPath, b)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		c, err := servedCert(addr)
		if err != nil {
			t.Fatalf("a handshake after a key of another certificate was written: %v", err)
		}
		if c.SerialNumber.Cmp(good) != 0 {
			t.Fatalf("served serial %v, want the last good one %v", c.SerialNumber, good)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "gw.key") {
		t.Errorf("a certificate pair that does not load, looked at for 3 s, was never logged:\n%s", logs.String())
	}
}

// TestGatewayTLSHandshakeFailuresDoNotFloodTheLog: a client that opens
// connection after connection to the TLS listener and sends plaintext
// (each a failed handshake, which costs it nothing) must not write a line
// to the log per connection: lines a peer can cause are held back to one
// a second (internal/app's StdLog), as the edge engine's are.
func TestGatewayTLSHandshakeFailuresDoNotFloodTheLog(t *testing.T) {
	forEngines(t, testGatewayTLSHandshakeFailuresDoNotFloodTheLog)
}

func testGatewayTLSHandshakeFailuresDoNotFloodTheLog(t *testing.T, engine string) {
	dir := t.TempDir()
	ca := newOwnCA(t)
	ca.issue(t, filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"), "gw.example", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	addr, logs := startTLSGateway(t, engine, dir, "")
	const n = 200
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Read(make([]byte, 64)) // the server's alert or close
		c.Close()
	}
	// A valid client is still served.
	if _, err := servedCert(addr); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	lines := strings.Count(logs.String(), "\n")
	if lines > 5 {
		t.Errorf("%d failed handshakes wrote %d lines to the log; the first:\n%s", n, lines, strings.SplitN(logs.String(), "\n", 2)[0])
	}
}

// TestGatewayTLSFollowsTheClientCA: the client CA bundle is a certificate
// file of server.tls like the others: a bundle rewritten to trust another
// CA (one taken away, one added), then SIGHUP, refuses the clients of the
// CA taken away and takes those of the one added, for new connections.
func TestGatewayTLSFollowsTheClientCA(t *testing.T) { forEngines(t, testGatewayTLSFollowsTheClientCA) }

func testGatewayTLSFollowsTheClientCA(t *testing.T, engine string) {
	dir := t.TempDir()
	srv, old, added := newOwnCA(t), newOwnCA(t), newOwnCA(t)
	srv.issue(t, filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"), "gw.example", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	caPath := filepath.Join(dir, "clients.crt")
	writeByRename(t, caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: old.cert.Raw}))
	addr, _ := startTLSGateway(t, engine, dir, ", client_ca: clients.crt")
	handshake := func(ca *ownCA) error {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "caller"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
		if err != nil {
			return err
		}
		tc := &tls.Config{RootCAs: srv.pool, ServerName: "gw.example", NextProtos: []string{"http/1.1"},
			Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
		if err != nil {
			return err
		}
		defer conn.Close()
		// In TLS 1.3 the server's verdict on the client's certificate comes after the client's handshake ends.
		_, _ = conn.Write([]byte("GET / HTTP/1.1\r\nHost: gw.example\r\n\r\n"))
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 16))
		return err
	}
	if err := handshake(old); err != nil {
		t.Fatalf("a client of the client CA: %v", err)
	}
	if err := handshake(added); err == nil {
		t.Fatalf("a client of a CA not in the bundle was served")
	}
	writeByRename(t, caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: added.cert.Raw}))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := handshake(old); err == nil {
		t.Errorf("a client of the CA taken out of the bundle (and SIGHUP) is still served")
	}
	if err := handshake(added); err != nil {
		t.Errorf("a client of the CA put in the bundle (and SIGHUP): %v", err)
	}
}
