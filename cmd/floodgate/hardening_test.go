package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingUpstream is a real upstream that notes every request it gets
// whole (method, path and body); a request whose body breaks off is not
// one.
type recordingUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newRecordingUpstream(t *testing.T) *recordingUpstream {
	t.Helper()
	u := &recordingUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		u.mu.Lock()
		u.seen = append(u.seen, fmt.Sprintf("%s %s %s", r.Method, r.URL.Path, b))
		u.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *recordingUpstream) take() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.seen
	u.seen = nil
	return s
}

// rawExchange sends raw bytes on a new connection and reads the answers
// until the gateway closes it (closed) or nothing more comes for a while.
func rawExchange(t *testing.T, addr, raw string) (statuses []int, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return statuses, !(errors.As(err, &ne) && ne.Timeout())
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
}

// TestRequestSmugglingAndMalformedRequests sends what request smugglers
// and broken clients send, on each engine: the answers are the same, and
// nothing hidden in a request reaches the upstream as a request of its
// own.
func TestRequestSmugglingAndMalformedRequests(t *testing.T) {
	t.Parallel() // it waits for timeouts, not on the CPU
	forEngines(t, testRequestSmugglingAndMalformedRequests)
}

func testRequestSmugglingAndMalformedRequests(t *testing.T, engine string) {
	up := newRecordingUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr := strings.TrimPrefix(gw, "http://")
	big := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		name     string
		raw      string
		statuses []int    // the answers, in order
		closed   bool     // the gateway closes the connection after them
		upstream []string // what the upstream gets
	}{
		{"TE and CL", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 30\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
			[]int{200}, true, []string{"POST / "}},
		{"two different Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabcGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
			[]int{400}, true, nil},
		{"a negative Content-Length", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", []int{400}, true, nil},
		{"an unknown transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", []int{501}, true, nil},
		{"a bad chunk size", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
			[]int{400}, true, nil},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", []int{400}, true, nil},
		{"another HTTP version", "GET / HTTP/3.0\r\nHost: x\r\n\r\n", []int{505}, true, nil},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", []int{400}, true, nil},
		{"a field name with a space", "GET / HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", []int{400}, true, nil},
		{"a control character in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n", []int{400}, true, nil},
		{"a folded field", "GET /folded HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n", []int{200}, false, []string{"GET /folded "}},
		{"bare LF line ends", "GET /lf HTTP/1.1\nHost: x\n\n", []int{200}, false, []string{"GET /lf "}},
		{"60 KB of fields", "GET /big HTTP/1.1\r\nHost: x\r\nX-Big: " + big(60<<10) + "\r\n\r\n", []int{200}, false, []string{"GET /big "}},
		{"1 MB of fields", "GET /huge HTTP/1.1\r\nHost: x\r\nX-Big: " + big(1<<20) + "\r\n\r\n", []int{431}, true, nil},
		{"pipelined", "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n", []int{200, 200}, false, []string{"GET /1 ", "GET /2 "}},
	}
	for _, c := range cases {
		statuses, closed := rawExchange(t, addr, c.raw)
		if !slices.Equal(statuses, c.statuses) || closed != c.closed {
			t.Errorf("%s: answers %v (closed %v), want %v (closed %v)", c.name, statuses, closed, c.statuses, c.closed)
		}
		if got := up.take(); !slices.Equal(got, c.upstream) {
			t.Errorf("%s: the upstream got %q, want %q", c.name, got, c.upstream)
		}
	}
	// Transfer-Encoding on HTTP/1.0 is faulty framing: net/http ignores the
	// body, the edge engine refuses it; either way the connection closes
	// and the chunks never reach the upstream as a body or a request.
	statuses, closed := rawExchange(t, addr, "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
	if len(statuses) != 1 || (statuses[0] != 200 && statuses[0] != 501) || !closed {
		t.Errorf("TE on HTTP/1.0: answers %v (closed %v), want one 200 or 501 and the connection closed", statuses, closed)
	}
	for _, r := range up.take() {
		if r != "POST / " {
			t.Errorf("TE on HTTP/1.0: the upstream got %q", r)
		}
	}
}

// TestSlowHeadersAreCut: a client that sends its headers a byte at a time
// (slowloris) is cut off by server.timeouts.read_header on each engine,
// without an answer, and never reaches the upstream: on a new connection
// (silent, or trickling its first request), and on a kept-alive one whose
// next request's head trickles, whether it came after the answer, behind
// the request before it in one write (pipelined), or after the connection
// waited long enough to be parked.
func TestSlowHeadersAreCut(t *testing.T) {
	t.Parallel() // it waits for timeouts, not on the CPU
	forEngines(t, testSlowHeadersAreCut)
}

func testSlowHeadersAreCut(t *testing.T, engine string) {
	up := newRecordingUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  timeouts: {read_header: 1s, read: 2s}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr := strings.TrimPrefix(gw, "http://")
	// OPTIONS * is answered by the gateway (200, the connection kept),
	// never by the upstream.
	const answered = "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, c := range []struct {
		name         string
		before, head string        // sent, then the answers to before are read, then head
		idle         time.Duration // waited between the two
	}{
		{name: "silent"},
		{name: "trickling", head: "GET / HTTP/1.1\r\n"},
		{name: "kept alive", before: answered, head: "GET / HTTP/1.1\r\n"},
		{name: "pipelined", before: answered + "GET / HTTP/1.1\r\n"},
		{name: "parked", before: answered, idle: 2500 * time.Millisecond, head: "GET / HTTP/1.1\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			if c.before != "" {
				if _, err := io.WriteString(conn, c.before); err != nil {
					t.Fatal(err)
				}
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("the request before: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("the request before: %d", resp.StatusCode)
				}
				_ = conn.SetReadDeadline(time.Time{})
				time.Sleep(c.idle)
			}
			if c.head != "" {
				if _, err := io.WriteString(conn, c.head); err != nil {
					t.Fatal(err)
				}
			}
			cut := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(br) // until the gateway closes
				cut <- b
			}()
			deadline := time.After(20 * time.Second)
			for i := 0; ; i++ {
				select {
				case b := <-cut:
					if len(b) > 0 {
						t.Errorf("a slow client was answered %q", b)
					}
					return
				case <-deadline:
					t.Fatal("a slow client was never cut off")
				case <-time.After(200 * time.Millisecond):
					if c.head != "" || c.before != "" {
						_, _ = fmt.Fprintf(conn, "X-%d: y\r\n", i)
					}
				}
			}
		})
	}
	t.Cleanup(func() {
		if got := up.take(); len(got) > 0 {
			t.Errorf("the upstream got %q", got)
		}
	})
}

// TestRefusedRequestsAreNotCounted: what the gateway answers before any
// limit (what it cannot read: 400, 431, 501, 505; what it never forwards:
// CONNECT, OPTIONS *, PRI *, an over-long method, an expectation other than
// 100-continue; a path it refuses) never reaches the upstream and costs no
// limit, per address or global, on each engine, as NGINX answers such
// requests before limit_req: the limits then count the requests that
// follow from the first.
func TestRefusedRequestsAreNotCounted(t *testing.T) {
	t.Parallel() // it waits for timeouts, not on the CPU
	forEngines(t, testRefusedRequestsAreNotCounted)
}

func testRefusedRequestsAreNotCounted(t *testing.T, engine string) {
	up := newRecordingUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - name: per-ip
    algorithm: fixed_window
    limit: 3
    window: 1h
    key: client_ip
  - name: everyone
    algorithm: fixed_window
    limit: 3
    window: 1h
    key: global
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr := strings.TrimPrefix(gw, "http://")
	for _, c := range []struct {
		name, raw string
		status    int
	}{
		{"no Host", "GET /x HTTP/1.1\r\n\r\n", 400},
		{"an empty Host", "GET /x HTTP/1.1\r\nHost: \r\n\r\n", 400},
		{"a refused path", "GET /a%5cb HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"a broken escape", "GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"1 MB of fields", "GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\n\r\n", 431},
		{"an unknown transfer coding", "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"Transfer-Encoding: identity", "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n", 501},
		{"another version", "GET /x HTTP/3.0\r\nHost: x\r\n\r\n", 505},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 200},
		{"PRI *", "PRI * HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"a method of 10,000 bytes", strings.Repeat("M", 10000) + " /x HTTP/1.1\r\nHost: x\r\n\r\n", 501},
		{"an unknown expectation", "POST /x HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 1\r\n\r\na", 417},
	} {
		statuses, _ := rawExchange(t, addr, c.raw)
		if len(statuses) != 1 || statuses[0] != c.status {
			t.Errorf("%s: answers %v, want %d", c.name, statuses, c.status)
		}
		if got := up.take(); len(got) > 0 {
			t.Errorf("%s: the upstream got %q", c.name, got)
		}
	}
	// Nothing was counted: the limits of 3 start from the first request
	// that reaches them.
	for i, want := range []string{`"per-ip";r=2`, `"per-ip";r=1`, `"per-ip";r=0`} {
		code, h, _ := get(t, gw+"/x")
		if code != 200 || !strings.Contains(h.Get("RateLimit"), want) {
			t.Errorf("request %d: %d, RateLimit %q, want 200 and %s", i+1, code, h.Get("RateLimit"), want)
		}
	}
	if code, _, _ := get(t, gw+"/x"); code != 429 {
		t.Errorf("the fourth request: %d, want 429", code)
	}
	if got := up.take(); len(got) != 3 {
		t.Errorf("the upstream got %q, want the three requests allowed", got)
	}
}
