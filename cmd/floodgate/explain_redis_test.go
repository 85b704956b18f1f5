package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestExplainPeeksTheCounterServeCharges: floodgate explain --store
// peeks at the very counters floodgate serve charges in the Redis they
// share, also for a key longer than the file's server.memory.max_key_bytes
// (which both count under its SHA-256): a tenant that serve refuses is
// explained refused.
func TestExplainPeeksTheCounterServeCharges(t *testing.T) {
	rs := redistest.Start(t)
	up := replayUpstream(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policy.yaml")
	src := fmt.Sprintf(`version: 1
server:
  store: redis://%s/0
  store_timeout: 2s
  memory: {max_key_bytes: 64}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: per-tenant, algorithm: fixed_window, limit: 1, window: 1h, key: "header:X-Tenant"}
`, rs.Addr, up.URL)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, _, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	for _, tenant := range []string{"short", strings.Repeat("t", 80)} {
		for i, want := range []int{200, 429} {
			req, _ := http.NewRequest("GET", gw+"/x", nil)
			req.Header.Set("X-Tenant", tenant)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("tenant of %d bytes, request %d: %d, want %d", len(tenant), i, resp.StatusCode, want)
			}
		}
		var out, errb bytes.Buffer
		if err := run(context.Background(), []string{"explain", "--config", cfg, "--store", "redis://" + rs.Addr + "/0",
			"--path", "/x", "--header", "X-Tenant: " + tenant, "--json"}, &out, &errb); err != nil {
			t.Fatalf("%v\n%s", err, errb.String())
		}
		var e gateway.Explanation
		if err := json.Unmarshal(out.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Answer.Forwarded || e.Answer.Status != http.StatusTooManyRequests || e.Binding != "per-tenant" {
			t.Errorf("tenant of %d bytes, refused by serve: explained binding %q, answer %+v", len(tenant), e.Binding, e.Answer)
		}
	}
}

// TestExplainTextSaysWhatIsLeft: a request that would be refused for
// costing more than is left is explained with the units left, as its
// RateLimit field and the JSON answer give them, not as none left.
func TestExplainTextSaysWhatIsLeft(t *testing.T) {
	rs := redistest.Start(t)
	up := replayUpstream(t)
	cfg := filepath.Join(t.TempDir(), "policy.yaml")
	src := fmt.Sprintf(`version: 1
server:
  store: redis://%s/0
  store_timeout: 2s
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: per-tenant, algorithm: fixed_window, limit: 3, window: 1h, cost: 2, key: "header:X-Tenant"}
`, rs.Addr, up.URL)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, _, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	req, _ := http.NewRequest("GET", gw+"/x", nil)
	req.Header.Set("X-Tenant", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d, want 200", resp.StatusCode)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"explain", "--config", cfg, "--store", "redis://" + rs.Addr + "/0",
		"--path", "/x", "--header", "X-Tenant: acme"}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "would deny: 1 of 3 left") {
		t.Fatalf("explained:\n%s\nwant the limit said to deny with 1 of 3 left", out.String())
	}
}
