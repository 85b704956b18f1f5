package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestServeRateLimitServiceFollowsHeaders: server.headers shapes the
// fields of every answer floodgate serve refuses on a limit, its gateway's
// 429s and its Envoy rate-limit service's OVER_LIMIT alike: the legacy
// X-RateLimit fields and the header naming the binding limit.
func TestServeRateLimitServiceFollowsHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer up.Close()
	dir := t.TempDir()
	err := os.WriteFile(filepath.Join(dir, "rls.yaml"), []byte(`domain: messaging
descriptors:
  - key: to_number
    rate_limit: {unit: hour, requests_per_unit: 1}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gw.yaml")
	policy := func(headers string) []byte {
		return []byte(fmt.Sprintf(`version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:0"
  grpc_listen: %q
  rls_config: [rls.yaml]
  headers: %s
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: global-cap, algorithm: fixed_window, limit: 1, window: 1h, key: global}
`, anyPort, headers, up.URL))
	}
	err = os.WriteFile(cfg, policy("{x_ratelimit: true, binding_limit: X-Binding-Limit}"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	gw, _, stop, out := startServe(t, "--config", cfg, "--log-level", "error")
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	wanted := []string{"X-Binding-Limit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After", "Ratelimit", "Ratelimit-Policy"}

	// The gateway's refusal.
	get(t, gw+"/x")
	code, hdr, _ := get(t, gw+"/x")
	if code != http.StatusTooManyRequests {
		t.Fatalf("gateway: %d, want 429", code)
	}
	for _, name := range wanted {
		if hdr.Get(name) == "" {
			t.Errorf("gateway's 429 has no %s: %v", name, hdr)
		}
	}
	if got := hdr.Get("X-Binding-Limit"); got != "global-cap" {
		t.Errorf("gateway's X-Binding-Limit %q, want global-cap", got)
	}

	// The rate-limit service's.
	conn, err := grpc.NewClient(listenedOn(t, out.String(), rlsOn), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := rlsv3.NewRateLimitServiceClient(conn)
	var resp *rlsv3.RateLimitResponse
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err = rc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "messaging",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "+15550100"}}}}})
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("rate-limit service: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	got := http.Header{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got.Add(h.GetKey(), h.GetValue())
	}
	for _, name := range wanted {
		if got.Get(name) == "" {
			t.Errorf("rate-limit service's OVER_LIMIT has no %s: %v", name, got)
		}
	}
	if v := got.Get("X-Binding-Limit"); v != "messaging.to_number" {
		t.Errorf("rate-limit service's X-Binding-Limit %q, want messaging.to_number", v)
	}

	// A reload that turns the legacy fields and the binding limit's
	// field off: the gateway's answers and the service's both follow it.
	if err := os.WriteFile(cfg, policy("{x_ratelimit: false}"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the gateway's 429 without X-RateLimit-Limit", 30*time.Second, func() bool {
		code, hdr, _ := get(t, gw+"/x")
		return code == http.StatusTooManyRequests && hdr.Get("X-Ratelimit-Limit") == "" && hdr.Get("Ratelimit") != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	resp, err = rc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "messaging",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "+15550100"}}}}})
	cancel()
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after the reload: %v %v, want OVER_LIMIT", resp.GetOverallCode(), err)
	}
	got = http.Header{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got.Add(h.GetKey(), h.GetValue())
	}
	for _, name := range []string{"X-Binding-Limit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
		if got.Get(name) != "" {
			t.Errorf("rate-limit service's OVER_LIMIT after a reload that turned it off still has %s: %v", name, got)
		}
	}
	if got.Get("Ratelimit") == "" || got.Get("Retry-After") == "" {
		t.Errorf("rate-limit service's OVER_LIMIT after the reload lost its RateLimit fields: %v", got)
	}
}
