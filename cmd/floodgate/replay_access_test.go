package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
)

// TestReplayKeepsAllowListExemptions: an address on the policy file's
// allow list is exempt from the limits its entry names, live; the replay
// of the gateway's own access log through the same file exempts it too,
// and decides every request as the gateway did.
func TestReplayKeepsAllowListExemptions(t *testing.T) {
	dir := t.TempDir()
	up := replayUpstream(t)
	cfg := filepath.Join(dir, "policy.yaml")
	pol := fmt.Sprintf(`version: 1
server:
  trusted_proxies: [127.0.0.1]
  access:
    allow: [{networks: [198.51.100.0/24], exempt: [per-ip]}]
routes:
  - {name: api, match: {paths: ["/api/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2, key: client_ip, scope: global}
`, up.URL)
	if err := os.WriteFile(cfg, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "access.log")
	gw, _, stop, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--log-level", "error", "--access-log", logPath)
	for i := range 5 {
		req, _ := http.NewRequest("GET", gw+"/api/x", nil)
		req.Header.Set("X-Forwarded-For", "198.51.100.7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("exempt request %d: %d", i, resp.StatusCode)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r, err := runReplayJSON(t, "--config", cfg, "--log", logPath)
	if err != nil {
		t.Fatal(err)
	}
	if a := r.Agreement; a == nil || a.Compared != 5 || a.Matched != a.Compared || a.ReplayDenied != 0 {
		t.Errorf("agreement with the log: %+v", a)
	}
	for _, l := range r.Limits {
		if l.Name == "per-ip" && l.Denied != 0 {
			t.Errorf("per-ip: seen %d, denied %d; live it exempted the allowed address", l.Seen, l.Denied)
		}
	}
}

// TestExplainCLIKeepsAccessLists: floodgate explain --config answers a
// request from an address on the file's deny list 403, and leaves out the
// limits an allowed address is exempt from, as floodgate serve does with
// the same file.
func TestExplainCLIKeepsAccessLists(t *testing.T) {
	up := replayUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  trusted_proxies: [127.0.0.1]
  admin:
    tokens: [{name: ops, sha256: %q}]
  access:
    deny: [203.0.113.0/24]
    allow: [{networks: [198.51.100.0/24], exempt: [per-ip]}]
routes:
  - {name: api, match: {paths: ["/api/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2, key: client_ip, scope: global}
  - {name: everyone, rate: 1, per: 1h, burst: 100, key: global, scope: global}
`, sha256Hex(explainAdminToken), up.URL))
	_, admin, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	served := explainHTTP(t, admin, gateway.ExplainRequest{Method: "GET", Path: "/api/x", IP: "127.0.0.1",
		Headers: map[string]string{"X-Forwarded-For": "198.51.100.7"}})
	denied := explainCLI(t, cfg, gateway.ExplainRequest{Method: "GET", Path: "/api/x", IP: "203.0.113.9"})
	if denied.Answer.Status != 403 || denied.Answer.Forwarded {
		t.Errorf("a denied address: answer %+v; floodgate serve answers 403", denied.Answer)
	}
	cli := explainCLI(t, cfg, gateway.ExplainRequest{Method: "GET", Path: "/api/x", IP: "198.51.100.7"})
	for _, allowed := range []*gateway.Explanation{cli, served} {
		for _, l := range allowed.Limits {
			if l.Name == "per-ip" && (l.State != nil || l.Matched) {
				t.Errorf("an allowed address: per-ip applies (%+v); it is exempt", l.State)
			}
			if l.Name == "everyone" && (l.State == nil || l.State.Limit != 100 || !l.Binding) {
				t.Errorf("an allowed address: everyone is explained with the state %+v", l.State)
			}
		}
		for _, f := range allowed.Answer.Headers {
			if strings.Contains(f.Value, "per-ip") {
				t.Errorf("an allowed address: %s: %s; floodgate serve names no per-ip", f.Name, f.Value)
			}
		}
	}
}
