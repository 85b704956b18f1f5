package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRLSCommandReadsConfigYAMLBesideTheConfigDirectory: with
// RUNTIME_WATCH_ROOT=true, its default, envoyproxy/ratelimit loads every
// file under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY whose path, with '.' for
// '/', starts with RUNTIME_APPDIRECTORY and a dot, so a descriptor file
// mounted alone at ratelimit/config.yaml (a Helm chart's subPath mount)
// is its configuration. Run by hand with RUNTIME_ROOT=R,
// RUNTIME_SUBDIRECTORY=ratelimit and R/ratelimit/config.yaml, the peer
// answered from it (/rlconfig "shop.client: unit=MINUTE
// requests_per_unit=7 ..."); floodgate rls looked for R/ratelimit/config
// only and answered every request "no rate limit configuration loaded"
// (/json 400). A file added beside it later (config.d/other.yaml) is
// followed too.
func TestRLSCommandReadsConfigYAMLBesideTheConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "ratelimit")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "config.yaml"),
		[]byte("domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 7}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory"}))
	resp, err := http.Post(p.http+"/json", "application/json",
		strings.NewReader(`{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"c1"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/json: %d, want 200 from the limits of ratelimit/config.yaml\n%s", resp.StatusCode, p.stderr.String())
	}
	if _, body := httpGet(t, p.debug+"/rlconfig"); !strings.Contains(body, "shop.client: unit=MINUTE requests_per_unit=7") {
		t.Fatalf("/rlconfig: %q", body)
	}

	if err := os.MkdirAll(filepath.Join(sub, "config.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "config.d", "other.yaml"),
		[]byte("domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := httpGet(t, p.debug+"/rlconfig")
		if strings.Contains(body, "other.k: unit=HOUR requests_per_unit=2") && strings.Contains(body, "shop.client") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("config.d/other.yaml not followed: /rlconfig %q", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
