package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate/floodgate/internal/redistest"
)

// envOf makes a lookup function and an environment list from a map.
func envOf(m map[string]string) (func(string) (string, bool), []string) {
	var list []string
	for k, v := range m {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }, list
}

// rlsProc is one "floodgate rls" running in this process.
type rlsProc struct {
	grpc, http, debug string
	prom              string // the Prometheus address, with USE_PROMETHEUS=true
	stderr            *lockedBuffer
	stop              func() error
}

// startRLS runs floodgate rls with env and waits for its listeners.
func startRLS(t *testing.T, env map[string]string, args ...string) *rlsProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	p := &rlsProc{stderr: &lockedBuffer{}}
	done := make(chan error, 1)
	lookup, list := envOf(env)
	go func() {
		err := rlsMain(ctx, append([]string{}, args...), lookup, list, pw, p.stderr)
		pw.Close()
		done <- err
	}()
	re := regexp.MustCompile(`^floodgate rls: (\S+).* on (\S+)$`)
	found := make(chan struct{})
	want := 3
	if env["USE_PROMETHEUS"] == "true" {
		want = 4
	}
	go func() {
		sc := bufio.NewScanner(pr)
		n := 0
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				switch m[1] {
				case "gRPC":
					p.grpc = m[2]
				case "HTTP":
					p.http = "http://" + m[2]
				case "debug":
					p.debug = "http://" + m[2]
				case "Prometheus":
					p.prom = "http://" + m[2]
				}
				if n++; n == want {
					close(found)
				}
			}
		}
	}()
	select {
	case <-found:
	case err := <-done:
		cancel()
		t.Fatalf("floodgate rls ended early: %v\n%s", err, p.stderr.String())
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("floodgate rls did not start:\n%s", p.stderr.String())
	}
	var once sync.Once
	var stopErr error
	p.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(60 * time.Second):
				stopErr = fmt.Errorf("floodgate rls did not stop")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { _ = p.stop() })
	return p
}

// rlsEnvFor is the environment of a floodgate rls on loopback with free
// ports, reading the descriptor files in dir/ratelimit/config.
func rlsEnvFor(dir string, extra map[string]string) map[string]string {
	env := map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
		"RUNTIME_ROOT": dir, "RUNTIME_SUBDIRECTORY": "ratelimit", "USE_STATSD": "false", "LOG_LEVEL": "info",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// writeRuntime puts files in dir/ratelimit/config.
func writeRuntime(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	cd := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(cd, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(cd, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRLSCommandAnswersAndCountsAsEnvoyproxyRatelimit runs floodgate rls
// as a deployment of envoyproxy/ratelimit would (its variables only, plus
// the compatibility mode), replays the requests whose answers
// envoyproxy/ratelimit gave, then scrapes /metrics and finds its
// statistics with the counts it had.
func TestRLSCommandAnswersAndCountsAsEnvoyproxyRatelimit(t *testing.T) {
	shop, err := os.ReadFile("../../rls/testdata/compat/shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The requests run in one minute, as they did for envoyproxy/ratelimit:
	// start early in one.
	if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 3*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"shop.yaml": string(shop)})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "FLOODGATE_COMPAT": "true",
		"LOCAL_CACHE_SIZE_IN_BYTES": "1000", "USE_DOG_STATSD": "true"}))
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	f, err := os.Open("../../rls/testdata/compat/shop.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.HasPrefix(line, "=>") {
			continue
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal([]byte(line), &req); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.ShouldRateLimit(ctx, &req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	code, body := httpGet(t, p.debug+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	want, err := os.ReadFile("../../rls/testdata/compat/shop.metrics")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		have[l] = true
	}
	for _, l := range strings.Split(string(want), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		if !have[l] {
			t.Errorf("/metrics lacks %s", l)
		}
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "ratelimit_service_rate_limit_") && !strings.Contains(string(want), l+"\n") {
			t.Errorf("/metrics has %s, which envoyproxy/ratelimit did not", l)
		}
	}
	if !strings.Contains(body, "floodgate_decisions_total{") {
		t.Error("/metrics lacks Floodgate's own series")
	}
	// The variables it does not honour were said.
	logs := p.stderr.String()
	for _, w := range []string{`variable=USE_DOG_STATSD`, `variable=LOCAL_CACHE_SIZE_IN_BYTES`} {
		if !strings.Contains(logs, w) {
			t.Errorf("log lacks %s:\n%s", w, logs)
		}
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestRLSCommandEndpoints: /json, /healthcheck and the debug port answer
// as envoyproxy/ratelimit's do.
func TestRLSCommandEndpoints(t *testing.T) {
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "LIMIT_RESPONSE_HEADERS_ENABLED": "true"}))
	post := func(body string) (int, string) {
		resp, err := http.Post(p.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i, want := range []int{200, 200, 429} {
		code, body := post(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`)
		var r rlsv3.RateLimitResponse
		if err := protojson.Unmarshal([]byte(body), &r); code != want || err != nil {
			t.Fatalf("request %d: %d %s (%v), want %d", i+1, code, body, err, want)
		}
		if i == 0 && (r.Statuses[0].LimitRemaining != 1 || len(r.ResponseHeadersToAdd) != 3 || r.ResponseHeadersToAdd[0].Key != "RateLimit-Limit") {
			t.Errorf("first answer %v", &r)
		}
	}
	if code, _ := post(`{"domain":`); code != http.StatusBadRequest {
		t.Errorf("a broken body: %d", code)
	}
	if code, _ := post(`{"domain":"d"}`); code != http.StatusBadRequest {
		t.Errorf("a request without descriptors: %d", code)
	}
	if code, body := httpGet(t, p.http+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck %d %q", code, body)
	}
	if _, body := httpGet(t, p.debug+"/rlconfig"); body != "d.k: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false\n" {
		t.Errorf("/rlconfig %q", body)
	}
	if _, body := httpGet(t, p.debug+"/"); !strings.Contains(body, "/rlconfig: print out the currently loaded configuration") {
		t.Errorf("debug index %q", body)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestRLSCommandHealthFollowsTheConfiguration: with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, the service is unhealthy until
// a domain is loaded.
func TestRLSCommandHealthFollowsTheConfiguration(t *testing.T) {
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}))
	if code, _ := httpGet(t, p.http+"/healthcheck"); code != http.StatusInternalServerError {
		t.Fatalf("/healthcheck without a domain: %d", code)
	}
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\n"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := httpGet(t, p.http+"/healthcheck")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthcheck still %d after a domain was added:\n%s", code, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRLSCommandWaitsForAGoodConfiguration: as envoyproxy/ratelimit, a
// descriptor file that does not load at start is logged and counted
// (config_load_error), and floodgate rls stays up answering every request
// with its error (gRPC Unknown, /json 400) until a version that loads
// arrives, which it then applies; HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
// decides the health check meanwhile. --check still fails.
func TestRLSCommandWaitsForAGoodConfiguration(t *testing.T) {
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n"})
	lookup, list := envOf(rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory"}))
	var out strings.Builder
	err := rlsMain(context.Background(), []string{"--check"}, lookup, list, &out, io.Discard)
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), `a.yaml:4:24: descriptors[0].rate_limit.unit: unknown unit "fortnight"`) {
		t.Fatalf("--check: %v", err)
	}
	for _, healthy := range []string{"false", "true"} {
		p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": healthy}))
		if !strings.Contains(p.stderr.String(), `unknown unit \"fortnight\"`) {
			t.Errorf("the log does not say why:\n%s", p.stderr.String())
		}
		wantHealth := http.StatusOK
		if healthy == "true" {
			wantHealth = http.StatusInternalServerError
		}
		if code, _ := httpGet(t, p.http+"/healthcheck"); code != wantHealth {
			t.Errorf("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=%s: /healthcheck %d, want %d", healthy, code, wantHealth)
		}
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := rlsv3.NewRateLimitServiceClient(conn)
		req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
		ask := func() (*rlsv3.RateLimitResponse, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return c.ShouldRateLimit(ctx, req)
		}
		if _, err := ask(); grpcstatus.Code(err) != codes.Unknown || grpcstatus.Convert(err).Message() != "no rate limit configuration loaded" {
			t.Errorf("without a configuration: %v", err)
		}
		resp, err := http.Post(p.http+"/json", "application/json", strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("/json without a configuration: %d", resp.StatusCode)
		}
		_, metrics := httpGet(t, p.debug+"/metrics")
		for _, l := range []string{"ratelimit_service_config_load_error 1", `ratelimit_service_should_rate_limit_error{err_type="service_error"} 2`} {
			if !strings.Contains(metrics, l+"\n") {
				t.Errorf("/metrics lacks %s", l)
			}
		}

		writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"})
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := ask()
			if err == nil {
				if r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Errorf("the first request: %v", r.GetOverallCode())
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still %v after a good file:\n%s", err, p.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if r, err := ask(); err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("the second request: %v %v", r.GetOverallCode(), err)
		}
		if code, _ := httpGet(t, p.http+"/healthcheck"); code != http.StatusOK {
			t.Errorf("/healthcheck %d once a domain loaded", code)
		}
		_, metrics = httpGet(t, p.debug+"/metrics")
		for _, l := range []string{"ratelimit_service_config_load_error 1", "ratelimit_service_config_load_success 1"} {
			if !strings.Contains(metrics, l+"\n") {
				t.Errorf("/metrics lacks %s", l)
			}
		}
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		// The bad file again for the next run.
		writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n"})
	}
}

// TestRLSCommandOnRedis: REDIS_URL over TCP for most limits and, with
// REDIS_PERSECOND, a second Redis on a Unix socket for the per-second
// ones.
func TestRLSCommandOnRedis(t *testing.T) {
	main := redistest.Start(t)
	second, sock := redistest.StartUnix(t)
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": `domain: d
descriptors:
  - key: fast
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: slow
    rate_limit: {unit: hour, requests_per_unit: 100}
`})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": main.Addr,
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "unix", "REDIS_PERSECOND_URL": sock, "CACHE_KEY_PREFIX": "rl:",
		// A store slow to answer (a loaded machine, the race detector)
		// must not hand the decision to the failure policy.
		"FLOODGATE_STORE_TIMEOUT": "10s"}))
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	keys := func(s *redistest.Server) string {
		t.Helper()
		k, err := s.Do("KEYS", "rl:*")
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	ask := func(key string) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "x"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask("slow"); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("slow: %v", r)
	}
	if keys(main) == "" || keys(second) != "" {
		t.Fatalf("after an hourly limit: main %q, per-second %q", keys(main), keys(second))
	}
	ask("fast")
	if !strings.Contains(keys(second), "d.fast") || strings.Contains(keys(main), "d.fast") {
		t.Fatalf("after a per-second limit: main %q, per-second %q", keys(main), keys(second))
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestRLSCommandCutsSlowBodies: a /json body that stops coming is cut off
// by the service (its read timeout, 10 s), and the connection closed; it
// was held for as long as the client liked, with up to 1 MiB each.
func TestRLSCommandCutsSlowBodies(t *testing.T) {
	t.Parallel() // it waits for a timeout, not on the CPU
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory"}))
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.http, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"domain\":"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	start := time.Now()
	b, err := io.ReadAll(c) // the answer, if any, then the end
	if err != nil {
		t.Fatalf("the connection was not closed (after %v, read %q): %v", time.Since(start), b, err)
	}
}
