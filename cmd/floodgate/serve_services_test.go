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
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// anyPort is the listen address the tests give serve's listeners: the
// kernel picks a free port as the listener opens, and the test reads where
// it landed with listenedOn. A port picked by the test and listened on later
// can be taken by another test in between.
const anyPort = "127.0.0.1:0"

// What serve prints before " on ADDRESS" for its rate-limit service and
// its check API.
const (
	rlsOn = "Envoy rate-limit service (RLS v3, gRPC)"
	apiOn = "check API"
)

// listenedOn returns the host:port serve said its listener what is on, in
// out (what serve printed): "floodgate: WHAT on [scheme://]HOST:PORT".
func listenedOn(t testing.TB, out, what string) string {
	t.Helper()
	m := regexp.MustCompile(`floodgate: ` + regexp.QuoteMeta(what) + ` on (?:[a-z]+://)?(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("serve did not say where its %s listens:\n%s", what, out)
	}
	return m[1]
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
	grpcAddr, apiAddr := anyPort, anyPort
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
  api_tokens:
    - {name: billing, sha256: %s}
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
`, grpcAddr, apiAddr, config.HashKey("billing-token"), up.URL)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	gw, admin, stop, out := startServe(t, "--config", cfg, "--log-level", "error")
	grpcAddr, apiAddr = listenedOn(t, out.String(), rlsOn), listenedOn(t, out.String(), apiOn)
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
	post := func(token string) *http.Response {
		req, _ := http.NewRequest("POST", "http://"+apiAddr+"/v1/check", strings.NewReader(`{"limit":"global-cap","key":"global"}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The check API shares the gateway's counters: it answers only callers
	// with a token of the file, and asks the engine nothing for others.
	for _, token := range []string{"", "guess"} {
		if resp := post(token); resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("check API with token %q: %d, want 401", token, resp.StatusCode)
		} else {
			resp.Body.Close()
		}
	}
	check := func() (int, string) {
		resp := post("billing-token")
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

	// Every decision is counted once, at the engine, by front end and limit.
	_, _, text := get(t, admin+"/metrics")
	for _, want := range []string{
		`floodgate_decisions_total{front_end="gateway",limit="global-cap",outcome="allowed"} 2`,
		`floodgate_decisions_total{front_end="gateway",limit="global-cap",outcome="denied"} 1`,
		`floodgate_decisions_total{front_end="http_api",limit="global-cap",outcome="allowed"} 3`,
		`floodgate_decisions_total{front_end="http_api",limit="global-cap",outcome="denied"} 1`,
		`floodgate_decisions_total{front_end="rls",limit="messaging.to_number",outcome="allowed"} 2`,
		`floodgate_decisions_total{front_end="rls",limit="messaging.to_number",outcome="denied"} 1`,
		`floodgate_rejections_total{code="429",front_end="http_api",limit="global-cap"} 1`,
		`floodgate_rejections_total{code="401",front_end="http_api",limit=""} 2`,
		`ratelimit_service_rate_limit_total_hits{domain="messaging",key1="to_number"} 3`,
		`ratelimit_service_rate_limit_over_limit{domain="messaging",key1="to_number"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics has no %s", want)
		}
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

// TestServeDegradedByFrontEnd stops the Redis that one floodgate serve
// shares between its gateway, its Envoy rate-limit service and its check
// API: decisions made by the failure policy are counted for each front end.
func TestServeDegradedByFrontEnd(t *testing.T) {
	rs := redistest.Start(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	grpcAddr, apiAddr := anyPort, anyPort
	err := os.WriteFile(filepath.Join(dir, "rls.yaml"), []byte(`domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100, on_failure: allow}
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
  rls_config: [rls.yaml]
  api_listen: %q
  api_auth: none
  store: redis://%s/0
  store_timeout: 200ms
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: cap
    algorithm: fixed_window
    limit: 100
    window: 1h
    key: global
    on_failure: allow
`, grpcAddr, apiAddr, rs.Addr, up.URL)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	gw, admin, _, out := startServe(t, "--config", cfg, "--log-level", "error")
	grpcAddr, apiAddr = listenedOn(t, out.String(), rlsOn), listenedOn(t, out.String(), apiOn)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := rlsv3.NewRateLimitServiceClient(conn)
	each := func() {
		t.Helper()
		if code, _, _ := get(t, gw+"/x"); code != 200 {
			t.Errorf("gateway: %d", code)
		}
		resp, err := http.Post("http://"+apiAddr+"/v1/check", "application/json", strings.NewReader(`{"limit":"cap","key":"global"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("check API: %d", resp.StatusCode)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := rc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("RLS: %v %v", r, err)
		}
	}
	each()
	rs.Kill()
	each()
	_, _, text := get(t, admin+"/metrics")
	for _, fe := range []string{"gateway", "http_api", "rls"} {
		re := regexp.MustCompile(`floodgate_degraded_decisions_total\{front_end="` + fe + `",limit="[^"]+",reason="(deadline|store_error)"\} 1\n`)
		if !re.MatchString(text) {
			t.Errorf("/metrics counts no degraded decision of %s:\n%s", fe, grep(text, "floodgate_degraded"))
		}
		if !strings.Contains(text, `floodgate_decisions_total{front_end="`+fe+`",`) {
			t.Errorf("/metrics counts no decision of %s", fe)
		}
	}
}

// grep returns the lines of text that contain s.
func grep(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
