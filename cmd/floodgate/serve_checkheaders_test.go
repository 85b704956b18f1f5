package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestServeCheckAPIFollowsHeaders: server.headers shapes the fields of the
// check API's answers as it shapes the gateway's: a check refused on a
// limit carries the legacy X-RateLimit fields and the header naming the
// binding limit the gateway's 429 carries, and a reload that turns off
// the legacy fields and the RateLimit fields reaches both.
func TestServeCheckAPIFollowsHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	policy := func(headers string) []byte {
		return []byte(fmt.Sprintf(`version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:0"
  api_listen: "127.0.0.1:0"
  api_auth: none
  headers: %s
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: global-cap, algorithm: fixed_window, limit: 1, window: 1h, key: global}
`, headers, up.URL))
	}
	if err := os.WriteFile(cfg, policy("{x_ratelimit: true, binding_limit: X-Binding-Limit}"), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, _, stop, out := startServe(t, "--config", cfg, "--log-level", "error")
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	api := "http://" + listenedOn(t, out.String(), apiOn) + "/v1/check"
	check := `{"limit": "global-cap", "key": "global"}`
	legacy := []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
	wanted := append([]string{"X-Binding-Limit", "Retry-After", "Ratelimit", "Ratelimit-Policy"}, legacy...)

	get(t, gw+"/x")
	code, gwHdr, _ := get(t, gw+"/x")
	if code != http.StatusTooManyRequests {
		t.Fatalf("gateway: %d, want 429", code)
	}
	post(t, http.DefaultClient, api, check)
	code, apiHdr, body := post(t, http.DefaultClient, api, check)
	if code != http.StatusTooManyRequests {
		t.Fatalf("check API: %d %s, want 429", code, body)
	}
	for _, name := range wanted {
		if gwHdr.Get(name) == "" {
			t.Errorf("gateway's 429 has no %s: %v", name, gwHdr)
		}
		if apiHdr.Get(name) == "" {
			t.Errorf("check API's 429 has no %s, the gateway's has %q: %v", name, gwHdr.Get(name), apiHdr)
		}
	}
	for _, name := range []string{"X-Binding-Limit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "Ratelimit-Policy"} {
		if g, a := gwHdr.Get(name), apiHdr.Get(name); g != a {
			t.Errorf("%s: gateway %q, check API %q", name, g, a)
		}
	}

	// A reload that turns the legacy fields, the binding limit's field and
	// the RateLimit fields off: the check API follows it as the gateway does.
	if err := os.WriteFile(cfg, policy("{ratelimit: false, x_ratelimit: false}"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the gateway's 429 without RateLimit", 30*time.Second, func() bool {
		code, hdr, _ := get(t, gw+"/x")
		return code == http.StatusTooManyRequests && hdr.Get("Ratelimit") == ""
	})
	code, apiHdr, body = post(t, http.DefaultClient, api, check)
	if code != http.StatusTooManyRequests {
		t.Fatalf("check API after the reload: %d %s, want 429", code, body)
	}
	for _, name := range append([]string{"X-Binding-Limit", "Ratelimit", "Ratelimit-Policy"}, legacy...) {
		if v := apiHdr.Get(name); v != "" {
			t.Errorf("check API's 429 after a reload that turned it off still has %s: %q", name, v)
		}
	}
	if apiHdr.Get("Retry-After") == "" {
		t.Errorf("check API's 429 after the reload lost its Retry-After: %v", apiHdr)
	}
}
