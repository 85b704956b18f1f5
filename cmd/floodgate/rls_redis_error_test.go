package main

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestRLSCommandCountsRedisErrorsWhileRedisIsDown: envoyproxy/ratelimit
// counts ratelimit.service.call.should_rate_limit.redis_error once for
// every request its Redis fails (src/service/ratelimit.go, the recover of
// a redis.RedisError in ShouldRateLimit), and that series is what alerts
// on a Redis outage watch. floodgate rls answers such requests by the
// limits' failure policies; it must still count each of them as a Redis
// error, in both modes, so that the alert fires as it did. Once Redis is
// back, requests count no more errors.
func TestRLSCommandCountsRedisErrorsWhileRedisIsDown(t *testing.T) {
	for _, compat := range []string{"true", "false"} {
		t.Run("compat="+compat, func(t *testing.T) {
			rs := redistest.Start(t)
			dir := t.TempDir()
			writeRuntime(t, dir, map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"})
			p := startRLS(t, rlsEnvFor(dir, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": rs.Addr,
				"FLOODGATE_COMPAT": compat, "FLOODGATE_STORE_TIMEOUT": "500ms", "LOG_LEVEL": "error"}))
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
			run := &peerScenarioRun{t: t, p: p}
			const series = `ratelimit_service_should_rate_limit_error{err_type="redis_error"}`
			errorsNow := func() float64 { return max(run.metric(series), 0) }
			ask()
			if n := errorsNow(); n != 0 {
				t.Fatalf("with Redis up: %s = %v; want 0", series, n)
			}
			rs.Stop()
			const down = 5
			for range down {
				ask()
			}
			if n := errorsNow(); n != down {
				t.Errorf("after %d requests with Redis down: %s = %v; want %d, as envoyproxy/ratelimit counts", down, series, n, down)
			}
			if err := rs.Restart(); err != nil {
				t.Fatal(err)
			}
			// Once the store answers again, requests add no error.
			waitUntil(t, "requests to stop counting Redis errors", 30*time.Second, func() bool {
				before := errorsNow()
				ask()
				return errorsNow() == before
			})
		})
	}
}
