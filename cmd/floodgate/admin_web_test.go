package main

import (
	"encoding/json"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// adminReq is one request to the admin listener.
type adminReq struct{ method, path string }

// adminListenerRequests is a request to every route of the admin
// listener: the method patterns its handlers register (read from their
// source, so that a new route is covered without a change here) with
// {name} as acme, every file of the dashboard's page, a directory of it,
// and paths no route serves.
func adminListenerRequests(t *testing.T) []adminReq {
	t.Helper()
	var out []adminReq
	for _, r := range registeredRoutes(t, "admin", "dashboard", "internal/app", "internal/console") {
		method, path, _ := strings.Cut(r, " ")
		out = append(out, adminReq{method, strings.ReplaceAll(path, "{name}", "acme")})
	}
	web := filepath.Join("..", "..", "dashboard", "web")
	files := 0
	err := fs.WalkDir(os.DirFS(web), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, adminReq{"GET", "/ui/" + p})
			files++
		}
		return err
	})
	if err != nil || files < 4 {
		t.Fatalf("the dashboard's files: %d found, %v", files, err)
	}
	return append(out, adminReq{"GET", "/ui/vendor/"}, adminReq{"GET", "/api/v1/no-such-route"},
		adminReq{"GET", "/no-such-path"})
}

// adminBody is a body each route would take.
func adminBody(r adminReq) string {
	switch {
	case r.path == "/api/v1/keys":
		return `{"name": "acme", "plan": "basic"}`
	case r.path == "/v1/explain":
		return `{"path": "/x"}`
	case r.path == "/api/v1/access":
		return `{"list": "deny", "network": "192.0.2.0/24"}`
	case strings.HasSuffix(r.path, "/rotate"):
		return `{"overlap": "0s"}`
	case r.method == "PATCH":
		return `{"quota": 5}`
	}
	return ""
}

// dataPath reports whether path answers data about keys (JSON).
func dataPath(path string) bool {
	return strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/ui/api/") || path == "/v1/explain"
}

// adminDo sends r to the admin listener at base with the Host host (the
// listener's address when empty), the admin token tok (none when empty)
// and the headers hdr, and returns the answer with its body read.
func adminDo(t *testing.T, base string, r adminReq, host, tok, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(r.method, base+r.path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req) // no redirects followed
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// startConsoleServe starts floodgate serve in process with the admin
// tokens ops-token and viewer-token, a plan basic and the API key acme of
// that plan.
func startConsoleServe(t *testing.T) (gw, admin string) {
	t.Helper()
	cfg := consoleConfig(t, t.TempDir(), "", `  - {name: basic, rate: 100, quota: {limit: 1000, period: DAY}}`)
	gw, admin, _, _ = startServe(t, "--config", cfg, "--log-level", "error")
	if code := call(t, "POST", admin+"/api/v1/keys", "ops-token", map[string]any{"name": "acme", "plan": "basic"}, nil); code != http.StatusCreated {
		t.Fatalf("creating acme: %d", code)
	}
	return gw, admin
}

// checkWebHeaders checks the headers every answer of the admin listener
// carries: a Content-Security-Policy that allows scripts and styles of the
// listener's own origin only, nothing inline, and no framing; no sniffing
// of types, no framing, no Referer, no caching, no reading by another
// origin's page; no CORS grant and no cookie.
func checkWebHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	csp := map[string]string{}
	for _, d := range strings.Split(h.Get("Content-Security-Policy"), ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		csp[name] = strings.TrimSpace(value)
	}
	for name, want := range map[string]string{"default-src": "'none'", "script-src": "'self'", "style-src": "'self'",
		"frame-ancestors": "'none'", "base-uri": "'none'", "form-action": "'none'"} {
		if csp[name] != want {
			t.Errorf("%s: Content-Security-Policy %s is %q, want %q (whole: %q)", what, name, csp[name], want, h.Get("Content-Security-Policy"))
		}
	}
	if v := h.Get("Content-Security-Policy"); strings.Contains(v, "unsafe-") || strings.Contains(v, "*") {
		t.Errorf("%s: Content-Security-Policy %q allows inline code or any origin", what, v)
	}
	for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
		"Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "Cross-Origin-Resource-Policy": "same-origin"} {
		if got := h.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %s %q, want %q", what, name, got, want)
		}
	}
	for name := range h {
		if strings.HasPrefix(name, "Access-Control-") || name == "Set-Cookie" {
			t.Errorf("%s: answers %s: %q", what, name, h.Values(name))
		}
	}
}

// TestAdminListenerSecurityHeaders: every answer of the admin listener
// (the dashboard's page and files, its feeds, the admin API, explain, the
// probes and metrics, refusals for want of a token, 404s and the 421 for
// a foreign Host) carries a Content-Security-Policy of scripts and styles
// from its own origin only (no inline code, no framing), nosniff,
// X-Frame-Options DENY, no Referer, Cache-Control: no-store and
// Cross-Origin-Resource-Policy same-origin; every answer with data is
// JSON.
func TestAdminListenerSecurityHeaders(t *testing.T) {
	_, admin := startConsoleServe(t)
	port := admin[strings.LastIndexByte(admin, ':')+1:]
	for _, r := range adminListenerRequests(t) {
		for _, c := range []struct{ name, host, tok string }{
			{"no token", "", ""},
			{"admin token", "", "ops-token"},
			{"foreign Host", "attacker.example:" + port, "ops-token"},
		} {
			what := r.method + " " + r.path + " (" + c.name + ")"
			resp, _ := adminDo(t, admin, r, c.host, c.tok, adminBody(r), nil)
			checkWebHeaders(t, what, resp.Header)
			if c.host != "" {
				if resp.StatusCode != http.StatusMisdirectedRequest {
					t.Errorf("%s: %d, want 421", what, resp.StatusCode)
				}
				continue
			}
			ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			switch {
			case dataPath(r.path) && ct != "application/json":
				t.Errorf("%s: %d with Content-Type %q, want application/json", what, resp.StatusCode, resp.Header.Get("Content-Type"))
			case resp.Header.Get("Content-Type") == "" && resp.StatusCode != http.StatusMovedPermanently:
				t.Errorf("%s: %d without a Content-Type", what, resp.StatusCode)
			}
		}
	}
}

// TestAdminListenerRefusesCrossSiteRequests: what a page of another site
// can make an operator's browser send to the admin listener without a
// CORS preflight (a form's POST with a text/plain, urlencoded or
// multipart body holding JSON, with an Origin of its own and a cookie),
// or with the admin token where a browser could put it without a header
// (the query string, a cookie), is refused on every route with data or
// changes, and changes nothing; a preflight asking to send Authorization
// is granted nowhere.
func TestAdminListenerRefusesCrossSiteRequests(t *testing.T) {
	_, admin := startConsoleServe(t)
	state := func() (keys, audit string) {
		t.Helper()
		_, k := rawCall(t, "GET", admin+"/api/v1/keys", "ops-token", nil)
		_, a := rawCall(t, "GET", admin+"/api/v1/audit?limit=10000", "ops-token", nil)
		return string(k), string(a)
	}
	keysBefore, auditBefore := state()
	evil := `{"name": "evil", "plan": "basic", "overlap": "0s", "quota": 1, "list": "deny", "network": "0.0.0.0/0", "path": "/x"}`
	for _, r := range adminListenerRequests(t) {
		if !dataPath(r.path) {
			continue
		}
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
			for _, method := range []string{"POST", r.method} {
				what := method + " " + r.path + " as " + ct
				resp, body := adminDo(t, admin, adminReq{method, r.path}, "", "", evil, map[string]string{
					"Content-Type": ct, "Origin": "http://attacker.example", "Sec-Fetch-Site": "cross-site",
					"Cookie": "token=ops-token; floodgate-token=ops-token",
				})
				if !slices.Contains([]int{http.StatusUnauthorized, http.StatusForbidden, http.StatusMethodNotAllowed}, resp.StatusCode) {
					t.Errorf("%s: %d, want 401, 403 or 405: %s", what, resp.StatusCode, body)
				}
			}
		}
		q := "?token=ops-token&access_token=ops-token&bearer=ops-token&authorization=Bearer+ops-token"
		if strings.Contains(r.path, "?") {
			q = "&" + q[1:]
		}
		resp, body := adminDo(t, admin, adminReq{r.method, r.path + q}, "", "", adminBody(r), nil)
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s with the token in the query: %d, want 401 or 403: %s", r.method, r.path, resp.StatusCode, body)
		}
	}
	for _, r := range adminListenerRequests(t) {
		resp, _ := adminDo(t, admin, adminReq{"OPTIONS", r.path}, "", "", "", map[string]string{
			"Origin": "http://attacker.example", "Access-Control-Request-Method": r.method,
			"Access-Control-Request-Headers": "authorization, content-type",
		})
		for name := range resp.Header {
			if strings.HasPrefix(name, "Access-Control-") {
				t.Errorf("a preflight of %s %s: answers %s: %q", r.method, r.path, name, resp.Header.Values(name))
			}
		}
		if resp.StatusCode < 300 {
			t.Errorf("a preflight of %s %s: %d, want a refusal", r.method, r.path, resp.StatusCode)
		}
	}
	if keysAfter, auditAfter := state(); keysAfter != keysBefore || auditAfter != auditBefore {
		t.Errorf("cross-site requests changed the keys or the audit log:\nkeys %s\nthen %s\naudit %s\nthen %s",
			keysBefore, keysAfter, auditBefore, auditAfter)
	}
}

// TestAdminListenerRefusesForeignHostsOnEveryRoute: a request naming a
// host the admin listener does not answer to (what a browser sends to a
// name rebound to its address) gets 421 on every route, the dashboard's
// files and feeds included, whatever token it carries, and changes
// nothing.
func TestAdminListenerRefusesForeignHostsOnEveryRoute(t *testing.T) {
	_, admin := startConsoleServe(t)
	port := admin[strings.LastIndexByte(admin, ':')+1:]
	_, before := rawCall(t, "GET", admin+"/api/v1/audit?limit=10000", "ops-token", nil)
	for _, r := range adminListenerRequests(t) {
		for _, host := range []string{"attacker.example:" + port, "127.0.0.1.attacker.example", "localhost.attacker.example:" + port} {
			resp, body := adminDo(t, admin, r, host, "ops-token", adminBody(r), nil)
			if resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(body, "acme") {
				t.Errorf("%s %s with Host %q: %d, want 421: %.200s", r.method, r.path, host, resp.StatusCode, body)
			}
		}
	}
	_, after := rawCall(t, "GET", admin+"/api/v1/audit?limit=10000", "ops-token", nil)
	var entries struct{ Entries []json.RawMessage }
	if err := json.Unmarshal(after, &entries); err != nil || string(after) != string(before) || len(entries.Entries) != 1 {
		t.Errorf("the audit log changed under requests to a foreign Host: %s, then %s (%v)", before, after, err)
	}
}
