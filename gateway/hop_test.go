package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// TestHopByHopFields: each engine's proxy removes the hop-by-hop fields
// (and those the Connection field names) both ways, extends the
// X-Forwarded-For of a trusted proxy and sets X-Forwarded-Host and -Proto,
// as net/http's reverse proxy does.
func TestHopByHopFields(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testHopByHopFields)
}

func testHopByHopFields(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	got := make(chan http.Header, 1)
	trusted := funcMatcher(func(r *Request, m *Match) error {
		m.PeerTrusted = true
		return oneRule(rule)(r, m)
	})
	_, base, c := startFront(t, fr, Options{Matcher: trusted, Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) {
			h := r.Header.Clone()
			h.Set("Host", r.Host)
			got <- h
			w.Header().Set("Connection", "X-Up-Hop")
			w.Header().Set("X-Up-Hop", "1")
			w.Header().Set("X-Up-Kept", "1")
		})
	a := do(t, c, "GET", base+"/x", map[string]string{
		"Connection": "keep-alive, X-Hop", "X-Hop": "1", "Keep-Alive": "timeout=5", "Forwarded": "for=192.0.2.9",
		"X-Forwarded-For": "203.0.113.1", "X-Kept": "1", "Proxy-Authorization": "Basic eA==",
	})
	if a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	h := <-got
	for _, name := range []string{"X-Hop", "Keep-Alive", "Forwarded", "Proxy-Authorization"} {
		if v := h.Get(name); v != "" {
			t.Errorf("the upstream got %s: %q", name, v)
		}
	}
	if h.Get("X-Kept") != "1" || h.Get("X-Forwarded-For") != "203.0.113.1, 127.0.0.1" || h.Get("X-Forwarded-Proto") != "http" ||
		h.Get("X-Forwarded-Host") == "" || h.Get("X-Forwarded-Host") == h.Get("Host") {
		t.Errorf("the upstream got %v", h)
	}
	if a.header.Get("X-Up-Hop") != "" || a.header.Get("X-Up-Kept") != "1" || a.header.Get("RateLimit") == "" {
		t.Errorf("the client got %v", a.header)
	}
}

// TestHopByHopFieldsOfEveryConnectionField: a message may carry its
// Connection field more than once; the fields that any of them names are
// hop-by-hop and removed, both ways, on each engine.
func TestHopByHopFieldsOfEveryConnectionField(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testHopByHopFieldsOfEveryConnectionField)
}

func testHopByHopFieldsOfEveryConnectionField(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	got := make(chan http.Header, 1)
	_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) {
			got <- r.Header.Clone()
			w.Header()["Connection"] = []string{"keep-alive", "X-Up-Hop"}
			w.Header().Set("X-Up-Hop", "1")
			w.Header().Set("X-Up-Kept", "1")
		})
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: example.test\r\nConnection: keep-alive\r\nConnection: X-Hop\r\nX-Hop: 1\r\nX-Kept: 1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	h := <-got
	if h.Get("X-Hop") != "" || h.Get("X-Kept") != "1" {
		t.Errorf("the upstream got %v", h)
	}
	if resp.Header.Get("X-Up-Hop") != "" || resp.Header.Get("X-Up-Kept") != "1" {
		t.Errorf("the client got %v", resp.Header)
	}
}

// TestForwardedFieldsFromUntrustedPeers: what a client says of its own
// address (X-Forwarded-For, X-Real-IP, Forwarded) reaches the upstream
// only from a trusted proxy (server.trusted_proxies), on each engine. From
// any other peer, X-Forwarded-For is the peer's address alone, as NGINX's
// proxy_set_header X-Forwarded-For $remote_addr gives it; from a trusted
// proxy the chain is kept and the peer added. X-Real-IP passes only from a
// trusted proxy, and Forwarded never does.
func TestForwardedFieldsFromUntrustedPeers(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testForwardedFieldsFromUntrustedPeers)
}

func testForwardedFieldsFromUntrustedPeers(t *testing.T, fr string) {
	for _, c := range []struct {
		trusted               string
		xff, realIP, limitKey string
	}{
		{"", "127.0.0.1", "", "127.0.0.1"},
		{"trusted_proxies: [10.9.9.9/32]", "127.0.0.1", "", "127.0.0.1"},
		{"trusted_proxies: [127.0.0.1/32]", "203.0.113.1, 127.0.0.1", "203.0.113.2", "203.0.113.1"},
	} {
		p := compilePolicy(t, "xff.yaml", fmt.Sprintf(`version: 1
server:
  %s
  headers: {binding_limit: X-Limit}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
limits:
  - name: per-ip
    algorithm: fixed_window
    limit: 1
    window: 1h
    key: client_ip
`, c.trusted))
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan http.Header, 1)
		_, base, client := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t)},
			func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() })
		said := map[string]string{"X-Forwarded-For": "203.0.113.1", "X-Real-Ip": "203.0.113.2", "Forwarded": "for=203.0.113.3"}
		if a := do(t, client, "GET", base+"/x", said); a.status != 200 {
			t.Fatalf("%q: status %d", c.trusted, a.status)
		}
		h := <-got
		if h.Get("X-Forwarded-For") != c.xff || len(h.Values("X-Forwarded-For")) != 1 || h.Get("X-Real-Ip") != c.realIP ||
			h.Get("Forwarded") != "" {
			t.Errorf("%q: the upstream got X-Forwarded-For %q, X-Real-IP %q, Forwarded %q; want %q, %q and no Forwarded",
				c.trusted, h.Values("X-Forwarded-For"), h.Values("X-Real-Ip"), h.Values("Forwarded"), c.xff, c.realIP)
		}
		// The limit counted the address the upstream was told: a second
		// request from the same client is refused, one that names
		// another address passes only when the peer is trusted.
		if a := do(t, client, "GET", base+"/x", said); a.status != 429 {
			t.Errorf("%q: the second request got %d, want 429", c.trusted, a.status)
		}
		other := map[string]string{"X-Forwarded-For": "198.51.100.7"}
		want := 429
		if c.limitKey != "127.0.0.1" {
			want = 200
		}
		if a := do(t, client, "GET", base+"/x", other); a.status != want {
			t.Errorf("%q: a request naming another client got %d, want %d", c.trusted, a.status, want)
		} else if want == 200 {
			if h := <-got; h.Get("X-Forwarded-For") != "198.51.100.7, 127.0.0.1" {
				t.Errorf("%q: the upstream got %v", c.trusted, h)
			}
		}
	}
}

// TestAbsoluteFormTargetHost: a request whose target is in absolute form
// names its host there, and that host wins over the Host field (RFC 9112
// §3.2.2): the request is routed, limited and forwarded by it on each
// engine, and the upstream is told that host in X-Forwarded-Host.
func TestAbsoluteFormTargetHost(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testAbsoluteFormTargetHost)
}

func testAbsoluteFormTargetHost(t *testing.T, fr string) {
	got := make(chan string, 4)
	base := policyFront(t, fr, "hosts.yaml", `version: 1
routes:
  - name: api
    match: {hosts: [api.example.com], paths: ["/**"]}
    upstream: http://127.0.0.1:9
  - name: other
    match: {hosts: [other.example], paths: ["/**"]}
    upstream: http://127.0.0.1:9
limits:
  - name: api-limit
    match: {routes: [api]}
    algorithm: fixed_window
    limit: 5
    window: 1h
    key: global
  - name: other-limit
    match: {routes: [other]}
    algorithm: fixed_window
    limit: 7
    window: 1h
    key: global
`, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-Forwarded-Host") + " " + r.URL.Path
	})
	for _, c := range []struct {
		target, host string
		policy, xfh  string
	}{
		{"http://other.example/x", "api.example.com", `"other-limit";q=7;w=3600`, "other.example /x"},
		{"http://api.example.com/y", "other.example", `"api-limit";q=5;w=3600`, "api.example.com /y"},
		{"/z", "other.example", `"other-limit";q=7;w=3600`, "other.example /z"},
	} {
		resp := rawGet(t, base, c.target, c.host)
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != c.policy {
			t.Errorf("%s with Host %s: %d, limited by %q; want 200 and %q", c.target, c.host, resp.StatusCode,
				resp.Header.Get("RateLimit-Policy"), c.policy)
			continue
		}
		if h := <-got; h != c.xfh {
			t.Errorf("%s with Host %s: the upstream was told %q, want %q", c.target, c.host, h, c.xfh)
		}
	}
}

// TestAbsoluteFormWithoutAHostIsRefused: an absolute-form target whose
// authority names no host (http:///x, user info or a port alone) is
// refused with 400 before any route or limit on each engine, as RFC 9110
// §4.2.1 has a recipient reject an http URI with an empty host. Before
// 2026-12-06 net/http's server took the Host field's host for it and the
// edge engine no host at all, so one request was routed and limited by
// api.example.com on one engine and by the routes for any host on the
// other, past that host's limits, the upstream told no X-Forwarded-Host.
func TestAbsoluteFormWithoutAHostIsRefused(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testAbsoluteFormWithoutAHostIsRefused)
}

func testAbsoluteFormWithoutAHostIsRefused(t *testing.T, fr string) {
	targetsRefused(t, fr, []string{"http:///x", "HTTPS:///x", "http://u@/x", "http://:80/x", "http://?q=1"}, nil)
}

// TestTargetNeitherPathNorAbsoluteURIIsRefused: a target that is neither a
// path nor an absolute URI with an authority (http:/x, x:/y, x:y) is
// refused with 400 before any route or limit on each engine, as RFC 9112
// §3.2 allows no other form but CONNECT's and OPTIONS *. Before
// 2026-12-06 net/http's server took http:/x for the path /x on the Host
// field's host and forwarded it, limited, where the edge engine answered
// 400. A path with a colon, a URI in the query and an absolute URI are
// still served.
func TestTargetNeitherPathNorAbsoluteURIIsRefused(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		targetsRefused(t, fr, []string{"http:/x", "https:/x", "HTTP:x", "x:/y", "x:y", "x:/a://b"},
			[]string{"/a:b", "/x?u=http:/y", "/x?u=http://y", "http://api.example.com/x"})
	})
}

// targetsRefused sends each target of refused and served to front fr,
// routed and limited by host, and fails unless each of refused is answered
// 400 before any limit, then the connection closed, and the upstream gets
// each of served.
func targetsRefused(t *testing.T, fr string, refused, served []string) {
	t.Helper()
	var got atomic.Int64
	base := policyFront(t, fr, "hosts.yaml", `version: 1
routes:
  - {name: api, match: {hosts: [api.example.com], paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: api-limit, match: {routes: [api]}, algorithm: fixed_window, limit: 5, window: 1h, key: global}
  - {name: rest-limit, match: {routes: [rest]}, algorithm: fixed_window, limit: 7, window: 1h, key: global}
`, func(w http.ResponseWriter, r *http.Request) { got.Add(1) })
	for _, target := range refused {
		answers, closed := interimExchange(t, base, "GET "+target+" HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
		if len(answers) != 1 || answers[0].StatusCode != http.StatusBadRequest || !closed {
			t.Errorf("%s: answered %v (closed %v), want 400, then closed", target, interimStatuses(answers), closed)
		}
		for _, a := range answers {
			if pol := a.Header.Get("RateLimit-Policy"); pol != "" {
				t.Errorf("%s: limited by %s, want no limit", target, pol)
			}
		}
	}
	if n := got.Load(); n != 0 {
		t.Errorf("the upstream served %d of them", n)
	}
	for _, target := range served {
		before := got.Load()
		answers, _ := interimExchange(t, base, "GET "+target+" HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
		if len(answers) != 1 || answers[0].StatusCode != http.StatusOK || got.Load() != before+1 {
			t.Errorf("%s: answered %v, the upstream got %d, want it served", target, interimStatuses(answers), got.Load()-before)
		}
	}
}

// TestProxyAnswersWhatItNeverForwards: the reverse proxy answers itself,
// before any limit and the same way on each engine, the requests no
// upstream should get as a path: CONNECT (405, as NGINX), OPTIONS * (200,
// as net/http's server), another method on * such as HTTP/2's preface
// sent as HTTP/1.1 (400) and a method longer than any there is (501).
// Refusals close the connection.
func TestProxyAnswersWhatItNeverForwards(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testProxyAnswersWhatItNeverForwards)
}

func testProxyAnswersWhatItNeverForwards(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "one", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour})
	up := newUpstream(t, nil)
	u, _ := url.Parse(up.URL)
	m := funcMatcher(func(r *Request, m *Match) error {
		m.Upstream = u
		return oneRule(rule)(r, m)
	})
	g, err := New(Options{Matcher: m, Engine: memEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	base := serveFront(t, fr, g, nil)
	for _, c := range []struct {
		name, head string
		status     int
		closed     bool
	}{
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443", 405, true},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: x", 200, false},
		{"PRI *", "PRI * HTTP/1.1\r\nHost: x", 400, true},
		{"GET *", "GET * HTTP/1.1\r\nHost: x", 400, true},
		{"a method of 10,000 bytes", strings.Repeat("M", 10000) + " /x HTTP/1.1\r\nHost: x", 501, true},
	} {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, c.head+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Close != c.closed || resp.Header.Get("RateLimit") != "" {
			t.Errorf("%s: %d (closed %v) %v, want %d (closed %v) before any limit", c.name, resp.StatusCode, resp.Close, resp.Header, c.status, c.closed)
		}
	}
	if n := up.served.Load(); n != 0 {
		t.Errorf("the upstream served %d of them", n)
	}
	// Gateway.ServeHTTP answers OPTIONS * itself too, for a server that
	// does not (http.Server.DisableGeneralOptionsHandler).
	if a := serve(g, "OPTIONS", "*", nil); a.status != 200 || up.served.Load() != 0 {
		t.Errorf("OPTIONS * through ServeHTTP: %d, upstream %d", a.status, up.served.Load())
	}
	// The limit of one is still whole.
	if a := do(t, newClient(t), "GET", base+"/x", nil); a.status != 200 {
		t.Errorf("the first request that reaches the limit: %d", a.status)
	}
}

// TestAbsoluteFormPathForwardedAsSent: the path and query of an
// absolute-form target reach the upstream as the client sent them, as an
// origin-form target's do, on each engine: the escapes the gateway read
// (an escaped slash under server.escaped_slash: segment above all) are the
// upstream's too. Before 2026-12-06 the edge engine forwarded the path
// fasthttp had decoded and cleaned: http://a.example/admin%2Fx, limited
// as the one segment "admin%2Fx" by the route for any path, reached the
// upstream as /admin/x, its admin route's path.
func TestAbsoluteFormPathForwardedAsSent(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testAbsoluteFormPathForwardedAsSent)
}

func testAbsoluteFormPathForwardedAsSent(t *testing.T, fr string) {
	got := make(chan string, 1)
	base := policyFront(t, fr, "segment.yaml", `version: 1
server: {escaped_slash: segment}
routes:
  - {name: admin, match: {paths: ["/admin/**"]}, upstream: "http://127.0.0.1:9"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: admin-limit, match: {routes: [admin]}, algorithm: fixed_window, limit: 100, window: 1h, key: global}
  - {name: rest-limit, match: {routes: [rest]}, algorithm: fixed_window, limit: 200, window: 1h, key: global}
`, func(w http.ResponseWriter, r *http.Request) { got <- r.RequestURI })
	for _, c := range []struct{ target, limit, upstream string }{
		{"http://a.example/admin%2Fx", "rest-limit", "/admin%2Fx"},
		{"http://a.example/admin%2f..%2fx", "rest-limit", "/admin%2f..%2fx"},
		{"http://a.example/users/a%2Fb?x=%2F", "rest-limit", "/users/a%2Fb?x=%2F"},
		{"http://a.example/%61dmin/x", "admin-limit", "/%61dmin/x"},
		{"http://a.example", "rest-limit", "/"},
		{"http://a.example?q=1", "rest-limit", "/?q=1"},
		{"HTTP://a.example:80/admin/x", "admin-limit", "/admin/x"},
		{"/admin%2Fx", "rest-limit", "/admin%2Fx"},
	} {
		resp := rawGet(t, base, c.target, "a.example")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d, want 200", c.target, resp.StatusCode)
			continue
		}
		limit, _, _ := strings.Cut(resp.Header.Get("RateLimit-Policy"), ";")
		if u := <-got; limit != `"`+c.limit+`"` || u != c.upstream {
			t.Errorf("%s: limited by %s, the upstream asked for %s; want %s and %s", c.target, limit, u, c.limit, c.upstream)
		}
	}
}

// TestHostKeyCountsTheRoutedHost: a limit keyed by header:Host counts a
// request by the host it was routed by (an absolute-form target's, else
// the Host field's), read as routes read it (no port, no final dot, in
// lower case), on each engine. Before 2026-12-06 net/http's server had
// taken Host out of the header fields, so on the net/http engine such a
// limit found no field and counted nothing; the edge engine counted the
// field as sent, so A.example, a.example., a.example:80 or any Host beside
// an absolute-form target were each a counter of their own.
func TestHostKeyCountsTheRoutedHost(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testHostKeyCountsTheRoutedHost)
}

func testHostKeyCountsTheRoutedHost(t *testing.T, fr string) {
	base := policyFront(t, fr, "hostkey.yaml", `version: 1
routes:
  - {name: tenants, match: {hosts: [a.example, b.example], paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: per-host, match: {routes: [tenants]}, algorithm: fixed_window, limit: 2, window: 1h, key: "header:Host"}
`, func(w http.ResponseWriter, r *http.Request) {})
	for _, c := range []struct {
		target, host string
		status       int
	}{
		{"/x", "a.example", 200},
		{"/x", "a.example", 200},
		{"/x", "a.example", 429},
		{"/x", "A.example", 429},
		{"/x", "a.example.", 429},
		{"/x", "a.example:80", 429},
		{"http://a.example/x", "b.example", 429},
		{"http://a.example/x", "z.example", 429},
		{"/x", "b.example", 200}, // another host, counted apart
	} {
		if status, _ := rawAnswer(t, base, "GET "+c.target+" HTTP/1.1\r\nHost: "+c.host+"\r\nConnection: close\r\n\r\n"); status != c.status {
			t.Errorf("%s with Host %s: %d, want %d", c.target, c.host, status, c.status)
		}
	}
}

// TestForwardedFieldsSentOnce: a client that sends X-Forwarded-For,
// X-Forwarded-Host or X-Forwarded-Proto on several lines has the
// upstream told one line of each, the gateway's, on each engine: the chain
// it extends from a trusted proxy (every line of it, in order), the peer
// alone from another, the host it routed by and its scheme. An upstream
// that reads the last line, or joins the lines and takes the last hop as
// its client (Express's "trust proxy" 1, Rails' remote_ip), would
// otherwise be told an address or a host the client wrote.
func TestForwardedFieldsSentOnce(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testForwardedFieldsSentOnce)
}

func testForwardedFieldsSentOnce(t *testing.T, fr string) {
	for _, c := range []struct {
		trusted string
		xff     string
	}{
		{"", "127.0.0.1"},
		{"trusted_proxies: [127.0.0.1/32]", "203.0.113.1, 198.51.100.2, 127.0.0.1"},
	} {
		p := compilePolicy(t, "once.yaml", fmt.Sprintf(`version: 1
server:
  %s
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
`, c.trusted))
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan http.Header, 1)
		_, base, _ := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t)},
			func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() })
		status, _ := rawAnswer(t, base, "GET /x HTTP/1.1\r\nHost: a.example\r\n"+
			"X-Forwarded-For: 203.0.113.1\r\nX-Forwarded-For: 198.51.100.2\r\n"+
			"X-Forwarded-Host: evil.example\r\nX-Forwarded-Host: evil2.example\r\n"+
			"X-Forwarded-Proto: https\r\nX-Forwarded-Proto: https\r\nConnection: close\r\n\r\n")
		if status != http.StatusOK {
			t.Fatalf("%q: status %d", c.trusted, status)
		}
		h := <-got
		for k, want := range map[string]string{"X-Forwarded-For": c.xff, "X-Forwarded-Host": "a.example", "X-Forwarded-Proto": "http"} {
			if v := h.Values(k); len(v) != 1 || v[0] != want {
				t.Errorf("%q: the upstream got %s %q, want [%q]", c.trusted, k, v, want)
			}
		}
	}
}

// TestNoHostNoForwardedHost: a request without a host (HTTP/1.0 without
// Host) reaches the upstream without X-Forwarded-Host on each engine,
// rather than with an empty one on net/http: there is no host to tell.
func TestNoHostNoForwardedHost(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		got := make(chan http.Header, 1)
		_, base, _ := startFront(t, fr, Options{Matcher: MatcherFunc(func(*Request, *Match) error { return nil }), Engine: memEngine(t)},
			func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() })
		if status, _ := rawAnswer(t, base, "GET /x HTTP/1.0\r\nX-Forwarded-Host: evil.example\r\n\r\n"); status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		if v, ok := (<-got)["X-Forwarded-Host"]; ok {
			t.Errorf("the upstream got X-Forwarded-Host %q, want none", v)
		}
	})
}

// TestOptionsStarWithABadHostIsRefused: OPTIONS * with a Host field the
// gateway refuses on any other request (an unclosed "[", user info) is
// refused 400 on each engine, as net/http's server refuses it without a
// Host: before 2026-12-07 the net/http engine answered it 200 (the
// gateway's OPTIONS * was answered before the Host field was looked at)
// and the edge engine 400.
func TestOptionsStarWithABadHostIsRefused(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		// Served as floodgate serve serves it: net/http's server leaves
		// OPTIONS * to the gateway (DisableGeneralOptionsHandler).
		var conns sync.WaitGroup
		t.Cleanup(conns.Wait)
		base := "http://" + startAgreeFront(t, fr, compilePolicy(t, "agree.yaml", agreePolicy), newTestClock(), &conns).addr
		for _, host := range []string{"a.e[ample", "u@a.example"} {
			if status, _ := rawAnswer(t, base, "OPTIONS * HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); status != http.StatusBadRequest {
				t.Errorf("Host %q: status %d, want 400", host, status)
			}
		}
		if status, _ := rawAnswer(t, base, "OPTIONS * HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n"); status != http.StatusOK {
			t.Errorf("a good Host: status %d, want 200", status)
		}
	})
}

// TestAbsoluteFormWithAMalformedHostIsRefused: an absolute-form target
// whose host a Host field could not hold (a byte above 0x7F) is refused
// 400 on each engine: its host wins over the Host field, and before
// 2026-12-07 net/http's server refused it while the edge engine routed,
// charged and forwarded it by that host.
func TestAbsoluteFormWithAMalformedHostIsRefused(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		var reached atomic.Int64
		_, base, _ := startFront(t, fr, Options{Matcher: MatcherFunc(func(*Request, *Match) error { return nil }), Engine: memEngine(t)},
			func(http.ResponseWriter, *http.Request) { reached.Add(1) })
		if status, _ := rawAnswer(t, base, "GET http://b.examp\x89e/x HTTP/1.1\r\nHost: a.example\r\n\r\n"); status != http.StatusBadRequest {
			t.Errorf("status %d, want 400", status)
		}
		if n := reached.Load(); n != 0 {
			t.Errorf("the upstream got %d requests", n)
		}
		if status, _ := rawAnswer(t, base, "GET http://b.example:8080/x HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n"); status != http.StatusOK {
			t.Errorf("a good host: status %d, want 200", status)
		}
	})
}
