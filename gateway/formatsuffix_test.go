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
			p := compilePolicy(t, "format.yaml", `version: 1
server: {format_suffix: `+mode+`}
routes:
  - {name: login, match: {paths: ["/login"]}, upstream: "http://127.0.0.1:1"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: login, rate: 1, per: 1h, burst: 1, match: {routes: [login]}}
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
