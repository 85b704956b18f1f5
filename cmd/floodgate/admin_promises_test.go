package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
)

// adminRoutes is every route of the admin API, with a body each call
// could carry, and a path no route serves.
var adminRoutes = []struct {
	method, path string
	body         any
}{
	{"GET", "/api/v1/keys", nil},
	{"POST", "/api/v1/keys", map[string]any{"name": "intruder", "plan": "basic"}},
	{"GET", "/api/v1/keys/filekey", nil},
	{"PATCH", "/api/v1/keys/filekey", map[string]any{"quota": 1}},
	{"POST", "/api/v1/keys/filekey/revoke", nil},
	{"POST", "/api/v1/keys/filekey/rotate", map[string]any{"overlap": "0s"}},
	{"POST", "/api/v1/keys/filekey/enable", nil},
	{"POST", "/api/v1/keys/filekey/disable", nil},
	{"POST", "/api/v1/keys/filekey/reset", nil},
	{"GET", "/api/v1/keys/filekey/usage", nil},
	{"GET", "/api/v1/plans", nil},
	{"GET", "/api/v1/limits", nil},
	{"GET", "/api/v1/usage", nil},
	{"GET", "/api/v1/audit", nil},
	{"GET", "/api/v1/no-such-route", nil},
	{"GET", "/api/v2/keys", nil},
}

// TestAdminAPIOffWithoutTokens: a floodgate serve whose file lists no
// admin token refuses every route of the admin API, with no bearer token,
// with a made-up one, with the file key's own secret and with a token of
// the check API; no refused call changes anything, and none says more
// than that it was refused. (The dashboard's data is open without
// tokens, as docs/console.md says; the admin API is not.)
func TestAdminAPIOffWithoutTokens(t *testing.T) {
	up := newUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  api_tokens:
    - {name: checker, sha256: %q}
routes:
  - name: partner
    match: {paths: ["/partner/**"]}
    upstream: %s
    api_key_required: true
plans:
  - {name: basic, rate: 1, per: 1h, burst: 3}
keys:
  - {name: filekey, plan: basic, sha256: %s}
`, sha256Hex("check-token"), up, sha256Hex("file-secret")))
	gw, admin, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")

	// One of the key's three requests is spent before the calls.
	if code := status(t, gw+"/partner/x", "file-secret"); code != http.StatusOK {
		t.Fatalf("file key: %d", code)
	}
	for _, tok := range []string{"", "anything", "file-secret", "check-token"} {
		for _, r := range adminRoutes {
			code, body := rawCall(t, r.method, admin+r.path, tok, r.body)
			if code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Errorf("%s %s with token %q: %d %s, want 401 or 403", r.method, r.path, tok, code, body)
				continue
			}
			var msg map[string]any
			if err := json.Unmarshal(body, &msg); err != nil || len(msg) != 1 || msg["error"] == nil {
				t.Errorf("%s %s with token %q: answer %s, want only an error", r.method, r.path, tok, body)
			}
			if strings.Contains(string(body), "filekey") || strings.Contains(string(body), "basic") {
				t.Errorf("%s %s with token %q: the refusal tells %s", r.method, r.path, tok, body)
			}
		}
	}
	// Nothing changed: the key works with the two requests it has left
	// (no revoke, disable, rotation, reset or new quota took), and the
	// third is refused by its limit.
	for i, want := range []int{200, 200, 429} {
		if code := status(t, gw+"/partner/x", "file-secret"); code != want {
			t.Errorf("file key, request %d after the calls: %d, want %d", i+2, code, want)
		}
	}
}

// TestFileKeysChangeOnlyInTheFile: every change the admin API can make
// to a key (a new quota, plan or state, a revocation, a rotation, a reset,
// a key of the same name) is refused with 409 for a key of the policy
// file, and leaves its counters as they were: a file key that used up its
// limit is still refused by it, neither reset nor revoked, and the audit
// log records nothing.
func TestFileKeysChangeOnlyInTheFile(t *testing.T) {
	cfg := consoleConfig(t, t.TempDir(), "", `  - {name: tight, rate: 1, per: 1h, burst: 3, quota: {limit: 1000, period: DAY}}
  - {name: gold, rate: 100, burst: 100}
keys:
  - {name: filekey, plan: tight, sha256: `+sha256Hex("file-secret")+`}`)
	gw, admin, _, _ := startServe(t, "--config", cfg, "--log-level", "error")
	api := admin + "/api/v1"
	var view keyAnswer
	if code := call(t, "GET", api+"/keys/filekey", "ops-token", nil, &view); code != http.StatusOK || view.Source != "file" {
		t.Fatalf("file key: %d %+v", code, view)
	}
	usage := func() string {
		var u struct {
			Usage []struct {
				Limit string `json:"limit"`
				Used  int64  `json:"used"`
			} `json:"usage"`
		}
		if code := call(t, "GET", api+"/keys/filekey/usage", "ops-token", nil, &u); code != http.StatusOK {
			t.Fatalf("usage: %d", code)
		}
		return fmt.Sprintf("%+v", u.Usage)
	}
	for i, want := range []int{200, 200, 200, 429} {
		if code := status(t, gw+"/partner/x", "file-secret"); code != want {
			t.Fatalf("file key, request %d: %d, want %d", i+1, code, want)
		}
	}
	before := usage()
	if !strings.Contains(before, "tight.rate Used:3") || !strings.Contains(before, "tight.quota Used:3") {
		t.Fatalf("usage of the spent key: %s", before)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"PATCH", "/keys/filekey", map[string]any{"quota": 5000}},
		{"PATCH", "/keys/filekey", map[string]any{"plan": "gold"}},
		{"PATCH", "/keys/filekey", map[string]any{"rate": 1000, "burst": 1000}},
		{"PATCH", "/keys/filekey", map[string]any{"disabled": true}},
		{"POST", "/keys/filekey/reset", nil},
		{"POST", "/keys/filekey/revoke", nil},
		{"POST", "/keys/filekey/disable", nil},
		{"POST", "/keys/filekey/enable", nil},
		{"POST", "/keys/filekey/rotate", map[string]any{"overlap": "0s"}},
		{"POST", "/keys/filekey/rotate", nil},
		{"POST", "/keys", map[string]any{"name": "filekey", "plan": "gold"}},
	} {
		code, body := rawCall(t, c.method, api+c.path, "ops-token", c.body)
		if code != http.StatusConflict {
			t.Errorf("%s %s %v: %d %s, want 409", c.method, c.path, c.body, code, body)
		}
		if strings.Contains(string(body), `"secret"`) {
			t.Errorf("%s %s: a secret in the refusal: %s", c.method, c.path, body)
		}
	}
	if after := usage(); after != before {
		t.Errorf("usage after the refused changes: %s, want %s", after, before)
	}
	// Still refused by its spent limit: not reset (200), not revoked,
	// disabled or rotated out (403).
	if code := status(t, gw+"/partner/x", "file-secret"); code != http.StatusTooManyRequests {
		t.Errorf("file key after the refused changes: %d, want 429", code)
	}
	call(t, "GET", api+"/keys/filekey", "ops-token", nil, &view)
	if view.Source != "file" || view.State != "active" || view.Plan != "tight" || view.Quota != 0 || len(view.Secrets) != 1 || view.Secrets[0].SHA256 != sha256Hex("file-secret") {
		t.Errorf("file key after the refused changes: %+v", view)
	}
	var audit auditAnswer
	call(t, "GET", api+"/audit", "ops-token", nil, &audit)
	if len(audit.Entries) != 0 {
		t.Errorf("the audit log records refused changes: %+v", audit.Entries)
	}
}

// TestAuditHoldsNoSecret: a key created, rotated with and without an
// overlap and changed through the admin API leaves no secret in the audit
// log, in its file (memory) or its Redis list, nor in the API's answer to
// an audit query or the process's log: a secret shows only as the first
// 12 hex digits of its SHA-256, never whole and never as its whole digest.
func TestAuditHoldsNoSecret(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		dir := t.TempDir()
		cfg := consoleConfig(t, dir, "  state_file: state.bin", consolePlans)
		p := startProc(t, "--config", cfg, "--log-level", "debug")
		secrets := auditedSecrets(t, p)
		p.stop(t)
		data, err := os.ReadFile(filepath.Join(dir, "state.bin.audit.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		checkNoSecret(t, "the audit file", string(data), secrets, true)
		checkNoSecret(t, "the process's output", p.out.String(), secrets, false)
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		cfg := consoleConfig(t, t.TempDir(), fmt.Sprintf("  store: redis://%s/0\n  store_timeout: 1s", rs.Addr), consolePlans)
		p := startProc(t, "--config", cfg, "--log-level", "debug")
		secrets := auditedSecrets(t, p)
		list, err := rs.Do("LRANGE", redisconn.Prefix+"audit", "0", "-1")
		if err != nil {
			t.Fatal(err)
		}
		checkNoSecret(t, "the Redis audit list", list, secrets, true)
		checkNoSecret(t, "the process's output", p.out.String(), secrets, false)
	})
}

// auditedSecrets makes a key's secrets through p's admin API (a creation
// and three rotations among other changes) and returns them, after
// checking the API's own audit answer.
func auditedSecrets(t *testing.T, p *proc) []string {
	t.Helper()
	api := p.admin + "/api/v1"
	var k keyAnswer
	if code := call(t, "POST", api+"/keys", "ops-token", map[string]any{"name": "acme", "plan": "basic"}, &k); code != http.StatusCreated || k.Secret == "" {
		t.Fatalf("create: %d %+v", code, k)
	}
	secrets := []string{k.Secret}
	for _, overlap := range []string{"1h", "0s", ""} {
		var rot keyAnswer
		body := map[string]any{"overlap": overlap}
		if overlap == "" {
			body = nil
		}
		if code := call(t, "POST", api+"/keys/acme/rotate", "ops-token", body, &rot); code != http.StatusOK || rot.Secret == "" {
			t.Fatalf("rotate %q: %d %+v", overlap, code, rot)
		}
		secrets = append(secrets, rot.Secret)
	}
	call(t, "PATCH", api+"/keys/acme", "ops-token", map[string]any{"quota": 5000, "plan": "gold"}, nil)
	call(t, "POST", api+"/keys/acme/reset", "ops-token", nil, nil)
	call(t, "POST", api+"/keys/acme/disable", "ops-token", nil, nil)
	call(t, "POST", api+"/keys/acme/revoke", "ops-token", nil, nil)
	if code := status(t, p.gw+"/partner/x", secrets[len(secrets)-1]); code != http.StatusForbidden {
		t.Errorf("revoked key: %d, want 403", code)
	}
	_, body := rawCall(t, "GET", api+"/audit", "ops-token", nil)
	var audit auditAnswer
	if err := json.Unmarshal(body, &audit); err != nil || len(audit.Entries) != 8 {
		t.Fatalf("audit: %v %s", err, body)
	}
	checkNoSecret(t, "the audit API's answer", string(body), secrets, true)
	return secrets
}

// checkNoSecret fails t if text holds one of secrets, or the whole SHA-256
// of one, in any spelling a log could take; with prefixed, it also wants
// the first 12 hex digits of each secret's SHA-256 there.
func checkNoSecret(t *testing.T, where, text string, secrets []string, prefixed bool) {
	t.Helper()
	lower := strings.ToLower(text)
	for i, s := range secrets {
		sum := sha256Hex(s)
		_, body, _ := strings.Cut(s, "_")
		for _, bad := range []string{s, body, sum, strings.ToUpper(sum), sum[12:]} {
			if len(bad) >= 12 && strings.Contains(text, bad) {
				t.Errorf("%s holds secret %d (%q)", where, i, bad)
			}
		}
		if strings.Contains(lower, strings.ToLower(body)) {
			t.Errorf("%s holds secret %d in another case", where, i)
		}
		if prefixed && !strings.Contains(text, sum[:12]) {
			t.Errorf("%s lacks the 12-digit prefix of secret %d's SHA-256", where, i)
		}
	}
	if t.Failed() {
		t.Logf("%s:\n%s", where, text)
	}
}

// rawCall makes an admin API call with token (none when empty), body
// sent as JSON when not nil, and returns the status and the body.
func rawCall(t testing.TB, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}
