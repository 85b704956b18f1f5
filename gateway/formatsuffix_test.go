package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
)

// railsStyle answers as Rails routes "/login(.:format)": a final ".format"
// of the last segment is the format, the rest the route. It answers "login
// FORMAT" for /login, "other PATH" elsewhere.
func railsStyle(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimSuffix(r.URL.Path, "/")
	format := "html"
	if i := strings.LastIndexByte(p, '.'); i > strings.LastIndexByte(p, '/')+1 {
		p, format = p[:i], p[i+1:]
	}
	if p == "/login" {
		fmt.Fprintf(w, "login %s", format)
		return
	}
	fmt.Fprintf(w, "other %s", r.URL.Path)
}

// springStyle answers as Spring's suffix pattern matching routes "/login":
// as "/login.*", so that any text after a dot of the last segment, dots
// and all, is not part of the route. It answers "login" for /login and
// /login.ANYTHING, "other PATH" elsewhere.
func springStyle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/login.") && !strings.Contains(r.URL.Path[len("/login."):], "/") {
		fmt.Fprint(w, "login")
		return
	}
	fmt.Fprintf(w, "other %s", r.URL.Path)
}

// formatFront serves front fr of a gateway in front of upstream whose
// policy has server.format_suffix: mode, a route for "/login" limited to
// one request an hour and a route for the rest, and returns how a raw
// GET of a target is answered.
func formatFront(t *testing.T, fr, mode, upstream string) func(target string) (int, string) {
	t.Helper()
	p := compilePolicy(t, "format.yaml", `version: 1
server: {format_suffix: `+mode+`}
routes:
  - {name: login, match: {paths: ["/login"]}, upstream: "http://127.0.0.1:1"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: login, rate: 1, per: 1h, burst: 1, match: {routes: [login]}}
`)
	u, _ := url.Parse(upstream)
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

// TestFormatSuffixDoesNotDodgeALimit: Rails serves "/login.json" (and any
// other format) as "/login", so a limit on "/login" was dodged by a
// suffix, which no path pattern could name ("*" is a whole segment). With
// server.format_suffix: ignore, a path is matched without its final
// ".format", by routes and limits alike; by default it is matched as it
// is.
func TestFormatSuffixDoesNotDodgeALimit(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(railsStyle))
	t.Cleanup(up.Close)
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		for _, mode := range []string{"keep", "ignore"} {
			get := formatFront(t, fr, mode, up.URL)
			if status, body := get("/login"); status != 200 || body != "login html" {
				t.Fatalf("%s: the limit's one request: %d %q", mode, status, body)
			}
			for _, target := range []string{"/login.json", "/login.xml/", "/login.anything?x=1"} {
				status, body := get(target)
				switch {
				case mode == "ignore" && status != http.StatusTooManyRequests:
					t.Errorf("%s: %s: %d %q, want 429 from the limit on /login", mode, target, status, body)
				case mode == "keep" && (status != 200 || !strings.HasPrefix(body, "login ")):
					t.Errorf("%s: %s: %d %q, want 200 from the upstream (the path matched as it is)", mode, target, status, body)
				}
			}
			// Not a format: a segment that is only a suffix, another segment.
			for _, target := range []string{"/.env", "/login.d/x"} {
				if status, body := get(target); status != 200 || !strings.HasPrefix(body, "other ") {
					t.Errorf("%s: %s: %d %q, want 200 from the upstream", mode, target, status, body)
				}
			}
		}
	})
}

// TestFormatSuffixOfSeveralDotsDoesNotDodgeALimit: Spring's suffix pattern
// matching serves "/login.a.json" as "/login" (its route is "/login.*"),
// so with server.format_suffix: ignore the text from the first dot of the
// last segment is left out of matching: a limit on "/login" spent, every
// such target is refused 429, where matching without the text after the
// last dot alone ("/login.a") forwarded each to be served as "/login".
// Rails, which answers 404 to such a path, is asked nothing more.
func TestFormatSuffixOfSeveralDotsDoesNotDodgeALimit(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(springStyle))
	t.Cleanup(up.Close)
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		get := formatFront(t, fr, "ignore", up.URL)
		if status, body := get("/login"); status != 200 || body != "login" {
			t.Fatalf("the limit's one request: %d %q", status, body)
		}
		for _, target := range []string{"/login.a.json", "/login.json.html", "/login..json", "/login.x.y.z/", "/login.json.xml?x=1"} {
			if status, body := get(target); status != http.StatusTooManyRequests {
				t.Errorf("%s: %d %q, want 429 from the limit on /login", target, status, body)
			}
		}
		// A segment that starts with its only dot is no format, as before.
		if status, body := get("/.login.json"); status != 200 || body != "other /.login.json" {
			t.Errorf("/.login.json: %d %q, want 200 from the upstream", status, body)
		}
	})
}
