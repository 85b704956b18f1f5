package main

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestRLSCommandSharesEnvoyproxyRatelimitCounters: in compatibility mode on
// Redis, floodgate rls counts under envoyproxy/ratelimit's keys, with its
// expiry, so that during a rolling migration both count together. The
// peer keeps a descriptor's hits under
// CACHE_KEY_PREFIX + DOMAIN_KEY_VALUE_ + the window's start in Unix
// seconds (INCRBY of the hits, then EXPIRE of the unit's seconds plus a
// jitter below EXPIRATION_JITTER_MAX_SECONDS): after two hits on
// {client=c1} of domain shop in the minute starting at 1796179020, with
// CACHE_KEY_PREFIX=p:, Redis holds "p:shop_client_c1_1796179020" = "2".
func TestRLSCommandSharesEnvoyproxyRatelimitCounters(t *testing.T) {
	rs := redistest.Start(t)
	for _, jitter := range []string{"0", ""} { // "": the peer's default, 300
		t.Run("jitter="+jitter, func(t *testing.T) {
			if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 5*time.Second {
				time.Sleep(left + 10*time.Millisecond)
			}
			dir := t.TempDir()
			writeRuntime(t, dir, map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"})
			prefix := "p" + jitter + ":"
			env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": rs.Addr, "FLOODGATE_COMPAT": "true", "CACHE_KEY_PREFIX": prefix}
			if jitter != "" {
				env["EXPIRATION_JITTER_MAX_SECONDS"] = jitter
			}
			p := startRLS(t, rlsEnvFor(dir, env))
			conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := rlsv3.NewRateLimitServiceClient(conn)
			ask := func(client string) *rlsv3.RateLimitResponse {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{
					{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: client}}}}})
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			window := time.Now().Unix() / 60 * 60
			key := func(client string) string { return fmt.Sprintf("%sshop_client_%s_%d", prefix, client, window) }

			// What the peer wrote: two hits of c1.
			if _, err := rs.Do("INCRBY", key("c1"), "2"); err != nil {
				t.Fatal(err)
			}
			if _, err := rs.Do("EXPIRE", key("c1"), "60"); err != nil {
				t.Fatal(err)
			}
			if r := ask("c1"); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
				t.Fatalf("the third hit of c1: %v", r)
			}
			if r := ask("c1"); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("the fourth hit of c1: %v", r)
			}
			if v, _ := rs.Do("GET", key("c1")); v != "4" {
				t.Errorf("%s = %q, want 4 (the peer counts over the limit too)", key("c1"), v)
			}

			// What the peer reads of ours: two hits of c2.
			ask("c2")
			if r := ask("c2"); r.Statuses[0].LimitRemaining != 1 {
				t.Fatalf("the second hit of c2: %v", r)
			}
			if v, _ := rs.Do("GET", key("c2")); v != "2" {
				t.Errorf("%s = %q, want 2", key("c2"), v)
			}
			ttl, _ := rs.Do("TTL", key("c2"))
			n, _ := strconv.Atoi(ttl)
			max := 60
			if jitter == "" {
				max = 60 + 299
			}
			if n <= 0 || n > max {
				t.Errorf("TTL of %s: %q, want 1..%d", key("c2"), ttl, max)
			}
			// Nothing under keys of Floodgate's own.
			keys, err := rs.Do("KEYS", prefix+"*")
			if err != nil {
				t.Fatal(err)
			}
			if want := key("c1") + "\n" + key("c2"); keys != want && keys != key("c2")+"\n"+key("c1") {
				t.Errorf("keys %q, want %q", keys, want)
			}
		})
	}
}

// TestRLSCommandPeerKeysPerSecond: with REDIS_PERSECOND, the counters of
// per-second limits are kept on the second Redis, as there, and the
// others on the first.
func TestRLSCommandPeerKeysPerSecond(t *testing.T) {
	main, second := redistest.Start(t), redistest.Start(t)
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: fast\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: slow\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": main.Addr, "FLOODGATE_COMPAT": "true",
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": second.Addr}))
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "fast", Value: "f"}}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "slow", Value: "s"}}}}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 4 || resp.Statuses[1].LimitRemaining != 4 {
		t.Fatalf("%v %v", resp, err)
	}
	hour := time.Now().Unix() / 3600 * 3600
	if k, _ := main.Do("KEYS", "*"); k != fmt.Sprintf("shop_slow_s_%d", hour) && k != fmt.Sprintf("shop_slow_s_%d", hour-3600) {
		t.Errorf("main Redis holds %q", k)
	}
	if k, _ := second.Do("KEYS", "*"); len(k) < len("shop_fast_f_") || k[:len("shop_fast_f_")] != "shop_fast_f_" {
		t.Errorf("per-second Redis holds %q", k)
	}
}
