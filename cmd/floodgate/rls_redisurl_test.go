package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/testcerts"
)

// TestRLSCommandRedisURLWithAuthAndTLS: a REDIS_URL given as a redis://
// URL, with REDIS_AUTH and with REDIS_TLS, as envoyproxy/ratelimit's
// deployments may have it. The peer's Redis client takes the URL in place
// of host:port and applies REDIS_AUTH and REDIS_TLS to it: run by hand on
// a Redis with "requirepass" and a TLS port, envoyproxy/ratelimit served
// and counted under its keys with REDIS_URL=redis://127.0.0.1:PORT and
// REDIS_AUTH, and over TLS with REDIS_TLS=true and REDIS_TLS_CACERT.
// floodgate rls dropped REDIS_AUTH (it did not start: "NOAUTH") and
// refused REDIS_TLS ("REDIS_URL is a redis:// URL, which speaks without
// TLS"). Both must start and count where the peer counts.
func TestRLSCommandRedisURLWithAuthAndTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "redis")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Server("redis")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := redistest.StartServer(redistest.Config{Dir: dir, TLSArgs: []string{
		"--tls-cert-file", pair.Cert, "--tls-key-file", pair.Key, "--tls-ca-cert-file", ca.File, "--tls-auth-clients", "no",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Stop)
	const pass = "s3cret"
	requirePass(t, rs, pass)

	rt := t.TempDir()
	writeRuntime(t, rt, map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"})
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"auth", map[string]string{"REDIS_URL": "redis://" + rs.Addr, "REDIS_AUTH": pass}},
		{"auth+tls", map[string]string{"REDIS_URL": "redis://" + rs.TLSAddr, "REDIS_AUTH": pass, "REDIS_TLS": "true", "REDIS_TLS_CACERT": ca.File}},
		{"url-credentials+tls", map[string]string{"REDIS_URL": "redis://:" + pass + "@" + rs.TLSAddr + "/0", "REDIS_TLS": "true", "REDIS_TLS_CACERT": ca.File}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := authDo(rs.Addr, pass, "FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "FLOODGATE_COMPAT": "true", "EXPIRATION_JITTER_MAX_SECONDS": "0"}
			for k, v := range c.env {
				env[k] = v
			}
			p := startRLS(t, rlsEnvFor(rt, env))
			defer p.stop()
			conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rlsv3.NewRateLimitServiceClient(conn)
			// Both calls in one hour: none starts in an hour's last 5 s.
			if left := 3600 - time.Now().Unix()%3600; left <= 5 {
				time.Sleep(time.Duration(left+1) * time.Second)
			}
			hour := time.Now().Unix() / 3600 * 3600
			for want := uint32(4); want >= 3; want-- {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{
					{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c1"}}}}})
				cancel()
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != want {
					t.Fatalf("%v %v, want OK with %d left", resp, err, want)
				}
			}
			// Counted in Redis, under envoyproxy/ratelimit's keys, not by
			// the local fallback: the two calls' hours (the hour may turn
			// between them).
			total := 0
			for _, h := range []int64{hour, hour + 3600} {
				key := fmt.Sprintf("shop_client_c1_%d", h)
				v, err := authDo(rs.Addr, pass, "INCRBY", key, "0")
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				n, err := strconv.Atoi(strings.TrimPrefix(v, ":"))
				if err != nil {
					t.Fatalf("%s = %q", key, v)
				}
				total += n
			}
			if total != 2 {
				t.Errorf("counted %d in Redis under shop_client_c1_<hour>, want 2", total)
			}
		})
	}
}
