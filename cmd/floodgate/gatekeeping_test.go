package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

// fetchURL sends a GET with the header fields and returns the status, the
// answer's header fields and its body.
func fetchURL(t *testing.T, url string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestServeIdentityHeadersAndRefusals: through floodgate serve, the
// upstream gets the identity headers the gateway set and never a client's
// copies or its credentials; a limit's refusal answers with its status,
// body, content type and headers, the RateLimit fields kept.
func TestServeIdentityHeadersAndRefusals(t *testing.T) {
	forEngines(t, testServeIdentityHeadersAndRefusals)
}

func testServeIdentityHeadersAndRefusals(t *testing.T, engine string) {
	seen := make(chan http.Header, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Clone() }))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`server:
  upstream:
    identity_headers: {key_name: X-Floodgate-Key, plan: X-Floodgate-Plan, user: X-Floodgate-User, client_ip: X-Floodgate-Client, remaining: X-Floodgate-Remaining}
    strip_credentials: true
plans: [{name: gold, rate: 100}]
keys: [{name: acme, plan: gold, sha256: %q}]
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - name: per-key
    key: api_key
    rate: 1
    per: 1h
    burst: 3
    refusal: {status: 503, body: "come back later\n", content_type: text/plain, headers: [{name: X-Refused, value: per-key}]}
`, sha256Hex("key-acme"), up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	hdr := map[string]string{"x-api-key": "key-acme", "Authorization": "Basic Zm9vOmJhcg==", "X-Floodgate-User": "root",
		"X-Floodgate-Client": "10.9.9.9", "X-Floodgate-Key": "admin", "X-Floodgate-Remaining": "1000000"}
	for i := range 3 {
		if st, _, body := fetchURL(t, gw+"/x", hdr); st != 200 {
			t.Fatalf("request %d: %d %s", i, st, body)
		}
		h := <-seen
		if h.Get("X-Floodgate-Key") != "acme" || h.Get("X-Floodgate-Plan") != "gold" || h.Get("X-Floodgate-Client") != "127.0.0.1" {
			t.Errorf("identity %v", h)
		}
		if got, want := h.Get("X-Floodgate-Remaining"), fmt.Sprint(2-i); got != want {
			t.Errorf("remaining %q, want %q", got, want)
		}
		for _, name := range []string{"X-Api-Key", "Authorization", "X-Floodgate-User"} {
			if v := h.Values(name); len(v) > 0 {
				t.Errorf("%s reached the upstream: %q", name, v)
			}
		}
	}
	st, h, body := fetchURL(t, gw+"/x", hdr)
	if st != 503 || body != "come back later\n" || h.Get("Content-Type") != "text/plain" || h.Get("X-Refused") != "per-key" {
		t.Errorf("refusal %d %q %q %q", st, body, h.Get("Content-Type"), h.Get("X-Refused"))
	}
	if h.Get("Retry-After") == "" || !strings.Contains(h.Get("RateLimit"), `"per-key"`) {
		t.Errorf("refusal fields %v", h)
	}
}

// TestServeBanSharedOnRedis: two floodgate serve instances on one Redis
// count offences together; the ban holds on both, before any limit,
// answered 429 with Retry-After until it ends; it is listed and lifted
// through the admin API of either, and the lift is audited.
func TestServeBanSharedOnRedis(t *testing.T) { forEngines(t, testServeBanSharedOnRedis) }

func testServeBanSharedOnRedis(t *testing.T, engine string) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`server:
  store: redis://%s/0
  store_timeout: 2s
  admin:
    tokens: [{name: ops, sha256: %q}]
  bans:
    - {name: flood, after: 3, within: 1m, ban: 2m, max_ban: 1h}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 1}
`, rs.Addr, sha256Hex("ops-token"), up))
	var gws, admins []string
	for range 2 {
		gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
		gws, admins = append(gws, gw), append(admins, admin)
	}
	if st, _, _ := fetchURL(t, gws[0]+"/", nil); st != 200 {
		t.Fatalf("first request %d", st)
	}
	for i, gw := range []string{gws[0], gws[1], gws[0]} {
		if st, h, _ := fetchURL(t, gw+"/", nil); st != 429 || h.Get("RateLimit") == "" {
			t.Fatalf("refusal %d: %d %v", i, st, h)
		}
	}
	// Banned on both: no limit was asked, so no RateLimit fields.
	for _, gw := range gws {
		waitUntil(t, "the ban on "+gw, 5*time.Second, func() bool {
			_, h, _ := fetchURL(t, gw+"/", nil)
			return h.Get("RateLimit") == ""
		})
		st, h, body := fetchURL(t, gw+"/", nil)
		if st != 429 || h.Get("Retry-After") != "120" && h.Get("Retry-After") != "119" || !strings.Contains(body, "Too Many Requests") {
			t.Errorf("banned: %d Retry-After %q %s", st, h.Get("Retry-After"), body)
		}
	}
	var list struct {
		Bans []struct {
			Ban, Key, Kind string
			Strikes        int
			RetryAfter     int64 `json:"retry_after"`
		}
		Total int
	}
	if st := call(t, "GET", admins[1]+"/api/v1/bans", "ops-token", nil, &list); st != 200 || len(list.Bans) != 1 || list.Total != 1 ||
		list.Bans[0].Ban != "flood" || list.Bans[0].Key != "127.0.0.1" || list.Bans[0].Kind != "client_ip" || list.Bans[0].Strikes != 1 {
		t.Fatalf("bans %d %+v", st, list)
	}
	m := scrape(t, admins[0])
	if !strings.Contains(m, `floodgate_banned_requests_total{ban="flood"}`) {
		t.Errorf("metrics lack the banned requests")
	}
	if st := call(t, "DELETE", admins[0]+"/api/v1/bans?ban=flood&key=127.0.0.1", "ops-token", nil, nil); st != 200 {
		t.Fatalf("lift: %d", st)
	}
	for _, gw := range gws {
		waitUntil(t, "the lift on "+gw, 5*time.Second, func() bool {
			_, h, _ := fetchURL(t, gw+"/", nil)
			return h.Get("RateLimit") != "" // the limit answers again
		})
	}
	var audit struct {
		Entries []struct{ Actor, Action, Target string }
	}
	if st := call(t, "GET", admins[1]+"/api/v1/audit?action=ban.lift", "ops-token", nil, &audit); st != 200 || len(audit.Entries) != 1 ||
		audit.Entries[0].Actor != "ops" || audit.Entries[0].Target != "flood|127.0.0.1" {
		t.Errorf("audit %d %+v", st, audit)
	}
}

// scrape returns the admin listener's /metrics.
func scrape(t *testing.T, admin string) string {
	t.Helper()
	_, _, body := fetchURL(t, admin+"/metrics", nil)
	return body
}

// TestServeAccessLists: a denied network is answered 403 before any limit
// is charged, an allowed one is exempt from its limits, from the file and
// from the admin API (audited); a bad CIDR is refused by the API.
func TestServeAccessLists(t *testing.T) { forEngines(t, testServeAccessLists) }

func testServeAccessLists(t *testing.T, engine string) {
	up := newUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`server:
  trusted_proxies: [127.0.0.1]
  admin:
    tokens: [{name: ops, sha256: %q}]
  access:
    deny: [203.0.113.0/24]
    allow: [{networks: [198.51.100.0/24], exempt: [per-ip]}]
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2}
  - {name: everyone, key: global, rate: 1, per: 1h, burst: 1000}
`, sha256Hex("ops-token"), up))
	gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	from := func(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }
	for range 3 {
		if st, h, body := fetchURL(t, gw+"/", from("203.0.113.9")); st != 403 || body != `{"message":"Forbidden"}`+"\n" || h.Get("RateLimit") != "" {
			t.Fatalf("denied: %d %s %v", st, body, h)
		}
	}
	_, h, _ := fetchURL(t, gw+"/", from("192.0.2.1"))
	if !strings.Contains(h.Get("RateLimit"), `"everyone";r=999`) {
		t.Errorf("the denied requests were charged: %q", h.Get("RateLimit"))
	}
	for i := range 5 {
		st, h, _ := fetchURL(t, gw+"/", from("198.51.100.7"))
		if st != 200 || strings.Contains(h.Get("RateLimit"), "per-ip") {
			t.Fatalf("allowed %d: %d %q", i, st, h.Get("RateLimit"))
		}
	}
	var e struct{ List, Network string }
	if st := call(t, "POST", admin+"/api/v1/access", "ops-token", map[string]any{"list": "deny", "network": "192.0.2.0/24"}, &e); st != 200 || e.Network != "192.0.2.0/24" {
		t.Fatalf("add: %d %+v", st, e)
	}
	if st, _, _ := fetchURL(t, gw+"/", from("192.0.2.1")); st != 403 {
		t.Errorf("API deny: %d", st)
	}
	if st := call(t, "POST", admin+"/api/v1/access", "ops-token", map[string]any{"list": "deny", "network": "192.0.2.1/24"}, nil); st != 400 {
		t.Errorf("bad CIDR: %d", st)
	}
	if st := call(t, "DELETE", admin+"/api/v1/access?list=deny&network=203.0.113.0/24", "ops-token", nil, nil); st != 409 {
		t.Errorf("removing the file's entry: %d", st)
	}
	if st := call(t, "DELETE", admin+"/api/v1/access?list=deny&network=192.0.2.0/24", "ops-token", nil, nil); st != 200 {
		t.Errorf("remove: %d", st)
	}
	if st, _, _ := fetchURL(t, gw+"/", from("192.0.2.1")); st != 200 {
		t.Errorf("after the removal: %d", st)
	}
	var audit struct {
		Entries []struct{ Action, Target string }
	}
	call(t, "GET", admin+"/api/v1/audit", "ops-token", nil, &audit)
	if len(audit.Entries) != 2 || audit.Entries[0].Action != "access.remove" || audit.Entries[1].Action != "access.add" {
		t.Errorf("audit %+v", audit)
	}
}

// TestServeAccessListsTrustOnlyProxies attacks the access lists with
// forwarded addresses: the address they judge is the client's as resolved
// through the trusted proxies (127.0.0.2 here), never what a client says
// of itself. A peer that is no proxy claiming an allowed network in
// X-Forwarded-For is charged its per-address limit and named to the
// upstream as itself; a denied peer claiming one is answered 403; a denied
// client behind the proxy that puts an allowed address before its own is
// answered 403. Through the proxy, an allowed client is exempt and named
// to the upstream by its address, and an address both denied and inside
// an allowed network (exempt from all) is answered 403.
func TestServeAccessListsTrustOnlyProxies(t *testing.T) {
	forEngines(t, testServeAccessListsTrustOnlyProxies)
}

func testServeAccessListsTrustOnlyProxies(t *testing.T, engine string) {
	seen := make(chan string, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("X-Floodgate-Client")
	}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`server:
  trusted_proxies: [127.0.0.2]
  upstream:
    identity_headers: {client_ip: X-Floodgate-Client}
  access:
    deny: [203.0.113.0/24, 127.0.0.3, 198.51.100.7]
    allow:
      - {networks: [192.0.2.0/24], exempt: [per-ip]}
      - {networks: [198.51.100.0/24], exempt: [all]}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2}
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	from := func(src, xff string) (int, http.Header, string) {
		t.Helper()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		tr := &http.Transport{DialContext: d.DialContext}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", gw+"/", nil)
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("from %s: %v", src, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		client := ""
		if resp.StatusCode == 200 {
			client = <-seen
		}
		return resp.StatusCode, resp.Header, client + "|" + string(b)
	}

	// A peer that is no proxy, claiming an allowed network.
	for i, want := range []int{200, 200, 429} {
		st, h, got := from("127.0.0.1", "192.0.2.9")
		if st != want || !strings.Contains(h.Get("RateLimit"), `"per-ip"`) || st == 200 && !strings.HasPrefix(got, "127.0.0.1|") {
			t.Fatalf("untrusted peer claiming 192.0.2.9, request %d: %d %q, upstream told %q; want %d, charged per-ip, named 127.0.0.1",
				i, st, h.Get("RateLimit"), got, want)
		}
	}
	// A denied peer that is no proxy, claiming an allowed network.
	if st, _, _ := from("127.0.0.3", "192.0.2.9"); st != 403 {
		t.Errorf("denied peer 127.0.0.3 claiming 192.0.2.9: %d, want 403", st)
	}
	// Through the proxy: a denied client that put an allowed address first.
	if st, _, _ := from("127.0.0.2", "192.0.2.9, 203.0.113.5"); st != 403 {
		t.Errorf("denied client 203.0.113.5 through the proxy, claiming 192.0.2.9 before it: %d, want 403", st)
	}
	// Through the proxy: an allowed client is exempt, and so named.
	for i := range 4 {
		st, h, got := from("127.0.0.2", "203.0.113.5, 192.0.2.9")
		if st != 200 || strings.Contains(h.Get("RateLimit"), "per-ip") || !strings.HasPrefix(got, "192.0.2.9|") {
			t.Fatalf("allowed client 192.0.2.9 through the proxy, request %d: %d %q, upstream told %q; want 200, exempt, named 192.0.2.9",
				i, st, h.Get("RateLimit"), got)
		}
	}
	// Denied wins over an allowed network that covers it.
	if st, _, body := from("127.0.0.2", "198.51.100.7"); st != 403 || body != `|{"message":"Forbidden"}`+"\n" {
		t.Errorf("198.51.100.7, denied inside an allowed network: %d %q, want 403 Forbidden", st, body)
	}
	if st, h, _ := from("127.0.0.2", "198.51.100.8"); st != 200 || h.Get("RateLimit") != "" {
		t.Errorf("198.51.100.8, allowed from all: %d %q, want 200 without limits", st, h.Get("RateLimit"))
	}
}

// TestServeIdentityHeadersFollowAReload attacks the identity headers
// across reloads of the file under a running floodgate serve: once a
// version that names them and strips credentials is in force, a client's
// forged X-Floodgate-User, its API key and its Authorization no longer
// reach the upstream, which is told the client's address; once a later
// version names the user header otherwise, a client's copy of the new
// name is removed, and the old name, no longer the gateway's, passes.
func TestServeIdentityHeadersFollowAReload(t *testing.T) {
	forEngines(t, testServeIdentityHeadersFollowAReload)
}

func testServeIdentityHeadersFollowAReload(t *testing.T, engine string) {
	seen := make(chan http.Header, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Look") != "" {
			seen <- r.Header.Clone()
		}
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	write := func(burst int, server string) {
		t.Helper()
		src := fmt.Sprintf("server:\n  api_key_header: x-api-key\n%sroutes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: %s}\n"+
			"limits:\n  - {name: hourly, rate: 1, per: 1h, burst: %d, key: global}\n", server, up.URL, burst)
		if err := os.WriteFile(cfg+".tmp", []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfg+".tmp", cfg); err != nil {
			t.Fatal(err)
		}
	}
	forged := []string{"X-Look", "1", "X-Floodgate-User", "root", "X-Auth-User", "root", "x-api-key", "guessed",
		"Authorization", "Basic Zm9vOmJhcg==", "X-Floodgate-Client", "10.9.9.9"}
	var gw string
	look := func() http.Header {
		t.Helper()
		if st, _, body := get(t, gw+"/", forged...); st != 200 {
			t.Fatalf("%d %s", st, body)
		}
		return <-seen
	}
	write(1000, "")
	gw, _, _, _ = startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	if h := look(); h.Get("X-Floodgate-User") != "root" || h.Get("X-Api-Key") != "guessed" {
		t.Fatalf("without identity headers the request is forwarded as sent: %v", h)
	}

	write(2000, "  upstream:\n    identity_headers: {user: X-Floodgate-User, client_ip: X-Floodgate-Client}\n    strip_credentials: true\n")
	awaitPolicy(t, gw, `"hourly";q=2000`, 30*time.Second, "the version with identity headers")
	h := look()
	for _, name := range []string{"X-Floodgate-User", "X-Api-Key", "Authorization"} {
		if v := h.Values(name); len(v) > 0 {
			t.Errorf("after the reload, %s reached the upstream: %q", name, v)
		}
	}
	if got := h.Values("X-Floodgate-Client"); len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("after the reload, the upstream was told the client %q, want 127.0.0.1", got)
	}

	write(3000, "  upstream:\n    identity_headers: {user: X-Auth-User}\n    strip_credentials: true\n")
	awaitPolicy(t, gw, `"hourly";q=3000`, 30*time.Second, "the version renaming the user header")
	h = look()
	if v := h.Values("X-Auth-User"); len(v) > 0 {
		t.Errorf("after the second reload, X-Auth-User reached the upstream: %q", v)
	}
	if h.Get("X-Floodgate-User") != "root" || h.Get("X-Floodgate-Client") != "10.9.9.9" {
		t.Errorf("after the second reload, the names no longer the gateway's were not passed on as sent: %v", h)
	}
}
