package redisstore

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestTLS talks rediss:// to a real redis-server with a TLS port and a
// certificate made for the test.
func TestTLS(t *testing.T) {
	srv, pool := startTLSRedis(t)
	url := "rediss://" + srv.TLSAddr
	s, err := New(Options{URL: url, Prefix: uniquePrefix(t), TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := ruletest.Rule(t, floodgate.Limit{Name: "tls", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour})
	out := make([]floodgate.Decision, 1)
	hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
	for i, want := range []bool{true, false} {
		if err := s.Decide(context.Background(), hits, false, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed != want {
			t.Fatalf("request %d over TLS: %+v, want allowed=%v", i+1, out[0], want)
		}
	}

	// Without the test CA the server's certificate is refused.
	bad, err := New(Options{URL: url, Prefix: uniquePrefix(t)})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = bad.Decide(ctx, hits, false, out)
		cancel()
		bad.Close()
	}
	if err == nil {
		t.Fatal("connected over TLS to a server whose certificate no root signs")
	}
}

// startTLSRedis starts a server of the test's own that also listens for
// TLS, with a certificate for 127.0.0.1 that the pool's CA signed.
func startTLSRedis(t *testing.T) (*redistest.Server, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	pool, certFile, keyFile, caFile := testCerts(t, dir)
	srv, err := redistest.StartServer(redistest.Config{Dir: dir, TLSArgs: []string{
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
		"--tls-auth-clients", "no",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv, pool
}

// testCerts writes a CA and a server certificate for 127.0.0.1.
func testCerts(t *testing.T, dir string) (pool *x509.CertPool, certFile, keyFile, caFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "floodgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return pool, write("server.crt", "CERTIFICATE", der), write("server.key", "EC PRIVATE KEY", keyDER), write("ca.crt", "CERTIFICATE", caDER)
}

// TestTLSConfigWithPlainScheme: a TLS configuration given with a scheme
// that speaks without TLS is refused, naming the scheme, rather than
// ignored: the operator who set it expects the traffic encrypted. The
// servers are real and plain, so a store that ignored it would open.
func TestTLSConfigWithPlainScheme(t *testing.T) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	_, sock := redistest.StartUnix(t)
	cl := sharedCluster(t)
	for _, url := range []string{
		"redis://" + sharedServer(t).Addr,
		"redis+cluster://" + strings.Join(cl.Addrs(), ","),
		"redis+unix://" + sock,
	} {
		s, err := New(Options{URL: url, Prefix: uniquePrefix(t), TLSConfig: tc})
		if err == nil {
			s.Close()
			t.Errorf("%s with a TLS configuration: opened without TLS", url)
			continue
		}
		scheme, _, _ := strings.Cut(url, "://")
		if msg := err.Error(); !strings.Contains(msg, "a "+scheme+":// URL") || !strings.Contains(msg, "use the rediss form") {
			t.Errorf("%s with a TLS configuration: %v, want the scheme named and rediss offered", url, err)
		}
	}
}
