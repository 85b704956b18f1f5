package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// TestEscapedSlashDoesNotDodgeALimit: net/http's ServeMux (like Express and
// Rails) splits a path at its slashes before it decodes a segment, so it
// serves "/users/al%2Fice" as "/users/{id}" with the id "al/ice"; the
// gateway read the path decoded, "/users/al/ice", which the limit on
// "/users/{id}" does not match. Every request spelled with %2F was served
// past the limit, and past a route's limits and api_key_required when the
// other route took it. A limit now applies when either reading matches,
// and a request whose two readings choose different routes is refused
// with 400 before any limit, never forwarded; one whose readings choose
// the same route is served.
func TestEscapedSlashDoesNotDodgeALimit(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		var served atomic.Int64
		mux := http.NewServeMux()
		mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			fmt.Fprintf(w, "user %s", r.PathValue("id"))
		})
		mux.HandleFunc("GET /admin/{id}", func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			fmt.Fprintf(w, "admin %s", r.PathValue("id"))
		})
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			fmt.Fprintf(w, "other %s", r.URL.EscapedPath())
		})
		up := httptest.NewServer(mux)
		t.Cleanup(up.Close)
		p := compilePolicy(t, "slash.yaml", `version: 1
routes:
  - {name: admin, match: {paths: ["/admin/{id}"]}, upstream: "http://127.0.0.1:1"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: users, rate: 1, per: 1h, burst: 1, match: {paths: ["/users/{id}"]}}
  - {name: admin, rate: 100, per: 1h, burst: 100, match: {routes: [admin]}}
`)
		u, _ := url.Parse(up.URL)
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{Upstream: u})
		if err != nil {
			t.Fatal(err)
		}
		var next http.HandlerFunc
		if fr == frontMiddleware {
			next = httputil.NewSingleHostReverseProxy(u).ServeHTTP
		}
		g, err := New(Options{Matcher: pm, Engine: memEngine(t)})
		if err != nil {
			t.Fatal(err)
		}
		base := serveFront(t, fr, g, next)
		get := func(target string) (int, string) {
			return rawAnswer(t, base, "GET "+target+" HTTP/1.1\r\nHost: a.example\r\n\r\n")
		}
		if status, body := get("/users/alice"); status != 200 || body != "user alice" {
			t.Fatalf("the limit's one request: %d %q", status, body)
		}
		for _, target := range []string{"/users/alice", "/users/al%2Fice", "/users/al%2fice", "/users/a%2F%2Fb",
			"/users/x%2F..%2Fy", "http://a.example/users/al%2Fice"} {
			if status, body := get(target); status != http.StatusTooManyRequests {
				t.Errorf("%s: %d %q, want 429 from the limit on /users/{id}", target, status, body)
			}
		}
		// "/admin/a%2Fb" is the admin route to the upstream and the rest
		// route to the decoded path.
		before := served.Load()
		for _, target := range []string{"/admin/a%2Fb", "/admin%2Fx", "/x%2F..%2Fadmin/y"} {
			if status, body := get(target); status != http.StatusBadRequest || !strings.Contains(body, "escaped slash") {
				t.Errorf("%s: %d %q, want 400", target, status, body)
			}
		}
		if n := served.Load() - before; n != 0 {
			t.Errorf("%d requests with an ambiguous route reached the upstream", n)
		}
		// Both readings in one route: served as sent.
		if status, body := get("/admin/%2Fb"); status != 200 || body != "admin /b" {
			t.Errorf("/admin/%%2Fb: %d %q, want 200 from the upstream", status, body)
		}
		for _, target := range []string{"/files/a%2Fb", "/projects/group%2Fproject/issues"} {
			if status, body := get(target); status != 200 || body != "other "+target {
				t.Errorf("%s: %d %q, want 200 from the upstream", target, status, body)
			}
		}
	})
}
