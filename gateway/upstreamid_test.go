package gateway

import (
	"encoding/json"
	"net/http"
	"testing"
)

const upstreamIDPolicy = `
server:
  api_key_header: x-api-key
  upstream:
    identity_headers: {key_name: X-Floodgate-Key, plan: X-Floodgate-Plan, user: X-Floodgate-User, client_ip: X-Floodgate-Client, remaining: X-Floodgate-Remaining}
    strip_credentials: true
plans:
  - {name: gold, rate: 100, burst: 100}
keys:
  - {name: acme, plan: gold, sha256: "` + "6371cb7a907cc8f10740229732c4b6164b285169494b85304468313513427878" + `"}
routes:
  - {name: api, match: {paths: ["/api/**"]}, upstream: "http://127.0.0.1:1"}
  - {name: raw, match: {paths: ["/raw/**"]}, upstream: "http://127.0.0.1:1", strip_credentials: false, identity_headers: {}}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 50, match: {paths: ["/api/**", "/raw/**"]}}
`

// TestIdentityHeadersToUpstream: the upstream gets the identity headers the
// gateway set, never a client's copies (removed even when the gateway has
// nothing to set), and no credential with strip_credentials; a route that
// turns both off forwards what the client sent.
func TestIdentityHeadersToUpstream(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		p := compilePolicy(t, "id.yaml", upstreamIDPolicy)
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan http.Header, 4)
		_, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Clone()
		})
		forged := map[string]string{"x-api-key": "secret", "Authorization": "Bearer tok",
			"X-Floodgate-Key": "forged", "X-Floodgate-Plan": "forged", "X-Floodgate-User": "forged",
			"X-Floodgate-Client": "6.6.6.6", "X-Floodgate-Remaining": "999"}
		if a := do(t, c, "GET", base+"/api/x", forged); a.status != 200 {
			t.Fatalf("status %d %s", a.status, a.body)
		}
		h := <-seen
		// "secret" is no key of the file: the upstream is told its hash prefix.
		if k := h.Get("X-Floodgate-Key"); len(k) != 33 || k[0] != '?' {
			t.Errorf("key name %q, want ? and 32 hex digits", k)
		}
		for _, name := range []string{"X-Floodgate-Plan", "X-Floodgate-User", "x-api-key", "Authorization"} {
			if v, ok := h[http.CanonicalHeaderKey(name)]; ok {
				t.Errorf("%s reached the upstream: %q", name, v)
			}
		}
		if got := h.Get("X-Floodgate-Client"); got != "127.0.0.1" {
			t.Errorf("client %q", got)
		}
		if got := h.Get("X-Floodgate-Remaining"); got != "49" {
			t.Errorf("remaining %q, want 48", got)
		}
		if len(h.Values("X-Floodgate-Client")) != 1 {
			t.Errorf("client values %q", h.Values("X-Floodgate-Client"))
		}

		// A known key: its name and plan, never the key.
		key := map[string]string{"x-api-key": "key-acme"}
		do(t, c, "GET", base+"/api/y", key)
		h = <-seen
		if h.Get("X-Floodgate-Key") != "acme" || h.Get("X-Floodgate-Plan") != "gold" || h.Get("X-Api-Key") != "" {
			t.Errorf("known key: %v", h)
		}

		do(t, c, "GET", base+"/raw/z", forged)
		h = <-seen
		if h.Get("X-Api-Key") != "secret" || h.Get("Authorization") != "Bearer tok" || h.Get("X-Floodgate-User") != "forged" {
			t.Errorf("route without identity headers changed the request: %v", h)
		}
	})
}

const refusalPolicy = `
server:
  refusal: {status: 503, body: "server busy\n", content_type: "text/plain; charset=utf-8", headers: [{name: X-Refused-By, value: server}]}
routes:
  - {name: a, match: {paths: ["/a"]}, upstream: "http://127.0.0.1:1"}
  - {name: b, match: {paths: ["/b"]}, upstream: "http://127.0.0.1:1", refusal: {headers: [{name: X-Refused-By, value: route}]}}
  - {name: c, match: {paths: ["/c"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: la, rate: 1, per: 1h, key: [client_ip, route], match: {routes: [a, b]}}
  - {name: lc, rate: 1, per: 1h, match: {routes: [c]}, refusal: {status: 429, body: '{"error":"slow down"}', headers: [{name: X-Refused-By, value: limit}, {name: Cache-Control, value: no-store}]}}
`

// TestRefusals: a refusal's status, body, content type and headers are
// the binding limit's, else the route's, else the server's; the RateLimit
// fields and Retry-After stay.
func TestRefusals(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		p := compilePolicy(t, "refusal.yaml", refusalPolicy)
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, func(w http.ResponseWriter, r *http.Request) {})
		for _, tc := range []struct {
			path, by, ctype, body string
			status                int
		}{
			{"/a", "server", "text/plain; charset=utf-8", "server busy\n", 503},
			{"/b", "route", "application/json", `{"message":"Too Many Requests"}` + "\n", 429},
			{"/c", "limit", "application/json", `{"error":"slow down"}`, 429},
		} {
			as := doN(t, c, 2, base+tc.path, nil)
			if as[0].status != 200 {
				t.Fatalf("%s: first %d", tc.path, as[0].status)
			}
			a := as[1]
			if a.status != tc.status || a.header.Get("X-Refused-By") != tc.by || a.header.Get("Content-Type") != tc.ctype || a.body != tc.body {
				t.Errorf("%s: %d %q %q %q, want %d %q %q %q", tc.path, a.status, a.header.Get("X-Refused-By"), a.header.Get("Content-Type"), a.body,
					tc.status, tc.by, tc.ctype, tc.body)
			}
			if a.header.Get("Retry-After") == "" || a.header.Get("RateLimit") == "" || a.header.Get("RateLimit-Policy") == "" {
				t.Errorf("%s: fields missing: %v", tc.path, a.header)
			}
			if tc.ctype == "application/json" && !json.Valid([]byte(a.body)) {
				t.Errorf("%s: body %q", tc.path, a.body)
			}
		}
	})
}
