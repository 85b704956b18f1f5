package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// TestTargetReadAsOnePath: both engines read a request target, in
// absolute form above all (any scheme, no path, a query alone, user info,
// a port, upper case), as one path: each routes and limits it alike, asks
// the upstream for the same path and logs the same one, the middleware
// too, under every server.escaped_slash. Before 2026-12-07 the edge engine
// read fasthttp's path, slashes merged and dot segments resolved, where
// net/http's is the target's decoded: /a%00/../b (a NUL, a tab, a
// backslash or a space ending a segment before "..") was refused 400 on
// net/http and served as /b on the edge engine, limited by the route of
// /b; //h.example/x and /a/../b were logged as sent on net/http and as
// /h.example/x and /b on the edge engine, which asked the upstream for
// //h.example/x; and http://h.example was logged with the path "" on
// net/http and "/" on the edge engine.
func TestTargetReadAsOnePath(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"both", "decoded", "segment"} {
		server := "server: {escaped_slash: " + mode + "}"
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testTargetReadAsOnePath(t, server)
		})
	}
}

// targetReading is what a front made of one request target: its answer,
// the limit that charged it, what the upstream was asked for, and the
// access record's path and route (logged says how many records).
type targetReading struct {
	status            int
	limit, upstream   string
	logged            int
	logPath, logRoute string
}

func (r targetReading) String() string {
	return fmt.Sprintf("%d, limited by %s, the upstream asked for %q, %d record(s) of path %q, route %q",
		r.status, r.limit, r.upstream, r.logged, r.logPath, r.logRoute)
}

func testTargetReadAsOnePath(t *testing.T, server string) {
	fronts := map[string]*targetFront{}
	for _, fr := range allFronts {
		fronts[fr] = newTargetFront(t, fr, server)
	}
	segment := strings.Contains(server, "segment")
	bySlash := func(both, decoded, segmented targetReading) targetReading {
		switch {
		case segment:
			return segmented
		case strings.Contains(server, "decoded"):
			return decoded
		}
		return both
	}
	served := func(limit, upstream, path string) targetReading {
		return targetReading{200, limit, upstream, 1, path, strings.TrimSuffix(limit, "-limit")}
	}
	refused := func(path string) targetReading { return targetReading{400, "", "", 1, path, ""} }
	for _, c := range []struct {
		method, target string
		want           targetReading
		// preflight: answered before the request path, which the
		// middleware, an application's handler, leaves to its server.
		preflight bool
		// unread: the edge engine's parser refuses the request line, as
		// net/http's server refuses one it cannot read: no record.
		unread bool
	}{
		{"GET", "http://h.example", served("root-limit", "/", "/"), false, false},
		{"GET", "http://h.example?x=1", served("root-limit", "/?x=1", "/"), false, false},
		{"GET", "http://h.example?", served("root-limit", "/?", "/"), false, false},
		{"GET", "HTTP://H.EXAMPLE/a", served("a-limit", "/a", "/a"), false, false},
		{"GET", "http://user@h.example/a", served("a-limit", "/a", "/a"), false, false},
		{"GET", "http://h.example:80/a/../b", served("b-limit", "/b", "/a/../b"), false, false},
		{"GET", "ftp://h.example/x", served("x-limit", "/x", "/x"), false, false},
		{"GET", "http://h.example/%61", served("a-limit", "/%61", "/a"), false, false},
		{"GET", "http://h.example/a?u=http://x/b", served("a-limit", "/a?u=http://x/b", "/a"), false, false},
		{"GET", "http://h.example//x", served("x-limit", "//x", "//x"), false, false},
		// Not absolute form: a path, its first segment h.example.
		{"GET", "//h.example/x", served("rest-limit", "//h.example/x", "//h.example/x"), false, false},
		{"GET", "/a//b", served("a-limit", "/a//b", "/a//b"), false, false},
		{"GET", "/a/b/..", served("a-limit", "/a/", "/a/b/.."), false, false},
		{"GET", "http://h.example/a%2Fb", bySlash(refused("/a/b"), served("a-limit", "/a%2Fb", "/a/b"),
			served("rest-limit", "/a%2Fb", "/a/b")), false, false},
		{"GET", "/b/x%2F..%2F..%2Fa", bySlash(refused("/b/x/../../a"), served("a-limit", "/b/x%2F..%2F..%2Fa", "/b/x/../../a"),
			served("b-limit", "/b/x%2F..%2F..%2Fa", "/b/x/../../a")), false, false},
		// What badTarget refuses, whatever dot segment follows it.
		{"GET", "http://h.example/a%20/../b", refused("/a /../b"), false, false},
		{"GET", "/a%09/../b", refused("/a\t/../b"), false, false},
		{"GET", "/a%5C/../b", refused("/a\\/../b"), false, false},
		{"GET", "/a%00/../b", refused("/a\x00/../b"), false, false},
		{"GET", "/a/;x/../b", refused("/a/;x/../b"), true, false},
		{"GET", "http://h.example/a#frag", refused("/a#frag"), true, false},
		{"GET", "http:/x", refused("http:/x"), true, true},
		{"OPTIONS", "*", targetReading{200, "", "", 1, "*", ""}, true, false},
	} {
		for _, fr := range allFronts {
			if fr == frontMiddleware && c.preflight {
				continue
			}
			want := c.want
			if fr == frontEdge && c.unread {
				want.logged, want.logPath = 0, ""
			}
			got := fronts[fr].read(t, c.method, c.target, want.logged)
			if fr == frontMiddleware {
				// The application is handed the request as sent.
				want.upstream = got.upstream
			}
			if got != want {
				t.Errorf("%s %s on %s: %v; want %v", c.method, c.target, fr, got, want)
			}
		}
	}
}

const onePathPolicy = `version: 1
routes:
  - {name: root, match: {paths: ["/"]}, upstream: "http://127.0.0.1:9"}
  - {name: a, match: {paths: ["/a", "/a/**"]}, upstream: "http://127.0.0.1:9"}
  - {name: b, match: {paths: ["/b", "/b/**"]}, upstream: "http://127.0.0.1:9"}
  - {name: x, match: {paths: ["/x", "/x/**"]}, upstream: "http://127.0.0.1:9"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: root-limit, match: {routes: [root]}, algorithm: fixed_window, limit: 1000, window: 1h, key: global}
  - {name: a-limit, match: {routes: [a]}, algorithm: fixed_window, limit: 1000, window: 1h, key: global}
  - {name: b-limit, match: {routes: [b]}, algorithm: fixed_window, limit: 1000, window: 1h, key: global}
  - {name: x-limit, match: {routes: [x]}, algorithm: fixed_window, limit: 1000, window: 1h, key: global}
  - {name: rest-limit, match: {routes: [rest]}, algorithm: fixed_window, limit: 1000, window: 1h, key: global}
`

// targetFront is a gateway enforcing onePathPolicy on one front, with
// what its upstream was asked for and its access log.
type targetFront struct {
	base string
	got  chan string
	sink *recordSink
}

// newTargetFront serves a gateway enforcing onePathPolicy and server (the
// policy file's server section) on front, as floodgate serves it (the
// net/http engine leaves OPTIONS * to the gateway), every route forwarded
// to an upstream that records the target it was sent.
func newTargetFront(t *testing.T, front, server string) *targetFront {
	t.Helper()
	pm, err := NewPolicyMatcher(Fixed(compilePolicy(t, "onepath.yaml", onePathPolicy+server)), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tf := &targetFront{got: make(chan string, 1), sink: &recordSink{}}
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tf.got <- r.RequestURI })
	g, err := New(Options{Matcher: pm, Engine: memEngine(t), AccessLog: tf.sink})
	if err != nil {
		t.Fatal(err)
	}
	switch front {
	case frontNetHTTP:
		u := httptest.NewServer(up)
		t.Cleanup(u.Close)
		pm.upstream, _ = url.Parse(u.URL)
		srv := httptest.NewUnstartedServer(g)
		srv.Config.DisableGeneralOptionsHandler = true
		srv.Start()
		t.Cleanup(srv.Close)
		tf.base = srv.URL
	case frontEdge:
		u := httptest.NewServer(up)
		t.Cleanup(u.Close)
		pm.upstream, _ = url.Parse(u.URL)
		tf.base = serveFront(t, front, g, nil)
	default:
		tf.base = serveFront(t, front, g, up)
	}
	return tf
}

// read sends method and target to the front on a connection of its own
// and returns what it made of them, having waited for records records.
func (tf *targetFront) read(t *testing.T, method, target string, records int) targetReading {
	t.Helper()
	s := tf.sink
	s.mu.Lock()
	before := len(s.recs)
	s.mu.Unlock()
	resp, _ := rawResponse(t, tf.base, method+" "+target+" HTTP/1.1\r\nHost: h.example\r\nConnection: close\r\n\r\n")
	var r targetReading
	r.status = resp.StatusCode
	r.limit, _, _ = strings.Cut(resp.Header.Get("RateLimit-Policy"), ";")
	r.limit = strings.Trim(r.limit, `"`)
	select {
	case r.upstream = <-tf.got:
	default:
	}
	// The record is written once the answer is: bounded wait for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := len(s.recs)
		s.mu.Unlock()
		if n >= before+records || time.Now().After(deadline) {
			break
		}
	}
	s.mu.Lock()
	recs := append([]accesslog.Record(nil), s.recs[before:]...)
	s.mu.Unlock()
	r.logged = len(recs)
	if len(recs) > 0 {
		r.logPath, r.logRoute = recs[0].Path, recs[0].Route
	}
	return r
}

// TestTargetPathReadsAsNetHTTP: TargetPath, the edge engine's reading of
// a target's path, is net/http's server's (URL.Path and URL.RawPath of
// url.ParseRequestURI), but "/" for an absolute-form target without a
// path.
func TestTargetPathReadsAsNetHTTP(t *testing.T) {
	for _, target := range []string{
		"/", "/a", "/a?b", "/a/../b", "//h/x", "/a//b", "/%61", "/a%20b", "/a%2Fb", "/a%2fb?x=%2F", "/a;b/..;/c",
		"/a%00/../b", "/caf%C3%A9", "/café", "/a%3Bb", "/a+b", "/a?u=http://x/y", "http://h", "http://h?x=1",
		"http://h?", "HTTP://H/a", "http://user@h/a", "http://h:80/a/../b", "ftp://h/x", "http://[::1]:80/a%2Fb",
		"http://h//x", "a+b.c-d://h/x?y",
	} {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if u.Path == "" {
			u.Path = "/"
		}
		if p, raw := TargetPath(target); p != u.Path || raw != u.RawPath {
			t.Errorf("TargetPath(%q) = %q, %q; net/http reads %q, %q", target, p, raw, u.Path, u.RawPath)
		}
	}
}
