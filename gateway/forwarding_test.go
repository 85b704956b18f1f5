package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/internal/upstreamtest"
)

// TestRequestsForwardedAsSent: what a client sent reaches the upstream as
// it was sent, on each engine, where no rule of the proxy says otherwise:
// its Cookie fields byte for byte (quotes, empty pairs, one field or
// several), no Content-Type on a body that had none, no Content-Length on
// a request without a body whose method expects none; and an answer
// without a Content-Type reaches the client without one on the edge
// engine (net/http's server guesses one for a body; a HEAD answer has
// none on either), its Set-Cookie fields as they were.
func TestRequestsForwardedAsSent(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testRequestsForwardedAsSent)
}

func testRequestsForwardedAsSent(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	type seen struct {
		header http.Header
		body   string
	}
	got := make(chan seen, 1)
	setCookies := []string{"s=1; Path=/a", "s=2; Path=/b", `q="x y"; HttpOnly`}
	_, base, c := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- seen{r.Header.Clone(), string(b)}
			switch r.URL.Path {
			case "/untyped":
				w.Header()["Content-Type"] = nil // no type, and none guessed here
			case "/set-cookies":
				w.Header()["Set-Cookie"] = setCookies
			}
			_, _ = io.WriteString(w, "<p>an answer</p>\n")
		})
	send := func(method, path string, header http.Header, body string) (http.Header, seen) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range header {
			req.Header[k] = vs
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: status %d", method, path, resp.StatusCode)
		}
		return resp.Header, <-got
	}

	cookies := []string{`a="q x"; ; b=2;`, "c=3;d=4", "flag"}
	_, up := send("GET", "/cookies", http.Header{"Cookie": cookies}, "")
	if !slices.Equal(up.header["Cookie"], cookies) {
		t.Errorf("cookies sent %q reached the upstream as %q", cookies, up.header["Cookie"])
	}

	h, _ := send("GET", "/set-cookies", nil, "")
	if !slices.Equal(h["Set-Cookie"], setCookies) {
		t.Errorf("the upstream's cookies %q reached the client as %q", setCookies, h["Set-Cookie"])
	}

	_, up = send("POST", "/untyped-body", nil, "abc")
	if ct, ok := up.header["Content-Type"]; ok || up.body != "abc" {
		t.Errorf("a body without a Content-Type reached the upstream with Content-Type %q, body %q", ct, up.body)
	}

	for _, m := range []string{"DELETE", "OPTIONS", "GET"} {
		_, up = send(m, "/nobody", nil, "")
		if cl, ok := up.header["Content-Length"]; ok {
			t.Errorf("%s without a body reached the upstream with Content-Length %q", m, cl)
		}
	}

	for _, m := range []string{"GET", "HEAD"} {
		h, _ := send(m, "/untyped", nil, "")
		ct, ok := h["Content-Type"]
		switch {
		case fr == frontEdge || m == "HEAD":
			if ok {
				t.Errorf("%s: an answer without a Content-Type reached the client with %q", m, ct)
			}
		case !ok:
			t.Errorf("%s: net/http's server guesses a Content-Type for a body; got none", m)
		}
	}
}

// TestFieldsFoundInAnyCase: the fields the proxy acts on are found
// whatever the case the client wrote their names in (RFC 9110 5.1: names
// are case-insensitive), on each engine; the edge engine reads names from
// the request as it came. A method override field never reaches the
// upstream (the default); an untrusted peer's X-Forwarded-For is replaced
// by the peer and its X-Real-IP dropped; a field a Connection field names
// is removed.
func TestFieldsFoundInAnyCase(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testFieldsFoundInAnyCase)
}

func testFieldsFoundInAnyCase(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	got := make(chan http.Header, 1)
	_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() })
	for _, c := range []struct{ override, xff, realIP, conn, hop string }{
		{"x-http-method-override", "x-forwarded-for", "x-real-ip", "connection", "x-hop"},
		{"X-HTTP-METHOD", "X-FORWARDED-FOR", "X-REAL-IP", "CONNECTION", "X-HOP"},
		{"x-Method-Override", "X-forwarded-For", "X-Real-Ip", "Connection", "X-Hop"},
	} {
		head := fmt.Sprintf("GET /x HTTP/1.1\r\nHost: a.example\r\n%s: DELETE\r\n%s: 203.0.113.7\r\n%s: 203.0.113.8\r\n%s: close, x-hop\r\n%s: 1\r\n\r\n",
			c.override, c.xff, c.realIP, c.conn, c.hop)
		if status := rawStatus(t, base, head); status != 200 {
			t.Fatalf("%v: status %d", c, status)
		}
		h := <-got
		for k := range h {
			if strings.Contains(strings.ToLower(k), "method") || k == "X-Real-Ip" || k == "X-Hop" {
				t.Errorf("%v: the upstream got %s: %q", c, k, h[k])
			}
		}
		if xff := h.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "127.0.0.1" {
			t.Errorf("%v: the upstream got X-Forwarded-For %q, want the peer alone", c, xff)
		}
	}
}

// TestUpstreamAnswerHeadBound: an upstream's answer whose head (status
// line and fields) fits in 64 KiB is passed on, one past it is answered
// 502, alike on each engine: the bound the client's request heads have
// (431 past it), where net/http's transport alone would take 10 MB and
// fasthttp 16 KiB.
func TestUpstreamAnswerHeadBound(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testUpstreamAnswerHeadBound)
}

func testUpstreamAnswerHeadBound(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	_, base, c := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
			w.Header().Set("X-Large", strings.Repeat("v", n))
			_, _ = io.WriteString(w, "ok\n")
		})
	for _, c2 := range []struct {
		field int
		want  int
	}{{15 << 10, 200}, {60 << 10, 200}, {66 << 10, 502}, {1 << 20, 502}} {
		a := do(t, c, "GET", fmt.Sprintf("%s/%d", base, c2.field), nil)
		if a.status != c2.want {
			t.Errorf("an answer with a field of %d bytes: %d, want %d", c2.field, a.status, c2.want)
		}
		if a.status == 200 && len(a.header.Get("X-Large")) != c2.field {
			t.Errorf("a field of %d bytes reached the client with %d", c2.field, len(a.header.Get("X-Large")))
		}
	}
}

// TestTargetsReadTwoWaysAreRefused: a request target that the gateway and
// an upstream could read as two different paths is refused (400) before
// any route or limit, on each engine, and never reaches the upstream: a
// fragment (RFC 9112 3.2 has none in a target; fasthttp ends the path at
// "#" while the upstream gets the whole target, so "/public#/../admin"
// would be limited as /public and served as /admin by an upstream that
// resolves dot segments), and a broken percent escape, in the path or the
// query.
func TestTargetsReadTwoWaysAreRefused(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testTargetsReadTwoWaysAreRefused)
}

func testTargetsReadTwoWaysAreRefused(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	reached := make(chan string, 16)
	_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) { reached <- r.RequestURI })
	for _, target := range []string{"/public#/../admin", "/a?x=1#frag", "/a#", "/a?q=%zz", "/a?q=%4", "/%zz"} {
		if status := rawStatus(t, base, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: a.example\r\n\r\n", target)); status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", target, status)
		}
	}
	select {
	case u := <-reached:
		t.Errorf("the upstream was sent %q", u)
	default:
	}
}

// TestQueryForwardedAsSent: a request's query reaches the upstream byte
// for byte on each engine: semicolons, escapes, the order of its
// parameters. (net/http's reverse proxy would rewrite a query with a
// semicolon, dropping what it cannot parse and sorting the rest; the
// gateway reads no query, so it has nothing to protect by that.)
func TestQueryForwardedAsSent(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testQueryForwardedAsSent)
}

func testQueryForwardedAsSent(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	got := make(chan string, 1)
	_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) { got <- r.URL.RawQuery })
	for _, q := range []string{"x=1;y=2", "z=1&a=2&m=%41", "a=1;b&c", "k"} {
		if status := rawStatus(t, base, fmt.Sprintf("GET /q?%s HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n", q)); status != 200 {
			t.Fatalf("%s: status %d", q, status)
		}
		if up := <-got; up != q {
			t.Errorf("the query %q reached the upstream as %q", q, up)
		}
	}
}

// rawStatus sends head, a request's head as it is to be written (its blank
// line included), on a connection of its own to the front at base, and
// returns the status of the answer.
func rawStatus(t *testing.T, base, head string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestUpstreamAnswerBareLF: an upstream answer whose head's lines end in
// LF alone (RFC 9112 §2.2 lets a recipient take LF as a line's end; NGINX
// and net/http's transport do) is read as its CRLF twin on each engine:
// heads all in LF, ending in LF after CRLF lines, mixing both, and one
// whose body holds a CRLF CRLF (which is not the head's end). The
// upstream keeps its connection, and the next request is answered on it.
func TestUpstreamAnswerBareLF(t *testing.T) {
	t.Parallel()
	heads := map[string]string{
		"/lf":       "HTTP/1.1 200 OK\nContent-Length: %d\nX-Kind: lf\n\n",
		"/crlf-lf":  "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Kind: crlf-lf\r\n\n",
		"/mixed":    "HTTP/1.1 200 OK\nContent-Length: %d\r\nX-Kind: mixed\n\r\n",
		"/body":     "HTTP/1.1 200 OK\nContent-Length: %d\nX-Kind: body\n\n",
		"/crlf":     "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Kind: crlf\r\n\r\n",
		"/lf-field": "HTTP/1.1 200 OK\nContent-Length: %d\r\nX-Kind: lf-field\r\n\r\n",
	}
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		var mu sync.Mutex
		conns := map[net.Conn]bool{}
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			body := "answer to " + req.URL.Path
			if req.URL.Path == "/body" {
				body += "\r\n\r\nHTTP/1.1 400 Bad\r\n\r\n"
			}
			_, err := fmt.Fprintf(c, heads[req.URL.Path]+"%s", len(body), body)
			return err == nil
		})
		base := serveFront(t, fr, gatewayTo(t, "http://"+addr), nil)
		c := newClient(t)
		for path := range heads {
			for range 2 { // the second over the kept upstream connection
				a := do(t, c, "GET", base+path, nil)
				want := "answer to " + path
				if path == "/body" {
					want += "\r\n\r\nHTTP/1.1 400 Bad\r\n\r\n"
				}
				if a.status != 200 || a.body != want || a.header.Get("X-Kind") != path[1:] {
					t.Errorf("%s: %d %q, X-Kind %q; want 200 %q", path, a.status, a.body, a.header.Get("X-Kind"), want)
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(conns) != 1 {
			t.Errorf("%d requests one after another took %d upstream connections; want 1, kept", 2*len(heads), len(conns))
		}
	})
}

// TestUpstreamAnswerCutShort: an upstream answer that breaks is never
// passed on as whole, on each engine: a body of known length cut short, a
// broken or missing first chunk, a chunk broken after the first. The
// client gets no answer, a 502, or the head and what came before the
// break followed by a broken connection; never a body that reads to its
// end. A body up to 64 KiB cut short is answered 502 by the edge engine,
// which reads such bodies whole before answering.
func TestUpstreamAnswerCutShort(t *testing.T) {
	t.Parallel()
	answers := map[string]string{
		"/short":     "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",
		"/long":      "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nhello",
		"/bad-first": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
		"/no-chunk":  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		"/bad-later": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
	}
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			_, _ = io.WriteString(c, answers[req.URL.Path])
			return false // and close
		})
		base := serveFront(t, fr, gatewayTo(t, "http://"+addr), nil)
		for path := range answers {
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: a.example\r\n\r\n", path); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				t.Errorf("%s: the connection was left open without an answer", path)
			case err != nil:
				if path == "/short" && fr == frontEdge {
					t.Errorf("%s: no answer (%v); want 502", path, err)
				}
			case resp.StatusCode == http.StatusBadGateway:
				if _, err := io.ReadAll(resp.Body); err != nil {
					t.Errorf("%s: the 502's body: %v", path, err)
				}
			case resp.StatusCode == 200:
				b, err := io.ReadAll(resp.Body)
				if err == nil {
					t.Errorf("%s: the body %q read to its end; want a broken connection", path, b)
				}
				if path == "/short" && fr == frontEdge {
					t.Errorf("%s: 200; want 502", path)
				}
			default:
				t.Errorf("%s: %d", path, resp.StatusCode)
			}
			conn.Close()
		}
	})
}

// TestStreamedAnswerHeadAtOnce: the head of an event stream or of an
// answer of unknown length (a chunked long poll) reaches the client as
// soon as the upstream sent it, before the body's first bytes, on each
// engine: an EventSource opens, and a proxy in front sees its first byte,
// however long the first event takes. The body then follows whole.
func TestStreamedAnswerHeadAtOnce(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		release := map[string]chan struct{}{"/events": make(chan struct{}), "/poll": make(chan struct{})}
		rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
		_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
			func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/events" {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
				w.WriteHeader(200)
				http.NewResponseController(w).Flush()
				select {
				case <-release[r.URL.Path]:
				case <-r.Context().Done():
					return
				}
				_, _ = io.WriteString(w, "data: first\n\n")
			})
		for path, free := range release {
			t.Run(path[1:], func(t *testing.T) {
				var once sync.Once
				defer once.Do(func() { close(free) })
				conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second)) // the upstream holds its body until the head is read
				if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: a.example\r\n\r\n", path); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("no head while the upstream holds its body back: %v", err)
				}
				if resp.StatusCode != 200 {
					t.Errorf("%d, want 200", resp.StatusCode)
				}
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				once.Do(func() { close(free) })
				if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "data: first\n\n" {
					t.Errorf("the body %q, %v; want the first event", b, err)
				}
			})
		}
	})
}

// TestMethodOverrideEveryLine: an override field counts with all its
// lines, empty ones too, as an upstream may read any of them (often the
// last). Stripped (the default), none reaches the upstream; refused, any
// line naming a method is a 400; honoured, the limits match the method the
// lines name, and lines naming two methods are a 400. A field whose first
// line is empty once let a second line through to the upstream.
func TestMethodOverrideEveryLine(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testMethodOverrideEveryLine)
}

func testMethodOverrideEveryLine(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour})
	lines := func(vs ...string) string {
		s := ""
		for _, v := range vs {
			s += "X-HTTP-Method-Override: " + v + "\r\n"
		}
		return s
	}
	for _, c := range []struct {
		mode      MethodOverride
		fields    string
		status    int
		matchedAs string // the method the limits saw
		upstream  int    // override lines the upstream got
	}{
		{OverrideStrip, lines("", "DELETE"), 200, "GET", 0},
		{OverrideStrip, lines("DELETE", ""), 200, "GET", 0},
		{OverrideStrip, lines(""), 200, "GET", 0},
		{OverrideStrip, lines("") + "X-Method-Override: DELETE\r\n", 200, "GET", 0},
		{OverrideReject, lines("", "DELETE"), 400, "", 0},
		{OverrideReject, lines(" ", "POST"), 400, "", 0},
		{OverrideReject, lines(""), 200, "GET", 0},
		{OverrideHonor, lines("", "delete"), 200, "DELETE", 2},
		{OverrideHonor, lines("DELETE", "DELETE"), 200, "DELETE", 2},
		{OverrideHonor, lines("", "DELETE") + "X-HTTP-Method: PUT\r\n", 400, "", 0},
		{OverrideHonor, lines("DELETE", "POST"), 400, "", 0},
	} {
		seen := make(chan string, 1)
		matcher := MatcherFunc(func(r *Request, m *Match) error {
			select {
			case seen <- r.Method:
			default:
			}
			return oneRule(rule)(r, m)
		})
		got := make(chan http.Header, 1)
		_, base, _ := startFront(t, fr, Options{Matcher: matcher, Engine: memEngine(t), MethodOverride: c.mode},
			func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() })
		head := "GET /x HTTP/1.1\r\nHost: a.example\r\n" + c.fields + "\r\n"
		if status := rawStatus(t, base, head); status != c.status {
			t.Errorf("mode %d, %q: status %d, want %d", c.mode, c.fields, status, c.status)
			continue
		}
		if c.status != 200 {
			continue
		}
		if m := <-seen; m != c.matchedAs {
			t.Errorf("mode %d, %q: the limits saw %s, want %s", c.mode, c.fields, m, c.matchedAs)
		}
		h := <-got
		n := len(h.Values("X-Http-Method-Override")) + len(h.Values("X-Http-Method")) + len(h.Values("X-Method-Override"))
		if n != c.upstream {
			t.Errorf("mode %d, %q: the upstream got %d override lines (%v), want %d", c.mode, c.fields, n, h, c.upstream)
		}
	}
}

// TestConnectionCannotNameFraming: a Connection field that names
// Content-Length, Transfer-Encoding or Host does not have them removed,
// from a request or an answer: the body reaches the upstream, and the
// client, whole and framed as it came. (The edge engine once sent such a
// request on without its length and its body.) Other fields it names are
// removed.
func TestConnectionCannotNameFraming(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testConnectionCannotNameFraming)
}

func testConnectionCannotNameFraming(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	type seen struct {
		body, host string
		hop        bool
	}
	got := make(chan seen, 1)
	_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- seen{string(b), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Hop") != ""}
			w.Header().Set("Connection", "Content-Length, X-Up-Hop")
			w.Header().Set("X-Up-Hop", "1")
			_, _ = io.WriteString(w, "answer-body")
		})
	body := "GET /admin/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	head := fmt.Sprintf("POST /p1 HTTP/1.1\r\nHost: a.example\r\nConnection: Content-Length, Host, Transfer-Encoding, X-Hop\r\nX-Hop: 1\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := io.WriteString(conn, head+body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(answer) != "answer-body" || resp.ContentLength != int64(len("answer-body")) {
		t.Errorf("answer %d, length %d, body %q, %v; want 200 and its body with its length", resp.StatusCode, resp.ContentLength, answer, err)
	}
	if resp.Header.Get("X-Up-Hop") != "" {
		t.Errorf("the answer kept a field its Connection named: %v", resp.Header)
	}
	select {
	case s := <-got:
		if s.body != body || s.host != "a.example" || s.hop {
			t.Errorf("the upstream got body %q, forwarded host %q, X-Hop %v; want the body whole, the host, no X-Hop", s.body, s.host, s.hop)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
}

// recordingFront serves on front a gateway to an upstream that answers
// "ok" and records each request it gets as its method, path and quoted
// body; it returns the front's base URL and what the upstream got so far.
func recordingFront(t *testing.T, front string) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %q", r.Method, r.URL.Path, b))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	return serveFront(t, front, gatewayTo(t, up.URL), nil), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// TestHTTP10ChunkedWithLengthClosesTheConnection: an HTTP/1.0 request
// with Transfer-Encoding: chunked and a Content-Length, kept alive, never
// has what follows its length read as a request, on each engine: RFC 9112
// §6.1 has such framing taken as faulty and the connection closed, as a
// proxy in front that reads the body as chunked would otherwise see its
// client's chunk as another request. The edge engine refuses it (501);
// net/http's server drops the field unseen and frames the body by its
// length, so the gateway closes the connection after every HTTP/1.0
// request with a body. Before 2026-12-06 the net/http engine kept the
// connection and forwarded the hidden GET /smuggled to the upstream.
func TestHTTP10ChunkedWithLengthClosesTheConnection(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		base, seen := recordingFront(t, fr)
		// Read as chunked, the body is one chunk holding the GET; read by
		// its length, it is the chunk's size line, and the GET follows.
		smuggled := "GET /smuggled HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
		size := fmt.Sprintf("%x\r\n", len(smuggled))
		chunk := size + smuggled + "\r\n0\r\n\r\n"
		head := fmt.Sprintf("POST /upload HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n", len(size))
		answers, closed := interimExchange(t, base, head+chunk)
		if len(answers) != 1 || !closed {
			t.Errorf("answered %v, closed %v; want one answer, then the connection closed", interimStatuses(answers), closed)
		}
		for _, s := range seen() {
			if strings.Contains(s, "/smuggled") {
				t.Errorf("the upstream got %s", s)
			}
		}
	})
}

// TestHTTP10ChunkedWithoutLengthClosesTheConnection: an HTTP/1.0 request
// kept alive with Transfer-Encoding: chunked and no Content-Length never
// has its chunks read as a request, on each engine. net/http's server drops
// the field of an HTTP/1.0 request unseen and reads the request as one
// without a body, so what a proxy in front sends as its chunks would be
// read as the next request: a chunk size line that a lenient proxy reads
// as the last chunk with an extension ("0 /smuggled HTTP/1.1") and a
// trailer section (Host: x) reached the upstream as a request of its own,
// and a well-formed chunk made a second answer that the proxy in front
// would give its next request. The edge engine refuses such a request
// (501); on the net/http engine, which cannot tell it from one without the
// field, no HTTP/1.0 connection is kept.
func TestHTTP10ChunkedWithoutLengthClosesTheConnection(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		base, seen := recordingFront(t, fr)
		next := "GET /next HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
		for _, c := range []struct{ name, method, chunks string }{
			{"a chunk size line read as a request", "POST", "0 /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
			{"the same on a GET", "GET", "0 /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
			{"well-formed chunks", "POST", "3\r\nabc\r\n0\r\n\r\n"},
		} {
			head := c.method + " /upload HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
			answers, closed := interimExchange(t, base, head+c.chunks+next)
			if len(answers) > 1 || !closed {
				t.Errorf("%s: answered %v, closed %v; want at most one answer, then the connection closed",
					c.name, interimStatuses(answers), closed)
			}
		}
		for _, s := range seen() {
			if !strings.HasPrefix(s, "POST /upload ") && !strings.HasPrefix(s, "GET /upload ") {
				t.Errorf("the upstream got %s", s)
			}
		}
	})
}

// TestDotSegmentsForwardedAsLimited: a target whose path holds dot
// segments ("..", ".", escaped as %2e or not) is forwarded with them
// resolved as the gateway resolved them to route and limit it, on each
// engine, so an upstream that does not resolve them (Flask serves
// /admin/../public/x by its /admin/<path> route, as Express does) is asked
// for the path that was limited, and one behind a route's path prefix is
// never taken out of it. Before 2026-12-06 both engines forwarded the path
// as sent: /admin/../public/x was charged the public route's limit and
// reached the upstream as /admin/../public/x, and /../x sent to an
// upstream at /base reached it as /base/../x.
func TestDotSegmentsForwardedAsLimited(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testDotSegmentsForwardedAsLimited)
}

func testDotSegmentsForwardedAsLimited(t *testing.T, fr string) {
	got := make(chan string, 1)
	record := func(w http.ResponseWriter, r *http.Request) { got <- r.RequestURI }
	base := policyFront(t, fr, "dots.yaml", `version: 1
routes:
  - {name: admin, match: {paths: ["/admin/**"]}, upstream: "http://127.0.0.1:9"}
  - {name: public, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: admin-limit, match: {routes: [admin]}, algorithm: fixed_window, limit: 100, window: 1h, key: global}
  - {name: public-limit, match: {routes: [public]}, algorithm: fixed_window, limit: 200, window: 1h, key: global}
`, record)
	get := func(base, target string) (*http.Response, string) {
		resp := rawGet(t, base, target, "a.example")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d, want 200", target, resp.StatusCode)
		}
		return resp, <-got
	}
	for _, c := range []struct{ target, limit, upstream string }{
		{"/admin/../public/x", "public-limit", "/public/x"},
		{"/admin/%2e%2e/public/x", "public-limit", "/public/x"},
		{"/admin/.%2E/public/x?q=/admin/../y", "public-limit", "/public/x?q=/admin/../y"},
		{"/admin/./../public/x", "public-limit", "/public/x"},
		{"/admin//../public/x", "public-limit", "/public/x"},
		{"/../admin/x", "admin-limit", "/admin/x"},
		{"/public/../admin/x/.", "admin-limit", "/admin/x/"},
		{"/public/..", "public-limit", "/"},
		{"http://a.example/admin/../public/x", "public-limit", "/public/x"},
		{"/admin/.x/..y/%2e%2ex", "admin-limit", "/admin/.x/..y/%2e%2ex"},
	} {
		resp, u := get(base, c.target)
		limit, _, _ := strings.Cut(resp.Header.Get("RateLimit-Policy"), ";")
		if limit != `"`+c.limit+`"` || u != c.upstream {
			t.Errorf("%s: limited by %s, the upstream asked for %s; want %s and %s", c.target, limit, u, c.limit, c.upstream)
		}
	}

	// A path whose escaped slash makes its dot segments resolve two ways
	// is refused (TestDotSegmentsBesideAnEscapedSlashForwardedAsLimited):
	// under escaped_slash: decoded the gateway limited it decoded, and an
	// upstream that does not resolve them served it as sent.
	decoded := policyFront(t, fr, "decoded.yaml", `version: 1
server: {escaped_slash: decoded}
routes:
  - {name: admin, match: {paths: ["/admin/**"]}, upstream: "http://127.0.0.1:9"}
  - {name: public, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: public-limit, match: {routes: [public]}, algorithm: fixed_window, limit: 200, window: 1h, key: global}
`, record)
	if resp := rawGet(t, decoded, "/admin/b%2F../../public/x", "a.example"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an escaped slash that makes dot segments resolve two ways, under decoded: %d, want 400", resp.StatusCode)
	}

	// Behind a path prefix.
	up := newUpstream(t, record)
	prefixed := serveFront(t, fr, gatewayTo(t, up.URL+"/base"), nil)
	for target, want := range map[string]string{"/../x": "/base/x", "/a/%2e%2e/../x/": "/base/x/"} {
		if _, u := get(prefixed, target); u != want {
			t.Errorf("%s behind /base: the upstream was asked for %s, want %s", target, u, want)
		}
	}
}

// TestDotSegmentsBesideAnEscapedSlashForwardedAsLimited: a target whose
// dot segments both readings of its escaped slash resolve alike
// (/admin/../public/x%2Fy: the ".." is a segment of its own whether "%2F"
// is read as a slash or kept inside its segment) is forwarded resolved, the
// escaped slash kept, under every server.escaped_slash that serves it, on
// each engine: an upstream that does not resolve dot segments (Flask,
// which decodes the slash, serves /admin/../public/x/y by its
// /admin/<path> route) is asked for the path that was limited. One whose
// readings resolve it two ways is refused 400 before any limit, under
// every mode. Before 2026-12-07 any escaped slash made the target go as
// sent: a client added one to reach the admin route charged by the public
// route's limit, and under segment and decoded one that resolved two ways
// was limited by one reading and served as sent.
func TestDotSegmentsBesideAnEscapedSlashForwardedAsLimited(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		got := make(chan string, 1)
		record := func(w http.ResponseWriter, r *http.Request) { got <- r.RequestURI }
		for _, mode := range []string{"both", "segment", "decoded"} {
			base := policyFront(t, fr, "dots.yaml", `version: 1
server: {escaped_slash: `+mode+`}
routes:
  - {name: admin, match: {paths: ["/admin/**"]}, upstream: "http://127.0.0.1:9"}
  - {name: public, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: admin-limit, match: {routes: [admin]}, algorithm: fixed_window, limit: 100, window: 1h, key: global}
  - {name: public-limit, match: {routes: [public]}, algorithm: fixed_window, limit: 200, window: 1h, key: global}
`, record)
			for _, c := range []struct{ target, limit, upstream string }{
				{"/admin/../public/x%2Fy", "public-limit", "/public/x%2Fy"},
				{"/admin/%2e%2e/public/x%2fy?q=1", "public-limit", "/public/x%2fy?q=1"},
				{"/admin/./../public%2Fx/./", "public-limit", "/public%2Fx/"},
				{"/public/../admin/a%2Fb", "admin-limit", "/admin/a%2Fb"},
			} {
				resp := rawGet(t, base, c.target, "a.example")
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s: %s: %d, want 200", mode, c.target, resp.StatusCode)
					continue
				}
				u := <-got
				limit, _, _ := strings.Cut(resp.Header.Get("RateLimit-Policy"), ";")
				if limit != `"`+c.limit+`"` || u != c.upstream {
					t.Errorf("%s: %s: limited by %s, the upstream asked for %s; want %s and %s", mode, c.target, limit, u, c.limit, c.upstream)
				}
			}
			for _, target := range []string{"/admin/b%2F../../public/x", "/admin/../x%2F..%2Fadmin", "/admin%2Fq/../public",
				"http://a.example/admin/b%2f../../public/x?q=1"} {
				if resp := rawGet(t, base, target, "a.example"); resp.StatusCode != http.StatusBadRequest {
					u := ""
					if resp.StatusCode == http.StatusOK {
						u = <-got
					}
					t.Errorf("%s: %s, resolved two ways: %d (the upstream asked for %q), want 400", mode, target, resp.StatusCode, u)
				}
			}
		}
	})
}
