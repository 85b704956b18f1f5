package app

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/waittest"
)

// TestRLSServesWithoutABusySidePort: a debug port (DEBUG_PORT) or a
// Prometheus address (PROMETHEUS_ADDR) that another process holds does not
// keep floodgate rls from serving: the error is logged, naming the port, and
// the rate-limit service answers on gRPC and on /json, without that port.
//
// This is envoyproxy/ratelimit's behaviour, observed on its build from
// source (github.com/envoyproxy/ratelimit at f2fb157) run on loopback beside
// floodgate rls, each with a plain listener (python's socket.bind, no
// SO_REUSEPORT) holding the port: with DEBUG_PORT busy it logged
// `level=error msg="Failed to open debug HTTP listener: 'listen tcp
// 127.0.0.1:16070: bind: address already in use'"` and answered
// ShouldRateLimit and /healthcheck (200), exiting 0 on SIGTERM; with
// USE_PROMETHEUS=true and PROMETHEUS_ADDR busy it answered as well (the
// error is not even logged there). floodgate rls exited with status 1
// (`rls: listen debug (/rlconfig, /metrics, /debug/pprof/): listen tcp
// 127.0.0.1:26070: bind: address already in use`). Both refuse to start
// when the gRPC or the HTTP port is taken (exit status 1 in both).
func TestRLSServesWithoutABusySidePort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyAddr := busy.Addr().String()
	_, busyPort, _ := net.SplitHostPort(busyAddr)

	for _, tc := range []struct {
		name    string
		env     map[string]string
		logWant string // in the error logged
	}{
		{"debug port busy", map[string]string{"DEBUG_PORT": busyPort}, "debug"},
		{"prometheus address busy", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": busyAddr}, "Prometheus"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			env := sidePortEnv(t, tc.env)
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			lines := &lineWriter{c: make(chan string, 16)}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- runRLS(ctx, env.Settings, func(string) string { return "" }, lines, log, rlsConns{}) }()
			stopped := false
			stop := func() error {
				if stopped {
					return nil
				}
				stopped = true
				cancel()
				return waittest.Returns(t, "floodgate rls stopping", func() error { return <-done })
			}
			defer stop()

			addrs := map[string]string{}
			for addrs["gRPC"] == "" || addrs["HTTP"] == "" {
				select {
				case line := <-lines.c:
					what, on, ok := strings.Cut(strings.TrimPrefix(line, "floodgate rls: "), " on ")
					if ok {
						word, _, _ := strings.Cut(what, " ")
						addrs[word] = on
					}
				case err := <-done:
					stopped = true
					t.Fatalf("floodgate rls did not start with the %s: %v", tc.name, err)
				case <-time.After(waittest.Wait):
					t.Fatalf("floodgate rls did not start within %v", waittest.Wait)
				}
			}
			conn, err := grpc.NewClient(addrs["gRPC"], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := decideGRPC(rlsv3.NewRateLimitServiceClient(conn)); err != nil {
				t.Errorf("ShouldRateLimit with the %s: %v", tc.name, err)
			}
			resp, err := http.Post("http://"+addrs["HTTP"]+"/json", "application/json",
				strings.NewReader(`{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`))
			if err != nil {
				t.Fatalf("/json with the %s: %v", tc.name, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("/json with the %s: %d, want 200", tc.name, resp.StatusCode)
			}
			if err := stop(); err != nil {
				t.Errorf("floodgate rls: %v", err)
			}
			got := logs.String()
			if !strings.Contains(got, "level=ERROR") || !strings.Contains(got, tc.logWant) || !strings.Contains(got, busyAddr) {
				t.Errorf("the %s is not logged as an error naming it and %s; logs:\n%s", tc.name, busyAddr, got)
			}
		})
	}

}

// sidePortEnv reads floodgate rls's settings on loopback with ports of
// the system's choosing, the embedded store and one domain (shop: client,
// 1000 a minute), with set on top.
func sidePortEnv(t *testing.T, set map[string]string) *Envoy {
	t.Helper()
	return shopEnv(t, map[string]string{"BACKEND_TYPE": "memory"}, set)
}

// shopEnv reads floodgate rls's settings on loopback with ports of the
// system's choosing and one domain (shop: client, 1000 a minute) in a
// runtime directory of its own, with base and then set on top.
func shopEnv(t *testing.T, base, set map[string]string) *Envoy {
	t.Helper()
	dir := t.TempDir()
	cd := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(cd, 0o755); err != nil {
		t.Fatal(err)
	}
	shop := "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n"
	if err := os.WriteFile(filepath.Join(cd, "shop.yaml"), []byte(shop), 0o644); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
		"RUNTIME_ROOT": dir, "RUNTIME_SUBDIRECTORY": "ratelimit", "USE_STATSD": "false", "FLOODGATE_HEAP_RESERVE_MIB": "0",
	}
	for _, kv := range []map[string]string{base, set} {
		for k, v := range kv {
			m[k] = v
		}
	}
	env, err := ReadEnvoy(envOf(m))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// syncBuffer is a bytes.Buffer that the service's goroutines may log to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
