package edge

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/plainhead"
	"github.com/valyala/fasthttp"
)

// frontHeads are heads the front reads as plain, and heads it must leave
// to fasthttp.
var frontHeads = []string{
	"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
	"GET /x?y=1&z=%20 HTTP/1.1\r\nHost: a.example:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n",
	"GET /a/b HTTP/1.1\r\nhost: api.example\r\nX-Api-Key:   key-1  \r\nx-api-key: key-2\r\nAuthorization: Bearer t\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-Forwarded-For: 192.0.2.1, 198.51.100.2\r\nX-HTTP-Method-Override: DELETE\r\n\r\n",
	"GET /a HTTP/1.1\r\nHOST: a\r\nX-Empty:\r\nX-Tab:\tv\t\r\nConnection: keep-alive\r\n\r\n",
	// Left to fasthttp:
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: A.example\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nCookie: a=b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: a\r\nUser-Agent: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-A: \xff\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX A: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n",
	"GET /\xe9 HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\r\n\r\n",
}

// TestFrontReadsAsFasthttp: a head the front reads as plain is read as
// fasthttp reads it (the method, the target, the host, and every field's
// first value, values and lines, by any name and in any case), so a
// request the front serves is matched and decided as on fasthttp; the
// heads it leaves to fasthttp are left.
func TestFrontReadsAsFasthttp(t *testing.T) {
	plain := 0
	for _, head := range frontHeads {
		if checkFrontHead(t, []byte(head)) {
			plain++
		}
	}
	if plain != 5 {
		t.Errorf("%d of the heads read as plain, want the first 5", plain)
	}
}

// FuzzFrontReadsAsFasthttp looks for a head the front reads as plain and
// fasthttp reads otherwise.
func FuzzFrontReadsAsFasthttp(f *testing.F) {
	for _, h := range frontHeads {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		if i := bytes.Index(head, crlf2); i >= 0 {
			head = head[:i+4]
		}
		checkFrontHead(t, head)
	})
}

// checkFrontHead reports whether the front reads head as plain, and fails
// t when it does and fasthttp reads it otherwise.
func checkFrontHead(t *testing.T, head []byte) bool {
	t.Helper()
	var fh plainhead.Header
	r, ok := plainhead.Read(head, &fh)
	if !ok {
		return false
	}
	var h fasthttp.RequestHeader
	if err := h.Read(bufio.NewReader(bytes.NewReader(head))); err != nil {
		t.Fatalf("%q: the front reads it, fasthttp does not: %v", head, err)
	}
	var ctx fasthttp.RequestCtx
	h.CopyTo(&ctx.Request.Header)
	if string(h.Method()) != "GET" || string(h.RequestURI()) != string(r.Target) || string(hostOf(&ctx)) != r.Host ||
		h.ConnectionClose() != r.Close {
		t.Fatalf("%q: the front reads GET %q host %q close %v; fasthttp %s %q host %q close %v", head, r.Target, r.Host, r.Close,
			h.Method(), h.RequestURI(), hostOf(&ctx), h.ConnectionClose())
	}
	names := []string{"Host", "User-Agent", "Connection", "X-Api-Key", "Authorization", "X-Forwarded-For", "Accept", "Missing"}
	for name := range fh.Names {
		names = append(names, name)
	}
	eh := (*edgeHeader)(&h)
	for _, n := range names {
		for _, name := range []string{n, strings.ToLower(n), strings.ToUpper(n)} {
			if a, b := fh.Get(name), eh.Get(name); a != b {
				t.Fatalf("%q: Get(%q) front %q, fasthttp %q", head, name, a, b)
			}
			if a, b := strings.Join(fh.Values(name), "|"), strings.Join(eh.Values(name), "|"); a != b {
				t.Fatalf("%q: Values(%q) front %q, fasthttp %q", head, name, a, b)
			}
			if a, b := fh.Lines(name), eh.Lines(name); a != b {
				t.Fatalf("%q: Lines(%q) front %d, fasthttp %d", head, name, a, b)
			}
		}
	}
	return true
}

// TestFrontAnswersAsFasthttp: the answers of the gateway's own that the
// front writes as bytes (a refusal with its fields, one to a client that
// asked to close, a 404) are, but for the Date, the bytes fasthttp writes
// for the same requests with the front off, and a request the flow passes
// is forwarded and answered alike.
func TestFrontAnswersAsFasthttp(t *testing.T) {
	var sent atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Date", "Mon, 07 Dec 2026 00:00:00 GMT")
		_, _ = io.WriteString(w, "from upstream\n")
	}))
	defer up.Close()
	src := `version: 1
server:
  headers: {ratelimit: true}
routes:
  - {name: api, match: {paths: ["/api/**"]}, upstream: ` + up.URL + `}
limits:
  - {name: per-ip, rate: 1, per: 1m, burst: 2, key: client_ip, scope: global}
`
	exchange := func(noFront bool) []byte {
		e := New(policyGateway(t, src), Options{NoFront: noFront})
		addr, stop := serveOn(t, e)
		defer stop()
		c, br := dialKept(t, addr)
		var all []byte
		for _, req := range []string{
			"GET /elsewhere HTTP/1.1\r\nHost: gw.example\r\n\r\n",
			"GET /api/a HTTP/1.1\r\nHost: gw.example\r\nUser-Agent: t\r\n\r\n",
			"GET /api/b HTTP/1.1\r\nHost: gw.example\r\n\r\n",
			"GET /api/c HTTP/1.1\r\nHost: gw.example\r\n\r\n",
			"GET /api/d HTTP/1.1\r\nHost: gw.example\r\nConnection: close\r\n\r\n",
		} {
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			all = append(all, readAnswer(t, br)...)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("after Connection: close: %v, want the connection closed", err)
		}
		return all
	}
	date := regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)
	withFront := date.ReplaceAll(exchange(false), []byte("Date: -\r"))
	without := date.ReplaceAll(exchange(true), []byte("Date: -\r"))
	if !bytes.Equal(withFront, without) {
		t.Fatalf("the front answered\n%s\nfasthttp\n%s", withFront, without)
	}
	for _, want := range []string{"HTTP/1.1 200 OK", "HTTP/1.1 429 Too Many Requests", "HTTP/1.1 404 Not Found", "Connection: close", "Ratelimit-Policy"} {
		if !bytes.Contains(withFront, []byte(want)) {
			t.Errorf("no %q in\n%s", want, withFront)
		}
	}
	if n := sent.Load(); n != 2 {
		t.Errorf("the upstream was sent %d requests, want 1 on each engine", n)
	}
}

// dialKept is dial with a deadline for the test's exchanges.
func dialKept(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, br := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, br
}

// readAnswer reads one answer with a Content-Length, head and body, as it
// came.
func readAnswer(t *testing.T, br *bufio.Reader) []byte {
	t.Helper()
	var out []byte
	n := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			t.Fatalf("reading an answer: %v (so far %q)", err, out)
		}
		out = append(out, line...)
		if len(line) == 2 {
			break
		}
		if k, v, ok := strings.Cut(strings.TrimSpace(string(line)), ":"); ok && strings.EqualFold(k, "Content-Length") {
			for _, d := range strings.TrimSpace(v) {
				n = 10*n + int(d-'0')
			}
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	return append(out, body...)
}

// TestFrontHandsOverTheConnection: on one kept-alive connection, requests
// the front serves (two pipelined in one write, answered in order) are
// followed by one it does not (a POST with a body), which reaches the
// upstream whole through fasthttp, as do the requests after it; the
// connection stays open throughout.
func TestFrontHandsOverTheConnection(t *testing.T) {
	var bodies []string
	var mu sync.Mutex
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok "+r.URL.Path)
	}))
	defer up.Close()
	e := New(policyGateway(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: `+up.URL+`}
limits:
  - {name: per-ip, rate: 100, per: 1s, burst: 100, key: client_ip, scope: global}
`), Options{})
	addr, stop := serveOn(t, e)
	defer stop()
	c, br := dialKept(t, addr)
	send := func(reqs string, paths ...string) {
		t.Helper()
		if _, err := io.WriteString(c, reqs); err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			a := readAnswer(t, br)
			if !bytes.HasPrefix(a, []byte("HTTP/1.1 200 OK\r\n")) || !bytes.HasSuffix(a, []byte("ok "+p)) {
				t.Fatalf("for %s: %q", p, a)
			}
		}
	}
	send("GET /a HTTP/1.1\r\nHost: gw\r\n\r\nGET /b HTTP/1.1\r\nHost: gw\r\n\r\n", "/a", "/b")
	send("POST /c HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\nhello", "/c")
	send("GET /d HTTP/1.1\r\nHost: gw\r\n\r\n", "/d")
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(bodies, "|"); got != "GET /a |GET /b |POST /c hello|GET /d " {
		t.Errorf("the upstream was sent %q", got)
	}
}

// TestShutdownClosesTheFrontsIdleConnections: a kept-alive connection
// waiting in the front for its next request is closed by Shutdown at once,
// as fasthttp closes its idle ones, and Shutdown does not wait for it.
func TestShutdownClosesTheFrontsIdleConnections(t *testing.T) {
	e := New(policyGateway(t, `version: 1
routes:
  - {name: only, match: {paths: ["/only"]}, upstream: none}
`), Options{})
	addr, stop := serveOn(t, e)
	c, br := dialKept(t, addr)
	if _, err := io.WriteString(c, "GET /elsewhere HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if a := readAnswer(t, br); !bytes.HasPrefix(a, []byte("HTTP/1.1 404 ")) {
		t.Fatalf("answered %q", a)
	}
	time.Sleep(50 * time.Millisecond) // the front waits for the next request
	began := time.Now()
	stop() // Shutdown, and Serve ended cleanly
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the idle connection after Shutdown: %v, want it closed", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("Shutdown and the close took %v", d)
	}
}

// TestFrontKeepsMaxHeaderBytes: a plain head longer than MaxHeaderBytes
// (below what the front reads) is answered 431 as fasthttp answers it,
// and one within it is served, with the front on and off alike.
func TestFrontKeepsMaxHeaderBytes(t *testing.T) {
	for _, noFront := range []bool{false, true} {
		e := New(policyGateway(t, `version: 1
routes:
  - {name: only, match: {paths: ["/only"]}, upstream: none}
`), Options{MaxHeaderBytes: 1024, NoFront: noFront})
		addr, stop := serveOn(t, e)
		for _, tc := range []struct {
			pad    int
			status string
		}{{100, "404"}, {1500, "431"}} {
			c, br := dialKept(t, addr)
			req := "GET /elsewhere HTTP/1.1\r\nHost: gw\r\nX-Pad: " + strings.Repeat("p", tc.pad) + "\r\n\r\n"
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			line, err := br.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "HTTP/1.1 "+tc.status+" ") {
				t.Errorf("front off %v, a field of %d bytes: %q %v, want %s", noFront, tc.pad, line, err, tc.status)
			}
			c.Close()
		}
		stop()
	}
}
