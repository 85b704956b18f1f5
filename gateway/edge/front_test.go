package edge

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/plainhead"
	"github.com/floodgate/floodgate/internal/upstreamtest"
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

// readAnswer reads one answer with a Content-Length or a chunked body,
// head and body, as it came.
func readAnswer(t *testing.T, br *bufio.Reader) []byte {
	t.Helper()
	var out []byte
	n := 0
	chunked := false
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
		} else if ok && strings.EqualFold(k, "Transfer-Encoding") && strings.TrimSpace(v) == "chunked" {
			chunked = true
		}
	}
	for chunked {
		line, err := br.ReadSlice('\n')
		if err != nil {
			t.Fatalf("reading a chunk: %v (so far %q)", err, out)
		}
		out = append(out, line...)
		size, err := strconv.ParseInt(strings.TrimSpace(string(line)), 16, 32)
		if err != nil {
			t.Fatalf("a chunk's size: %v (so far %q)", err, out)
		}
		if size == 0 {
			n, chunked = 2, false // the empty line after it
			break
		}
		chunk := make([]byte, size+2)
		if _, err := io.ReadFull(br, chunk); err != nil {
			t.Fatal(err)
		}
		out = append(out, chunk...)
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

// frontForwarded are the requests TestFrontForwardsAsFasthttp sends on
// one kept connection, and the answer its upstream gives each (by the
// target's last segment): keep is false where it closes after it.
var frontForwarded = []struct {
	req, answer string
	keep        bool
}{
	{"GET /api/plain?q=1&r=%20 HTTP/1.1\r\nHost: gw.example\r\nUser-Agent: t/1\r\nAccept: */*\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: Mon, 07 Dec 2026 00:00:00 GMT\r\nServer: up\r\nx-lower:  yes \r\nContent-Length: 5\r\n\r\nhello", true},
	{"GET /api/cookie HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		"HTTP/1.1 200 OK\r\nSet-Cookie: a=b; Path=/\r\nContent-Length: 1\r\nX-After: 1\r\n\r\nc", true},
	{"GET /api/unchanged HTTP/1.1\r\nHost: gw.example\r\nIf-None-Match: \"x\"\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nConnection: keep-alive, Keep-Alive\r\nKeep-Alive: timeout=5\r\n\r\n", true},
	{"GET /api/fields HTTP/1.1\r\nhost: gw.example\r\nX-Forwarded-For: 192.0.2.9\r\nX-Real-Ip: 192.0.2.9\r\nx-custom: a\r\nX-Custom: b\r\n" +
		"Keep-Alive: 300\r\nX-Forwarded-Proto: https\r\nConnection: keep-alive\r\nuser-agent: t/2\r\n\r\n",
		"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-up: 1\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n" +
			"RateLimit-Policy: \"up\";q=9\r\ncontent-length: 2\r\nX-Up: 2\r\n\r\n{}", true},
	{"GET /api/order HTTP/1.1\r\nConnection: keep-alive\r\nHost: gw.example\r\nAccept: a\r\nX-Forwarded-For: 192.0.2.9\r\nVia: 1\r\nAccept: b\r\nVia: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nLink: <a>\r\nKeep-Alive: timeout=5\r\nX-A: 1\r\nLink: <b>\r\nContent-Length: 0\r\n\r\n", true},
	{"GET /api/empty HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n", true},
	{"GET /api/reason/./x/../made HTTP/1.1\r\nHost: gw.example:8080\r\n\r\n",
		"HTTP/1.1 201 Made It\r\nContent-Length: 0\r\nContent-Encoding: identity\r\n\r\n", true},
	{"GET /api/missing HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		"HTTP/1.0 404 Not Here\r\nContent-Type: text/html\r\nContent-Length: 4\r\n\r\nnone", true},
	{"GET /api/chunked HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n3\r\nabc\r\n0\r\n\r\n", true},
	{"GET /api/barelf HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 2\nX-Bare: lf\n\nok", true},
	{"GET /api/extra HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nunasked", true},
	{"GET /api/silentclose HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsilent", false},
	{"GET /api/cut HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false},
	{"GET /api/closeup HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye", false},
	{"GET /api/last HTTP/1.1\r\nHost: gw.example\r\nConnection: close\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nlast", true},
}

// frontPassPolicy is a policy that passes /api/** to upstream under a
// per-address limit of n an hour that the test does not reach, with the
// RateLimit fields.
func frontPassPolicy(upstream string, n int) string {
	return `version: 1
server:
  headers: {ratelimit: true}
routes:
  - {name: api, match: {paths: ["/api/**"]}, upstream: "` + upstream + `"}
limits:
  - {name: per-ip, rate: ` + strconv.Itoa(n) + `, per: 1h, burst: ` + strconv.Itoa(n) + `, key: client_ip, scope: global}
`
}

// TestFrontForwardsAsFasthttp: requests the front serves and the flow
// passes (fields of any case, a client's own forwarding and hop-by-hop
// fields, a path with dot segments, a host with a port, a client that
// closes) reach the upstream as they do with the front off, and so do
// its answers the client: plain ones, which the front answers itself
// (fields of any case, its own hop-by-hop fields, no body, a reason of its
// own, HTTP/1.0, bytes after the answer, a close with or without saying
// so, a body cut short), and those it hands to the edge engine's exchange
// (its own RateLimit fields, Set-Cookie, chunked, bare LFs). "As they do"
// is the same status lines and bodies, and the same fields (field lines
// of one name in the same order); the front keeps names in the case they
// came in and writes its own Date.
func TestFrontForwardsAsFasthttp(t *testing.T) {
	var (
		mu    sync.Mutex
		heads []byte
	)
	addr := upstreamtest.Heads(t, func(head []byte) ([]byte, bool) {
		mu.Lock()
		heads = append(heads, head...)
		mu.Unlock()
		line, _, _ := bytes.Cut(head, []byte(" HTTP/"))
		line, _, _ = bytes.Cut(line, []byte("?"))
		for _, f := range frontForwarded {
			target := strings.Fields(f.req)[1]
			target, _, _ = strings.Cut(target, "?")
			if path.Base(target) == path.Base(string(line)) {
				return []byte(f.answer), f.keep
			}
		}
		return []byte("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"), true
	})
	// Slow to fill again: the same RateLimit fields on both runs.
	src := frontPassPolicy("http://"+addr+"/base?k=v", 1000)
	exchange := func(noFront bool) (answers, sent []byte) {
		mu.Lock()
		heads = nil
		mu.Unlock()
		e := New(policyGateway(t, src), Options{NoFront: noFront})
		addr, stop := serveOn(t, e)
		defer stop()
		c, br := dialKept(t, addr)
		for _, f := range frontForwarded {
			if _, err := io.WriteString(c, f.req); err != nil {
				t.Fatal(err)
			}
			answers = append(answers, readAnswer(t, br)...)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("after Connection: close: %v, want the connection closed", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return answers, bytes.Clone(heads)
	}
	date := regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)
	answersFront, sentFront := exchange(false)
	answersFast, sentFast := exchange(true)
	answersFront = date.ReplaceAll(answersFront, []byte("Date: -\r"))
	answersFast = date.ReplaceAll(answersFast, []byte("Date: -\r"))
	if a, b := fieldsInOrder(sentFront), fieldsInOrder(sentFast); a != b {
		t.Errorf("the upstream was sent, with the front\n%s\nwith fasthttp\n%s", a, b)
	}
	if a, b := fieldsInOrder(answersFront), fieldsInOrder(answersFast); a != b {
		t.Errorf("the client was answered, with the front\n%s\nwith fasthttp\n%s", a, b)
	}
	if n := bytes.Count(sentFront, []byte("GET /base/api/")); n != len(frontForwarded) {
		t.Errorf("the upstream was sent %d requests, want %d:\n%s", n, len(frontForwarded), sentFront)
	}
	for _, want := range []string{"GET /base/api/plain?k=v&q=1&r=%20 HTTP/1.1\r\n", "GET /base/api/reason/made?k=v HTTP/1.1\r\n",
		"Host: " + addr + "\r\n", "X-Forwarded-Host: gw.example:8080\r\n", "X-Forwarded-For: 127.0.0.1\r\n"} {
		if !bytes.Contains(sentFront, []byte(want)) {
			t.Errorf("no %q in what the upstream was sent:\n%s", want, sentFront)
		}
	}
	// The front forwarded them: the names keep the case they came in.
	if !bytes.Contains(sentFront, []byte("\r\nx-custom: a\r\n")) || !bytes.Contains(answersFront, []byte("\r\nx-lower:  yes \r\n")) {
		t.Errorf("the front forwarded no request itself: the upstream was sent\n%s\nthe client answered\n%s", sentFront, answersFront)
	}
	// Lines of one name keep their order where a field before them is
	// removed, on both ways.
	for _, b := range [][]byte{sentFront, sentFast, answersFront, answersFast} {
		if !regexp.MustCompile(`(?is)accept: a\r\n.*accept: b\r\n`).Match(b) && bytes.Contains(b, []byte("Accept: b")) ||
			!regexp.MustCompile(`(?is)via: 1\r\n.*via: 2\r\n`).Match(b) && bytes.Contains(b, []byte("Via: 2")) ||
			!regexp.MustCompile(`(?is)link: <a>\r\n.*link: <b>\r\n`).Match(b) && bytes.Contains(b, []byte("<b>")) {
			t.Errorf("lines of one name reordered:\n%s", b)
		}
	}
	for _, unwanted := range []string{"192.0.2.9", "Keep-Alive", "https"} {
		if bytes.Contains(sentFront, []byte(unwanted)) {
			t.Errorf("%q in what the upstream was sent:\n%s", unwanted, sentFront)
		}
	}
	for _, want := range []string{"HTTP/1.1 200 OK", "HTTP/1.1 204 No Content", "HTTP/1.1 201 Created", "HTTP/1.1 404 Not Found",
		"Ratelimit-Policy", "Connection: close\r\n", "\r\n\r\nhello", "\r\n\r\nlast", "\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"\r\n\r\nok", "\r\n\r\nsilent", "HTTP/1.1 502 Bad Gateway"} {
		if !bytes.Contains(answersFront, []byte(want)) {
			t.Errorf("no %q in the answers:\n%s", want, answersFront)
		}
	}
}

// fieldsInOrder returns the messages b holds (heads and Content-Length
// bodies) with the field lines of each head as they mean: names in
// fasthttp's case, values without white space around them, sorted by
// name (lines of one name in the order they came, the only order that
// means anything).
func fieldsInOrder(b []byte) string {
	var out strings.Builder
	br := bufio.NewReader(bytes.NewReader(b))
	for {
		start, err := br.ReadString('\n')
		if err != nil {
			out.WriteString(start)
			return out.String()
		}
		out.WriteString(start)
		var lines []string
		n := 0
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
			name, value, _ := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
			name = http.CanonicalHeaderKey(name)
			value = strings.TrimSpace(value)
			if name == "Content-Length" {
				n, _ = strconv.Atoi(value)
			}
			lines = append(lines, name+": "+value+"\r\n")
		}
		sort.SliceStable(lines, func(i, j int) bool {
			return strings.SplitN(lines[i], ":", 2)[0] < strings.SplitN(lines[j], ":", 2)[0]
		})
		out.WriteString(strings.Join(lines, "") + "\r\n")
		body := make([]byte, n)
		k, _ := io.ReadFull(br, body)
		out.Write(body[:k])
	}
}

// FuzzFrontForwardsAsFasthttp looks for an upstream's answer that reaches
// the client otherwise with the front on than with it off (as
// TestFrontForwardsAsFasthttp compares them): the answers the front
// answers itself, and those it hands on after reading their head.
func FuzzFrontForwardsAsFasthttp(f *testing.F) {
	for _, fw := range frontForwarded {
		f.Add([]byte(fw.answer))
	}
	for _, a := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type:\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nX-Empty:\r\nServer:  \r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\nContent-Type: text/plain\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Length: 00\r\n\r\n",
		"HTTP/1.1 599 Whatever\r\nContent-Length: 1\r\nConnection: close, X-A\r\nX-A: 1\r\n\r\n!",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n!",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef",
		"HTTP/1.1 200 OK\r\n\r\nuntil the close",
	} {
		f.Add([]byte(a))
	}
	var answer atomic.Pointer[[]byte]
	addr := upstreamtest.Heads(f, func([]byte) ([]byte, bool) { return *answer.Load(), false })
	src := frontPassPolicy("http://"+addr, 1000000)
	var addrs [2]string
	for i, noFront := range []bool{false, true} {
		e := New(policyGatewayWith(f, src, gateway.TransportOptions{ResponseHeaderTimeout: 300 * time.Millisecond}), Options{NoFront: noFront})
		a, stop := serveOn(f, e)
		f.Cleanup(stop)
		addrs[i] = a
	}
	date := regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)
	rl := regexp.MustCompile(`(?m)^Ratelimit: [^\r]*\r$`)
	ask := func(t *testing.T, addr string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /api/f HTTP/1.1\r\nHost: gw.example\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		all, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("%v after %q", err, all)
		}
		all = date.ReplaceAll(all, []byte("Date: -\r"))
		return fieldsInOrder(rl.ReplaceAll(all, []byte("Ratelimit: -\r")))
	}
	f.Fuzz(func(t *testing.T, a []byte) {
		answer.Store(&a)
		front, fast := ask(t, addrs[0]), ask(t, addrs[1])
		if front != fast {
			t.Fatalf("the upstream answered %q; the client got, with the front\n%q\nwith fasthttp\n%q", a, front, fast)
		}
	})
}

// TestFrontPipelinesLongAnswers: answers the front forwards itself to
// requests pipelined in one write, each longer than the front holds
// before it writes, reach the client whole and in order.
func TestFrontPipelinesLongAnswers(t *testing.T) {
	const n, size = 40, 40 << 10
	addr := upstreamtest.Heads(t, func(head []byte) ([]byte, bool) {
		path, _, _ := bytes.Cut(bytes.TrimPrefix(head, []byte("GET /")), []byte(" "))
		body := bytes.Repeat(path, size/len(path))
		return append([]byte("HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body...), true
	})
	e := New(policyGateway(t, `version: 1
routes:
  - {name: api, match: {paths: ["/**"]}, upstream: "http://`+addr+`"}
`), Options{})
	gw, stop := serveOn(t, e)
	defer stop()
	c, br := dialKept(t, gw)
	var heads []byte
	for i := range n {
		heads = fmt.Appendf(heads, "GET /%04d HTTP/1.1\r\nHost: gw.example\r\n\r\n", i)
	}
	if _, err := c.Write(heads); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		answer := readAnswer(t, br)
		_, body, _ := bytes.Cut(answer, crlf2)
		want := bytes.Repeat(fmt.Appendf(nil, "%04d", i), size/4)
		if !bytes.HasPrefix(answer, []byte("HTTP/1.1 200 OK\r\n")) || !bytes.Equal(body, want) {
			t.Fatalf("answer %d: %.80q..., want the body of %04d", i, answer, i)
		}
	}
}
