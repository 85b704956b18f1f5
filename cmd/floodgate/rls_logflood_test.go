package main

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestRLSCompatLogsAFailingRedisOnceASecond: in compatibility mode every
// request counts on envoyproxy/ratelimit's keys first, and while Redis
// refuses them (here full, under maxmemory-policy noeviction: OOM) each
// request is decided by the engine instead. That was logged as a warning
// for every request, so a failing Redis flooded the log at the request
// rate. The warning now passes once a second, saying how many were held
// back, and still names Redis' error.
func TestRLSCompatLogsAFailingRedisOnceASecond(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n"})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": rs.Addr,
		"FLOODGATE_COMPAT": "true", "LOG_LEVEL": "warn"}))
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	ask := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c1"}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	ask()
	if _, err := rs.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	const requests = 300
	start := time.Now()
	for range requests {
		ask()
	}
	took := time.Since(start)
	var lines []string
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(l, "envoyproxy/ratelimit's counters") {
			lines = append(lines, l)
		}
	}
	t.Logf("%d requests in %v with Redis full: %d warnings", requests, took, len(lines))
	if len(lines) == 0 || !strings.Contains(lines[0], "OOM") {
		t.Fatalf("no warning names Redis' refusal (OOM); log:\n%s", p.stderr.String())
	}
	// One a second at most: the first, then one for each second begun.
	if most := 2 + int(took/time.Second); len(lines) > most {
		t.Errorf("%d warnings for %d requests in %v; want at most %d (one a second)", len(lines), requests, took, most)
	}
}
