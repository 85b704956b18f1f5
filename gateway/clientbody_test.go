package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// EdgeFrontTimeouts serves g on the edge engine with read (headers and
// body) as its read timeouts, on loopback until the test ends, and returns
// its address (set from package gateway_test: edgefront_test.go).
var EdgeFrontTimeouts func(t testing.TB, g *Gateway, read time.Duration) string

// clientBodyRead is the read timeouts (server.timeouts) of the client
// body tests' gateways.
const clientBodyRead = 500 * time.Millisecond

// clientBodyPolicy is a route to two upstream targets, either ejected by
// one failure, under an adaptive overload limit that learns from a single
// request, and a concurrency limit of one.
func clientBodyPolicy(a, b string) string {
	return fmt.Sprintf(`version: 1
routes:
  - name: api
    match: {paths: ["/**"]}
    upstreams: [%q, %q]
    health: {failures: 1, eject: 1h}
    overload:
      adaptive: {min: 1, max: 64, initial: 64, window: 1ms, min_samples: 1}
      tier: critical
limits:
  - name: one-at-a-time
    algorithm: concurrency
    limit: 1
    key: global
`, a, b)
}

// upstreamCounts is an Observer that keeps the upstream statuses it is
// told (0: the upstream could not be reached).
type upstreamCounts struct {
	nopObserver
	mu       sync.Mutex
	statuses []int
}

func (o *upstreamCounts) Upstream(_ string, status int) {
	o.mu.Lock()
	o.statuses = append(o.statuses, status)
	o.mu.Unlock()
}

func (o *upstreamCounts) told() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.statuses...)
}

// warnings is a log handler that keeps the messages of warnings and
// errors, with their attributes.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *warnings) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.msgs = append(h.msgs, b.String())
	h.mu.Unlock()
	return nil
}

func (h *warnings) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnings) WithGroup(string) slog.Handler      { return h }

func (h *warnings) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// clientBodyGateway is a gateway of clientBodyPolicy in front of two
// upstreams that read the whole body and echo it, served on front with
// clientBodyRead as its read timeouts; it returns its address.
func clientBodyGateway(t *testing.T, front string) (g *Gateway, addr string, obs *upstreamCounts, log *warnings, alog *recordSink) {
	t.Helper()
	echo := func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		_, _ = w.Write(b)
	}
	a, b := newUpstream(t, echo), newUpstream(t, echo)
	p := compilePolicy(t, "clientbody.yaml", clientBodyPolicy(a.URL, b.URL))
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obs, log, alog = &upstreamCounts{}, &warnings{}, &recordSink{}
	g, err = New(Options{Matcher: pm, Engine: memEngine(t), Observer: obs, Logger: slog.New(log), AccessLog: alog})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.UseRoutes(p.File()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.CloseRoutes)
	switch front {
	case frontNetHTTP:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: g, ReadHeaderTimeout: clientBodyRead, ReadTimeout: clientBodyRead}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		addr = ln.Addr().String()
	case frontEdge:
		addr = EdgeFrontTimeouts(t, g, clientBodyRead)
	default:
		t.Fatalf("unknown front %q", front)
	}
	return g, addr, obs, log, alog
}

// rawBodyExchange sends head and body on a connection of its own, shuts
// its side down after them when half, and reads until the gateway closes
// the connection: the final answer (nil for none) and whether a 100
// Continue came first. A connection still open after 10s fails the test.
func rawBodyExchange(t *testing.T, addr, raw string, half bool) (resp *http.Response, body string, continued bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	if half {
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the gateway kept the connection open; it sent %q", got)
	}
	const cont = "HTTP/1.1 100 Continue\r\n\r\n"
	if bytes.HasPrefix(got, []byte(cont)) {
		continued, got = true, got[len(cont):]
	}
	if len(got) == 0 {
		return nil, "", continued
	}
	resp, err = http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
	if err != nil {
		t.Fatalf("not an answer: %q: %v", got, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), continued
}

// TestClientBodyFailures: a client whose body stalls past the read
// timeout, is cut off (the client shuts its side down mid-body), breaks
// its chunked framing, or asks for 100 Continue and sends nothing, fails
// on its own: it gets no answer (never the 200 net/http's server would
// write for a handler that wrote nothing, nor a 502 or 504 that blames
// the upstream), or 400 with the reason for a malformed body, and the
// connection is closed. The upstream is not blamed: no upstream answer is
// counted, both targets of the pool stay in (one failure would eject
// one), the adaptive limit learns nothing (a drop would cut it, a sample
// would teach it a latency), and nothing is logged against it. The
// request's concurrency slot comes back, and the next request is served.
func TestClientBodyFailures(t *testing.T) {
	t.Parallel()
	const head = "POST /a HTTP/1.1\r\nHost: x\r\n"
	cases := []struct {
		name   string
		raw    string
		half   bool
		status int    // 0: no answer
		reason string // in a 400's body
		cont   bool   // a 100 Continue comes first
	}{
		{name: "stalled body", raw: head + "Content-Length: 10\r\n\r\nabc"},
		{name: "body cut off", raw: head + "Content-Length: 10\r\n\r\nabc", half: true},
		{name: "chunked body stalled mid-chunk", raw: head + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n5\r\nab"},
		{name: "chunked body cut off mid-chunk", raw: head + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n5\r\nab", half: true},
		{name: "chunked body cut off in a size line", raw: head + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1", half: true},
		{name: "malformed chunk size", raw: head + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\nabc\r\n0\r\n\r\n",
			status: http.StatusBadRequest, reason: "malformed chunked body"},
		{name: "expect 100-continue, then nothing", raw: head + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n", cont: true},
	}
	for _, front := range proxyFronts {
		for _, tc := range cases {
			t.Run(front+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				g, addr, obs, log, alog := clientBodyGateway(t, front)
				resp, body, continued := rawBodyExchange(t, addr, tc.raw, tc.half)
				switch {
				case continued != tc.cont:
					t.Errorf("100 Continue came: %v; want %v", continued, tc.cont)
				case tc.status == 0 && resp != nil:
					t.Errorf("answered %d %q; want no answer", resp.StatusCode, body)
				case tc.status != 0 && resp == nil:
					t.Errorf("no answer; want %d", tc.status)
				case tc.status != 0:
					if resp.StatusCode != tc.status || !strings.Contains(body, tc.reason) || !resp.Close {
						t.Errorf("answered %d %q (closed: %v); want %d with %q, closed", resp.StatusCode, body, resp.Close, tc.status, tc.reason)
					}
				}
				pollUntil(t, "the request to end", func() bool {
					alog.mu.Lock()
					defer alog.mu.Unlock()
					return len(alog.recs) == 1 && overloadState(g).Inflight == 0
				})
				logged := alog.last(t).Status
				if want := tc.status; want == 0 && logged != statusClientGone || want != 0 && logged != want {
					t.Errorf("logged %d", logged)
				}
				if told := obs.told(); len(told) != 0 {
					t.Errorf("upstream answers counted: %v; want none", told)
				}
				for _, ts := range g.Targets() {
					if !ts.Healthy {
						t.Errorf("target %s ejected", ts.Target)
					}
				}
				if s := overloadState(g); s.Limit != 64 || s.Latency != 0 || s.NoLoad != 0 {
					t.Errorf("the adaptive limit learnt from the client's failure: %+v", s)
				}
				for _, m := range log.all() {
					if strings.Contains(m, "upstream") {
						t.Errorf("logged %q", m)
					}
				}
				// The concurrency slot came back, and the upstream serves.
				c := newClient(t)
				resp2, err := c.Post("http://"+addr+"/a", "text/plain", strings.NewReader("hello"))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp2.Body)
				resp2.Body.Close()
				if resp2.StatusCode != 200 || string(b) != "hello" {
					t.Errorf("the next request: %d %q", resp2.StatusCode, b)
				}
			})
		}
	}
}
