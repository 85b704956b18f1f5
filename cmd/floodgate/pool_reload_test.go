package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolHealthOutlivesAReload: a target a pool took out (passively, for
// failing requests, or by its active health check) stays out across a
// reload of the policy file that leaves the route as it was, such as one
// changing a limit or a ConfigMap flapping between two versions. A reload
// is no pass of the health check: config.Health says a target taken out
// comes back only after its eject time, or after healthy passes in a row.
func TestPoolHealthOutlivesAReload(t *testing.T) {
	for _, tc := range []struct {
		name, health string
		// slowCheck holds the failing target's health answer back (a
		// hung target), so that a new pool's first check takes that long.
		slowCheck time.Duration
	}{
		{name: "passive", health: "{failures: 1, eject: 1h}"},
		{name: "active", health: "{path: /healthz, interval: 1h, timeout: 3s, unhealthy: 1, healthy: 1, failures: 0}", slowCheck: 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "good")
			}))
			defer good.Close()
			var sick atomic.Int64
			failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/healthz" {
					select {
					case <-time.After(tc.slowCheck):
					case <-r.Context().Done():
					}
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				sick.Add(1)
				w.WriteHeader(http.StatusInternalServerError)
			}))
			defer failing.Close()

			dir := t.TempDir()
			cfg := filepath.Join(dir, "gw.yaml")
			write := func(burst int) {
				t.Helper()
				src := fmt.Sprintf(`version: 1
routes:
  - name: pool
    match: {paths: ["/**"]}
    upstreams: [%q, %q]
    health: %s
limits:
  - {name: hourly, rate: 1000, per: 1h, burst: %d, key: global}
`, good.URL, failing.URL, tc.health, burst)
				if err := os.WriteFile(cfg+".tmp", []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(cfg+".tmp", cfg); err != nil {
					t.Fatal(err)
				}
			}
			write(1000)
			gw, _, stop, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")

			// The failing target taken out.
			deadline := time.Now().Add(10 * time.Second)
			for {
				before := sick.Load()
				for range 6 {
					get(t, gw+"/x")
				}
				if sick.Load() == before {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the failing target was never taken out")
				}
				time.Sleep(50 * time.Millisecond)
			}

			// A reload that changes a limit, not the route.
			write(999)
			sickBefore := sick.Load()
			deadline = time.Now().Add(10 * time.Second)
			for {
				_, h, _ := get(t, gw+"/x")
				if strings.Contains(h.Get("RateLimit-Policy"), `q=999`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the reload never took effect")
				}
				time.Sleep(10 * time.Millisecond)
			}
			for range 10 {
				get(t, gw+"/x")
			}
			if n := sick.Load() - sickBefore; n > 0 {
				t.Errorf("after a reload that left the pool as it was, %d requests went to the target it had taken out", n)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
