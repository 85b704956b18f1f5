package rls

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
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

const basic = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: api
    rate_limit: {unit: second, requests_per_unit: 4, algorithm: token_bucket, burst: 8}
`

func TestHitsAddendIsTheCost(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{})
	r := askN(t, c, "d", 4, desc("user", "u"))
	if r.OverallCode != ok || r.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("cost 4: %v", r)
	}
	if r = askN(t, c, "d", 7, desc("user", "u")); r.OverallCode != over || r.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("cost 7 of 6 left: %v (a denial takes nothing)", r)
	}
	if r = askN(t, c, "d", 6, desc("user", "u")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("cost 6 of 6 left: %v", r)
	}
	// A cost above the capacity is over the limit at once, with no
	// Retry-After earlier than the window.
	r = askN(t, c, "d", 11, desc("user", "v"))
	if r.OverallCode != over {
		t.Fatalf("cost 11 of 10: %v", r)
	}
	if r = ask(t, c, "d", desc("user", "v")); r.Statuses[0].LimitRemaining != 9 {
		t.Fatalf("the impossible request charged: %v", r)
	}
	// Per-descriptor hits_addend overrides the request's.
	d := desc("user", "w")
	d.HitsAddend = wrapperspb.UInt64(3)
	if r = askN(t, c, "d", 1, d, desc("user", "x")); r.Statuses[0].LimitRemaining != 7 || r.Statuses[1].LimitRemaining != 9 {
		t.Fatalf("per-descriptor cost: %v", r)
	}
}

func TestTokenBucketExtensionAndHeaders(t *testing.T) {
	clock := newClock()
	c, _ := startService(t, mustParse(t, basic), clock, Options{})
	for i := 1; i <= 8; i++ {
		if r := ask(t, c, "d", desc("api", "k")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != uint32(8-i) {
			t.Fatalf("burst request %d: %v", i, r)
		}
	}
	r := ask(t, c, "d", desc("api", "k"))
	if r.OverallCode != over {
		t.Fatalf("9th: %v", r)
	}
	// 4 per second: the next token comes in 250ms.
	if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 250*time.Millisecond {
		t.Errorf("duration_until_reset %s, want 250ms (the retry wait)", got)
	}
	if got := header(r, "Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1 (rounded up)", got)
	}
	if got := header(r, "RateLimit-Policy"); got != `"d.api";q=8;w=2` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	clock.advance(250 * time.Millisecond)
	if r := ask(t, c, "d", desc("api", "k")); r.OverallCode != ok {
		t.Fatalf("after 250ms: %v", r)
	}
}

func TestLimitOverride(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{})
	d := desc("user", "o")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
	for i := 1; i <= 2; i++ {
		r := ask(t, c, "d", d)
		st := r.Statuses[0]
		if r.OverallCode != ok || st.CurrentLimit.GetRequestsPerUnit() != 2 ||
			st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || st.LimitRemaining != uint32(2-i) {
			t.Fatalf("override request %d: %v", i, r)
		}
	}
	if r := ask(t, c, "d", d); r.OverallCode != over {
		t.Fatalf("override 3rd: %v", r)
	}
	// The configured limit of the same descriptor is untouched.
	if r := ask(t, c, "d", desc("user", "o")); r.Statuses[0].LimitRemaining != 9 {
		t.Fatalf("configured limit: %v", r)
	}
	// An override also applies to a descriptor the file does not know.
	u := desc("unknown", "x")
	u.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	ask(t, c, "d", u)
	if r := ask(t, c, "d", u); r.OverallCode != over || r.Statuses[0].CurrentLimit.GetName() != "d.unknown_x" {
		t.Fatalf("override without configuration: %v", r)
	}
}

func TestInvalidRequests(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{})
	ctx := context.Background()
	neg := desc("user", "n")
	neg.IsNegativeHits = true
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"no domain":      {Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "u")}},
		"no descriptors": {Domain: "d"},
		"negative hits":  {Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{neg, desc("user", "n")}},
	} {
		_, err := c.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if r := ask(t, c, "d", desc("user", "n")); r.Statuses[0].LimitRemaining != 9 {
		t.Fatalf("an invalid request charged: %v", r)
	}
	// A descriptor with no entries, or with an empty key, matches nothing:
	// it is OK without a limit, as envoyproxy/ratelimit answers.
	r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*rlv3.RateLimitDescriptor{{}, desc("", "v"), desc("user", "n")}})
	if err != nil || r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit != nil ||
		r.Statuses[2].LimitRemaining != 8 {
		t.Fatalf("descriptors without entries or keys: %v, %v", r, err)
	}
}

func TestReloadKeepsUnchangedCounters(t *testing.T) {
	c, svc := startService(t, mustParse(t, basic), newClock(), Options{})
	ask(t, c, "d", desc("user", "r"))
	svc.SetConfig(mustParse(t, basic+"  - key: extra\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"))
	if r := ask(t, c, "d", desc("user", "r")); r.Statuses[0].LimitRemaining != 8 {
		t.Fatalf("after reload: %v, want the count kept", r)
	}
	if r := ask(t, c, "d", desc("extra", "e")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("new limit: %v", r)
	}
}

func TestHealthAndGracefulStop(t *testing.T) {
	st, _ := memstore.New(memstore.Options{})
	defer st.Close()
	srv, err := NewServer(New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{}), ServerOptions{GracePeriod: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addr, cancel, done := start(t, srv)
	conn := dial(t, addr)
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	for _, svc := range []string{"", ServiceName} {
		h, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, h, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after stop: %v", err)
	}
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx,
		&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "u")}}); err == nil {
		t.Fatal("a stopped server answered")
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	st, _ := memstore.New(memstore.Options{})
	defer st.Close()
	if _, err := NewServer(New(limiter.New(st, limiter.Options{}), nil, Options{}), ServerOptions{TLSCertFile: certFile}); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
	srv, err := NewServer(New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{}),
		ServerOptions{TLSCertFile: certFile, TLSKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	addr, cancel, done := start(t, srv)
	defer func() { cancel(); <-done }()
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if r := ask(t, rlsv3.NewRateLimitServiceClient(conn), "d", desc("user", "tls")); r.Statuses[0].LimitRemaining != 9 {
		t.Fatalf("over TLS: %v", r)
	}
	// A plaintext client cannot talk to it.
	plain := dial(t, addr)
	defer plain.Close()
	pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer pcancel()
	if _, err := rlsv3.NewRateLimitServiceClient(plain).ShouldRateLimit(pctx,
		&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "u")}}); err == nil {
		t.Fatal("plaintext call to a TLS server succeeded")
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "floodgate test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestLegacyHeaders(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{Fields: fields.Options{Legacy: true}})
	for range 10 {
		ask(t, c, "d", desc("user", "legacy"))
	}
	r := ask(t, c, "d", desc("user", "legacy"))
	want := map[string]string{
		"RateLimit-Policy": `"d.user";q=10;w=60`, "RateLimit": `"d.user";r=0;t=50`, "Retry-After": "50",
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "50",
	}
	if len(r.ResponseHeadersToAdd) != len(want) {
		t.Fatalf("headers %v", r.ResponseHeadersToAdd)
	}
	for k, v := range want {
		if got := header(r, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}
