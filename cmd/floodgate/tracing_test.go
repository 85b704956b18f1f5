package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// TestTracingExportsSpans: with an OTLP endpoint in the environment, the
// gateway, the check API and the Envoy rate-limit service each export
// spans to an OTLP/HTTP receiver on loopback (flushed at shutdown).
func TestTracingExportsSpans(t *testing.T) {
	collector, spans := otlpReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "floodgate-test")

	dir := t.TempDir()
	grpcAddr, apiAddr := anyPort, anyPort
	if err := os.WriteFile(filepath.Join(dir, "rls.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  grpc_listen: %q
  rls_config: [rls.yaml]
  api_listen: %q
  api_auth: none
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: cap, algorithm: fixed_window, limit: 100, window: 1h, key: global}
`, grpcAddr, apiAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, _, stop, out := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	grpcAddr, apiAddr = listenedOn(t, out.String(), rlsOn), listenedOn(t, out.String(), apiOn)
	get(t, gw+"/x")
	resp, err := http.Post("http://"+apiAddr+"/v1/check", "application/json", strings.NewReader(`{"limit":"cap","key":"k"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	names := spans()
	for _, want := range []string{"gateway GET", "http_api POST", "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} {
		if !names[want] {
			t.Errorf("no span %q reached the OTLP receiver; got %v", want, names)
		}
	}
}

// otlpReceiver starts an OTLP/HTTP receiver on loopback; spans returns
// the names of the spans it received.
func otlpReceiver(t *testing.T) (srv *httptest.Server, spans func() map[string]bool) {
	var mu sync.Mutex
	names := map[string]bool{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" {
			b, _ := io.ReadAll(r.Body)
			var req coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(b, &req); err != nil {
				t.Errorf("OTLP body: %v", err)
			}
			mu.Lock()
			for _, rs := range req.GetResourceSpans() {
				for _, ss := range rs.GetScopeSpans() {
					for _, sp := range ss.GetSpans() {
						names[sp.GetName()] = true
					}
				}
			}
			mu.Unlock()
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(collector.Close)
	return collector, func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(names)
	}
}

// TestRLSTracingExportsSpans: floodgate rls traces as floodgate serve
// does, from the standard OTEL_* variables: its gRPC calls and /json
// reach an OTLP/HTTP receiver on loopback (flushed at shutdown).
func TestRLSTracingExportsSpans(t *testing.T) {
	collector, spans := otlpReceiver(t)
	otel := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_SERVICE_NAME": "floodgate-rls-test"}
	for k, v := range otel { // the exporter reads the process's environment
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"})
	env := rlsEnvFor(dir, otel)
	env["BACKEND_TYPE"] = "memory"
	p := startRLS(t, env)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(p.http+"/json", "application/json", strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	names := spans()
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "rls_json POST"} {
		if !names[want] {
			t.Errorf("no span %q reached the OTLP receiver; got %v", want, names)
		}
	}
}
