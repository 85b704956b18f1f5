package main

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/testcerts"
)

// TestRLSCommandRedisCACertAddsToSystemRoots: REDIS_TLS_CACERT is added to
// the system's roots, as envoyproxy/ratelimit adds it (its
// utils.TlsConfigFromFiles appends the file to x509.SystemCertPool), so a
// Redis whose certificate is of a CA the system trusts is still reached
// with REDIS_TLS_CACERT naming another CA: REDIS_ and REDIS_PERSECOND_
// share the one variable, and one of them may be a managed Redis with a
// public certificate. Here the system's roots are a CA of the test's own
// (SSL_CERT_FILE, read by the process floodgate rls runs in), the Redis
// certificate is of it and REDIS_TLS_CACERT names another CA. Before,
// the file replaced the system's roots: the handshake failed ("certificate
// signed by unknown authority") and nothing was counted in Redis.
func TestRLSCommandRedisCACertAddsToSystemRoots(t *testing.T) {
	system, err := testcerts.NewCA(t.TempDir(), "system")
	if err != nil {
		t.Fatal(err)
	}
	private, err := testcerts.NewCA(t.TempDir(), "private")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pair, err := system.Server("redis")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := redistest.StartServer(redistest.Config{Dir: dir, TLSArgs: []string{
		"--tls-cert-file", pair.Cert, "--tls-key-file", pair.Key, "--tls-ca-cert-file", system.File, "--tls-auth-clients", "no",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Stop)

	rt := t.TempDir()
	writeRuntime(t, rt, map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"})
	_, env := envOf(rlsEnvFor(rt, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": rs.TLSAddr, "REDIS_TLS": "true",
		"REDIS_TLS_CACERT": private.File, "REDIS_TIMEOUT": "2s", "FLOODGATE_HEAP_RESERVE_MIB": "0"}))
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "rls")
	cmd.Env = append(env, runMainEnv+"=1", "PATH="+os.Getenv("PATH"), "SSL_CERT_FILE="+system.File, "SSL_CERT_DIR="+t.TempDir())
	addrs := startShedProc(t, cmd, `^floodgate rls: (\S+) .* on (\S+)$`, "gRPC")

	conn, err := grpc.NewClient(addrs["gRPC"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rs.Do("DBSIZE"); err != nil || n != "1" {
		t.Fatalf("Redis holds %s keys (%v) after a call, want 1: the call was not counted there", n, err)
	}
}
