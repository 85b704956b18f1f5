package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestServeDecisionServices runs the gateway, Envoy's rate-limit service
// and the HTTP check API in one floodgate serve process: all three answer,
// and the gateway and the check API count on the same store.
func TestServeDecisionServices(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	defer up.Close()
	dir := t.TempDir()
	grpcAddr, apiAddr := freeAddr(t), freeAddr(t)
	if err := os.MkdirAll(filepath.Join(dir, "rls"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := os.WriteFile(filepath.Join(dir, "rls", "messaging.yaml"), []byte(`domain: messaging
descriptors:
  - key: to_number
    rate_limit: {unit: hour, requests_per_unit: 2}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gw.yaml")
	err = os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:0"
  grpc_listen: %q
  rls_config: [rls]
  api_listen: %q
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: global-cap
    algorithm: fixed_window
    limit: 5
    window: 1h
    key: global
`, grpcAddr, apiAddr, up.URL)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	gw, _, stop, out := startServe(t, "--config", cfg, "--log-level", "error")
	for _, want := range []string{"rate-limit service (RLS v3, gRPC) on " + grpcAddr, "check API on http://" + apiAddr} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve did not print %q:\n%s", want, out.String())
		}
	}

	// Two requests through the gateway, then three through the check API
	// on the same global counter: the sixth unit is refused by both.
	for i := 0; i < 2; i++ {
		if code, _, _ := get(t, gw+"/x"); code != 200 {
			t.Fatalf("gateway request %d: %d", i+1, code)
		}
	}
	check := func() (int, string) {
		resp, err := http.Post("http://"+apiAddr+"/v1/check", "application/json",
			strings.NewReader(`{"limit":"global-cap","key":"global"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = fmt.Fprint(&b, resp.Header.Get("RateLimit"))
		return resp.StatusCode, b.String()
	}
	for i := 0; i < 3; i++ {
		if code, rl := check(); code != 200 {
			t.Fatalf("check %d: %d (%s)", i+1, code, rl)
		}
	}
	if code, rl := check(); code != 429 || !regexp.MustCompile(`"global-cap";r=0`).MatchString(rl) {
		t.Errorf("check after 5 units: %d %q, want 429 with r=0", code, rl)
	}
	if code, _, _ := get(t, gw+"/x"); code != 429 {
		t.Errorf("gateway after 5 units: %d, want 429", code)
	}

	// Envoy's rate-limit service: 2 an hour per number.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := rlsv3.NewRateLimitServiceClient(conn)
	var codes []rlsv3.RateLimitResponse_Code
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := rc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
			Domain: "messaging",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "+15550100"}},
			}},
		})
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		codes = append(codes, resp.GetOverallCode())
	}
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("RLS codes %v, want %v", codes, want)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	// After the shutdown the listeners are closed.
	if c, err := net.DialTimeout("tcp", apiAddr, time.Second); err == nil {
		c.Close()
		t.Errorf("check API still listening after shutdown")
	}
}
