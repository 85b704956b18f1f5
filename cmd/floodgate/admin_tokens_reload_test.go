package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAdminTokensFollowReloads takes an admin token out of the policy file
// and puts another in, as an operator does with a token that leaked (and
// as the chart does without rolling the pods), then reloads with SIGHUP:
// the token taken out is refused at once on every route that takes one
// (the admin API, the dashboard's data, explain), and the new one works.
func TestAdminTokensFollowReloads(t *testing.T) {
	dir := t.TempDir()
	cfg := consoleConfig(t, dir, "", "  - {name: basic, rate: 5}")
	p := startProc(t, "--config", cfg, "--watch=false")
	if code := call(t, "GET", p.admin+"/api/v1/keys", "ops-token", nil, nil); code != 200 {
		t.Fatalf("before the reload, the ops token: %d", code)
	}
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	leaked := "{name: ops, sha256: \"" + sha256Hex("ops-token") + "\"}"
	if !strings.Contains(string(b), leaked) {
		t.Fatalf("the file holds no %s:\n%s", leaked, b)
	}
	next := strings.Replace(string(b), leaked, "{name: ops2, sha256: \""+sha256Hex("ops-token-2")+"\"}", 1)
	tmp := filepath.Join(dir, "next.yaml")
	if err := os.WriteFile(tmp, []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reload", 20*time.Second, func() bool { return strings.Contains(p.out.String(), "msg=reloaded") })
	for _, c := range []struct{ method, path, token string }{
		{"GET", "/api/v1/keys", "ops-token"},
		{"GET", "/ui/api/overview", "ops-token"},
		{"POST", "/v1/explain", "ops-token"},
	} {
		var body any
		if c.method == "POST" {
			body = map[string]any{"method": "GET", "path": "/"}
		}
		if code, data := rawCall(t, c.method, p.admin+c.path, c.token, body); code != 401 {
			t.Errorf("%s %s with the token the reload took out: %d, want 401: %.80s", c.method, c.path, code, data)
		}
	}
	if code, data := rawCall(t, "GET", p.admin+"/api/v1/keys", "ops-token-2", nil); code != 200 {
		t.Errorf("GET /api/v1/keys with the token the reload put in: %d, want 200: %.80s", code, data)
	}
	if code, data := rawCall(t, "GET", p.admin+"/api/v1/keys", "viewer-token", nil); code != 200 {
		t.Errorf("GET /api/v1/keys with the token the reload kept: %d, want 200: %.80s", code, data)
	}
}
