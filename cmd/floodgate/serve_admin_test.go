package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAdminListenerChecksHost: the admin listener serves only requests that
// name it by an IP address, localhost or a name in server.admin.hosts;
// any other Host, such as a name an attacker points at the listener (DNS
// rebinding), is answered 421 with the reason, on every path.
func TestAdminListenerChecksHost(t *testing.T) {
	cfg := writeConfig(t, `version: 1
server:
  admin:
    hosts: [admin.example.test]
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
`)
	_, admin, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	port := admin[strings.LastIndexByte(admin, ':')+1:]
	for _, c := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + port, 200},
		{"127.0.0.1", 200},
		{"[::1]:" + port, 200},
		{"localhost:" + port, 200},
		{"LocalHost.", 200},
		{"dash.localhost:" + port, 200},
		{"admin.example.test:" + port, 200},
		{"Admin.Example.Test.", 200},
		{"attacker.example:" + port, 421},
		{"localhost.attacker.example", 421},
		{"admin.example.test.attacker.example", 421},
	} {
		for _, path := range []string{"/healthz", "/metrics", "/ui/"} {
			req, _ := http.NewRequest("GET", admin+path, nil)
			req.Host = c.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("%s with Host %q: %d, want %d", path, c.host, resp.StatusCode, c.want)
			}
			if c.want == 421 && !strings.Contains(string(b), "server.admin.hosts") {
				t.Errorf("%s with Host %q: the answer gives no reason: %q", path, c.host, b)
			}
		}
	}
}

// TestExplainRefusedWithoutAdminTokens: without admin tokens in the file,
// POST /v1/explain refuses every request, with or without an API key to
// explain, with 403 and the reason: it would otherwise tell valid API keys
// from unknown ones to anyone who reaches the admin listener, as fast as
// they ask.
func TestExplainRefusedWithoutAdminTokens(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: partner
    match: {paths: ["/partner/**"]}
    upstream: http://127.0.0.1:9
    api_key_required: true
plans:
  - {name: basic, rate: 5}
keys:
  - {name: k1, plan: basic, sha256: %s}
`, sha256Hex("real-key")))
	_, admin, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	for _, body := range []string{`{"path":"/partner/x","headers":{"X-Api-Key":"real-key"}}`, `{"path":"/partner/x","headers":{"X-Api-Key":"guess"}}`, `{"path":"/x"}`} {
		for _, auth := range []string{"", "Bearer anything"} {
			req, _ := http.NewRequest("POST", admin+"/v1/explain", strings.NewReader(body))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var msg struct{ Message string }
			err = json.NewDecoder(resp.Body).Decode(&msg)
			resp.Body.Close()
			if resp.StatusCode != 403 || err != nil || !strings.Contains(msg.Message, "server.admin.tokens") {
				t.Errorf("%s (%q): %d %q %v, want 403 naming server.admin.tokens", body, auth, resp.StatusCode, msg.Message, err)
			}
		}
	}
}
