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
		get := slashFront(t, fr, mux, `version: 1
routes:
  - {name: admin, match: {paths: ["/admin/{id}"]}, upstream: "http://127.0.0.1:1"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: users, rate: 1, per: 1h, burst: 1, match: {paths: ["/users/{id}"]}}
  - {name: admin, rate: 100, per: 1h, burst: 100, match: {routes: [admin]}}
`)
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

// slashFront serves the policy src on front fr, forwarding to upstream,
// and returns a function that sends a GET of a target as written and
// returns the status and body of its answer.
func slashFront(t *testing.T, fr string, upstream http.Handler, src string) func(target string) (int, string) {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	p := compilePolicy(t, "slash.yaml", src)
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
	return func(target string) (int, string) {
		return rawAnswer(t, base, "GET "+target+" HTTP/1.1\r\nHost: a.example\r\n\r\n")
	}
}

// TestEscapedSlashModes: server.escaped_slash tells the gateway how its
// upstream reads a path with an escaped slash. A GitLab-style API
// ("/api/v4/projects/group%2Fproject/issues") with a route for
// "/api/v4/projects/*/issues" before a "/**" one got 400 on every such
// request under both, the only reading there was; under segment it is
// served by its route and charged by the route's limit, under decoded it
// goes to the "/**" route, and under reject any path with %2F gets 400.
// Every request answered 400 reaches no upstream.
func TestEscapedSlashModes(t *testing.T) {
	t.Parallel()
	const (
		gitlab = "/api/v4/projects/group%2Fproject/issues" // segment: issues; decoded: rest
		plain  = "/api/v4/projects/plain/issues"           // issues either way
		moved  = "/api/v4/projects%2Fx/issues"             // segment: rest; decoded: issues
		files  = "/files/a%2Fb"                            // rest either way
	)
	type step struct {
		target string
		status int // when 200, the upstream answers as served says
	}
	served := map[string]string{
		gitlab: "issues group/project", plain: "issues plain", moved: "other " + moved, files: "other " + files,
	}
	for _, tc := range []struct {
		mode  string
		steps []step
	}{
		{"both", []step{{gitlab, 400}, {plain, 200}, {moved, 400}, {gitlab, 400}, {files, 200}}},
		// The GitLab request spends the issues route's limit.
		{"segment", []step{{gitlab, 200}, {plain, 429}, {moved, 200}, {gitlab, 429}, {files, 200}}},
		{"decoded", []step{{gitlab, 200}, {plain, 200}, {moved, 429}, {gitlab, 200}, {files, 200}}},
		{"reject", []step{{gitlab, 400}, {plain, 200}, {moved, 400}, {gitlab, 400}, {files, 400}}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			forFronts(t, allFronts, func(t *testing.T, fr string) {
				var reached atomic.Int64
				mux := http.NewServeMux()
				mux.HandleFunc("GET /api/v4/projects/{id}/issues", func(w http.ResponseWriter, r *http.Request) {
					reached.Add(1)
					fmt.Fprintf(w, "issues %s", r.PathValue("id"))
				})
				mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
					reached.Add(1)
					fmt.Fprintf(w, "other %s", r.URL.EscapedPath())
				})
				get := slashFront(t, fr, mux, `version: 1
server: {escaped_slash: `+tc.mode+`}
routes:
  - {name: issues, match: {paths: ["/api/v4/projects/*/issues"]}, upstream: "http://127.0.0.1:1"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: issues, rate: 1, per: 1h, burst: 1, match: {routes: [issues]}}
`)
				for i, st := range tc.steps {
					before := reached.Load()
					status, body := get(st.target)
					if status != st.status || status == 200 && body != served[st.target] {
						t.Errorf("step %d, %s: %d %q, want %d", i, st.target, status, body, st.status)
					}
					if status == http.StatusBadRequest && !strings.Contains(body, "escaped slash") {
						t.Errorf("step %d, %s: 400 %q, want the gateway's escaped slash refusal", i, st.target, body)
					}
					if n := reached.Load() - before; status != 200 && n != 0 {
						t.Errorf("step %d, %s: answered %d, but reached the upstream", i, st.target, status)
					}
				}
			})
		})
	}
}
