package edge

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
)

// parked reports how many of the engine's connections are parked.
func parked(e *Engine) int {
	e.parker.mu.Lock()
	defer e.parker.mu.Unlock()
	n := 0
	for c := range e.parker.conns {
		if c.parkedOut.Load() {
			n++
		}
	}
	return n
}

// heldIn reports how many connections the engine's idle set holds (0
// before it has one).
func heldIn(e *Engine) int {
	e.parker.mu.Lock()
	set := e.parker.set
	e.parker.mu.Unlock()
	if set == nil {
		return 0
	}
	return set.held()
}

// waitFor waits until cond holds, or fails.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// serveOn starts e on a loopback port and returns its address and a stop
// that shuts it down and checks that Serve ended cleanly.
func serveOn(t testing.TB, e *Engine) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln.Addr().String(), serveListener(t, e, ln)
}

// serveListener serves e on ln and returns a stop that shuts it down and
// checks that Serve ended cleanly.
func serveListener(t testing.TB, e *Engine, ln net.Listener) (stop func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- e.Serve(ln) }()
	return func() {
		t.Helper()
		if err := e.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// echoGateway is a gateway whose one route sends everything to an upstream
// answering what echo writes, with the policy's limits (YAML lines, "" for
// none); the upstream stops with the test.
func echoGateway(t *testing.T, echo func(w io.Writer, r *http.Request), limits string) *gateway.Gateway {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { echo(w, r) }))
	t.Cleanup(up.Close)
	return policyGateway(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: `+up.URL+`}
`+limits)
}

// answered checks that res (or err) is a 200 whose body is want, and
// closes the body.
func answered(t *testing.T, what string, res *http.Response, err error, want string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != want {
		t.Fatalf("%s: answered %d %q, want 200 %q", what, res.StatusCode, body, want)
	}
}

// dial opens a connection to addr, closed with the test, and a reader of
// its answers.
func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// echoPath answers "up <path>".
func echoPath(w io.Writer, r *http.Request) { _, _ = io.WriteString(w, "up "+r.URL.Path) }

// TestIdleConnectionsPark: a kept-alive connection idle for ParkIdleAfter
// leaves fasthttp and is parked; its next request (sent whole, or its first
// bytes only and the rest later) is answered as the first was, on the same
// connection, the request after it too; Shutdown closes a parked connection.
func TestIdleConnectionsPark(t *testing.T) {
	t.Parallel()
	g := echoGateway(t, echoPath, `limits:
  - {name: roomy, rate: 1000000, burst: 1000000, key: client_ip}
`)
	e := New(g, Options{ParkIdleAfter: 20 * time.Millisecond})
	addr, stop := serveOn(t, e)
	c, br := dial(t, addr)
	ask := func(parts ...string) {
		t.Helper()
		for i, p := range parts {
			if i > 0 {
				time.Sleep(30 * time.Millisecond)
			}
			if _, err := io.WriteString(c, p); err != nil {
				t.Fatal(err)
			}
		}
		res, err := http.ReadResponse(br, nil)
		answered(t, "the request", res, err, "up /a")
		if res.Header.Get("Ratelimit") == "" || res.Close {
			t.Fatalf("answered without RateLimit (%q) or closing (%v)", res.Header.Get("Ratelimit"), res.Close)
		}
	}
	req := "GET /a HTTP/1.1\r\nHost: gateway.example\r\n\r\n"
	ask(req)
	waitFor(t, "parked", func() bool { return parked(e) == 1 })
	ask(req) // whole
	if n := parked(e); n != 0 {
		t.Fatalf("%d connections parked while one is served", n)
	}
	ask(req) // at once, before it could be parked again
	waitFor(t, "parked again", func() bool { return parked(e) == 1 })
	ask(req[:5], req[5:]) // its first bytes wake it, the rest comes later
	waitFor(t, "parked again", func() bool { return parked(e) == 1 })
	ask(strings.Replace(req, "\r\n\r\n", "\r\nConnection: keep-alive\r\n\r\n", 1))
	waitFor(t, "parked again", func() bool { return parked(e) == 1 })

	stop()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a parked connection still open after Shutdown: read %d, %v", n, err)
	}
}

// TestParkingOff: with ParkIdleAfter negative, an idle connection stays
// with fasthttp.
func TestParkingOff(t *testing.T) {
	t.Parallel()
	g := policyGateway(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: http://127.0.0.1:9}
`)
	if e := New(g, Options{ParkIdleAfter: -1}); e.parker != nil {
		t.Fatal("a parker with ParkIdleAfter -1")
	}
}

// TestCollectNow: the parker collects after many parks, once they have
// settled, and not more often than collectEvery.
func TestCollectNow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		parked                  int
		sinceLast, sinceCollect time.Duration
		want                    bool
	}{
		{collectAfterParks, collectSettle, -1, true},
		{collectAfterParks - 1, collectSettle, -1, false},           // too few
		{collectAfterParks, collectSettle - time.Second, -1, false}, // still parking
		{collectAfterParks, collectSettle, collectEvery - time.Second, false},
		{collectAfterParks, collectSettle, collectEvery, true},
	} {
		if got := collectNow(c.parked, c.sinceLast, c.sinceCollect); got != c.want {
			t.Errorf("collectNow(%d, %v, %v) = %v, want %v", c.parked, c.sinceLast, c.sinceCollect, got, c.want)
		}
	}
}

// tlsEngine returns an engine in front of an echoPath upstream that parks
// after parkAfter, a TLS listener for it on loopback, and the httptest TLS
// server whose certificate the listener serves (its Client trusts it).
// The server and the upstream stop with the test.
func tlsEngine(t *testing.T, parkAfter time.Duration) (*Engine, net.Listener, *httptest.Server) {
	t.Helper()
	certs := httptest.NewUnstartedServer(http.NotFoundHandler())
	certs.StartTLS()
	t.Cleanup(certs.Close)
	g := echoGateway(t, echoPath, "")
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := tls.NewListener(plain, &tls.Config{Certificates: certs.TLS.Certificates, NextProtos: []string{"http/1.1"}})
	return New(g, Options{ParkIdleAfter: parkAfter}), ln, certs
}

// TestTLSConnectionsPark: a kept-alive TLS connection is parked (on Linux
// in the idle set) and its next requests are answered on it, as a plain
// one's.
func TestTLSConnectionsPark(t *testing.T) {
	t.Parallel()
	e, ln, certs := tlsEngine(t, 20*time.Millisecond)
	stop := serveListener(t, e, ln)
	client := certs.Client()
	tr := client.Transport.(*http.Transport)
	tr.MaxConnsPerHost = 1 // one connection, kept alive
	for i := range 4 {
		res, err := client.Get("https://" + ln.Addr().String() + "/a")
		answered(t, fmt.Sprintf("request %d", i), res, err, "up /a")
		waitFor(t, "parked", func() bool { return parked(e) == 1 && (runtime.GOOS != "linux" || heldIn(e) == 1) })
	}
	e.parker.mu.Lock()
	n := len(e.parker.conns)
	e.parker.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d connections, want the one kept alive", n)
	}
	tr.CloseIdleConnections()
	stop()
}

// TestSlowRequestsAreNotParked: a client that pauses for many parking
// intervals in the middle of its request line, its headers or its body is
// never parked there: the request is answered whole, and the upstream gets
// the body it was sent.
func TestSlowRequestsAreNotParked(t *testing.T) {
	t.Parallel()
	g := echoGateway(t, func(w io.Writer, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b))
	}, "")
	const every = 10 * time.Millisecond
	e := New(g, Options{ParkIdleAfter: every})
	addr, stop := serveOn(t, e)
	c, br := dial(t, addr)
	req := "POST /slow HTTP/1.1\r\nHost: gateway.example\r\nContent-Length: 10\r\n\r\n0123456789"
	cuts := []int{3, 20, strings.Index(req, "Content-Length") + 4, strings.Index(req, "\r\n\r\n") + 2, len(req) - 6}
	for round := range 2 {
		last := 0
		for _, cut := range append(cuts, len(req)) {
			if _, err := io.WriteString(c, req[last:cut]); err != nil {
				t.Fatal(err)
			}
			last = cut
			if cut < len(req) {
				time.Sleep(8 * every) // four times the longest wait before parking
				if n := parked(e); n != 0 {
					t.Fatalf("round %d: parked in the middle of a request, after %q", round, req[:cut])
				}
			}
		}
		res, err := http.ReadResponse(br, nil)
		answered(t, fmt.Sprintf("round %d", round), res, err, "POST /slow 0123456789")
		// Between the two rounds the connection is idle: parked.
		waitFor(t, "parked", func() bool { return parked(e) == 1 })
	}
	stop()
}

// TestParkedConnectionsStillTimeOut: parking does not lengthen how long an
// idle connection is kept: a parked connection that sends nothing is
// closed at the engine's idle timeout, so holding idle connections costs
// an attacker as much as before.
func TestParkedConnectionsStillTimeOut(t *testing.T) {
	t.Parallel()
	g := policyGateway(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
`)
	const idle = 300 * time.Millisecond
	e := New(g, Options{ParkIdleAfter: 10 * time.Millisecond, IdleTimeout: idle})
	addr, stop := serveOn(t, e)
	c, br := dial(t, addr)
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: gateway.example\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	answered := time.Now()
	waitFor(t, "parked", func() bool { return parked(e) == 1 })
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes, %v from an idle connection", n, err)
	}
	// Closed by the engine, not by the read deadline above; and not
	// before the idle timeout (minus the tick parking may take).
	if d := time.Since(answered); d >= 10*time.Second || d < idle-50*time.Millisecond {
		t.Fatalf("an idle parked connection closed after %v; the idle timeout is %v", d, idle)
	}
	waitFor(t, "forgotten", func() bool {
		e.parker.mu.Lock()
		defer e.parker.mu.Unlock()
		return len(e.parker.conns) == 0
	})
	stop()
}

// TestParkedConnectionsHoldNoGoroutine: on Linux a parked plain connection
// waits in the parker's idle set, not on a goroutine: no goroutine waits
// for any of 200 parked connections; each is answered on its next
// request and parked again, one whose client left is forgotten, and
// Shutdown closes the rest. Parked counts them all the way.
func TestParkedConnectionsHoldNoGoroutine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the idle set is Linux's (epoll)")
	}
	g := echoGateway(t, echoPath, "")
	e := New(g, Options{ParkIdleAfter: 20 * time.Millisecond})
	addr, stop := serveOn(t, e)
	const n = 200
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	for i := range conns {
		conns[i], readers[i] = dial(t, addr)
	}
	askAll := func(round int) {
		t.Helper()
		for i, c := range conns {
			if _, err := fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: gateway.example\r\n\r\n", i); err != nil {
				t.Fatal(err)
			}
		}
		for i, br := range readers {
			res, err := http.ReadResponse(br, nil)
			answered(t, fmt.Sprintf("round %d, connection %d", round, i), res, err, fmt.Sprintf("up /%d", i))
		}
	}
	// A goroutine waiting for a parked connection's next request waits in
	// resume; none may.
	waiting := func() int {
		buf := make([]byte, 1<<20)
		for {
			m := runtime.Stack(buf, true)
			if m < len(buf) {
				return strings.Count(string(buf[:m]), "edge.(*parker).resume(")
			}
			buf = make([]byte, 2*len(buf))
		}
	}
	for round := range 3 {
		askAll(round)
		// Parked (parkedOut) comes a moment before held.
		waitFor(t, "all parked, in the idle set", func() bool { return parked(e) == n && heldIn(e) == n })
		if w := waiting(); w != 0 {
			t.Fatalf("round %d: %d goroutines wait for parked connections", round, w)
		}
		if got := e.Parked(); got != n {
			t.Fatalf("round %d: Parked says %d, want %d", round, got, n)
		}
	}
	// Clients that leave while parked are forgotten: by the set and by the
	// parker.
	for _, c := range conns[n/2:] {
		c.Close()
	}
	waitFor(t, "the connections that left forgotten", func() bool {
		e.parker.mu.Lock()
		tracked := len(e.parker.conns)
		e.parker.mu.Unlock()
		return heldIn(e) == n/2 && tracked == n/2 && e.Parked() == n/2
	})
	conns, readers = conns[:n/2], readers[:n/2]
	stop()
	for i, br := range readers {
		_ = conns[i].SetReadDeadline(time.Now().Add(5 * time.Second))
		if m, err := br.Read(make([]byte, 1)); m != 0 || err == nil {
			t.Fatalf("connection %d still open after Shutdown: read %d, %v", i, m, err)
		}
	}
	if held := heldIn(e); held != 0 {
		t.Fatalf("the idle set still holds %d connections after Shutdown", held)
	}
	if got := e.Parked(); got != 0 {
		t.Fatalf("Parked says %d after Shutdown", got)
	}
}

// splitConn writes the first cut bytes of its next write, calls between,
// then writes the rest.
type splitConn struct {
	net.Conn
	cut     int
	between func()
}

func (c *splitConn) Write(b []byte) (int, error) {
	if c.cut <= 0 || len(b) <= c.cut {
		return c.Conn.Write(b)
	}
	n, err := c.Conn.Write(b[:c.cut])
	if err != nil {
		return n, err
	}
	c.cut = 0
	c.between()
	m, err := c.Conn.Write(b[n:])
	return n + m, err
}

// TestTLSParkedInsideARecord: a TLS connection whose next request comes as
// the start of a record while it waits for it, and the rest only after
// it was parked, is parked with that start inside its TLS layer (on Linux
// in the idle set) and answered once the rest comes: the rest wakes it.
func TestTLSParkedInsideARecord(t *testing.T) {
	t.Parallel()
	// Parked after 50 to 100 ms idle: the start of each record below is
	// sent well before.
	e, ln, certs := tlsEngine(t, 50*time.Millisecond)
	stop := serveListener(t, e, ln)
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	split := &splitConn{Conn: raw}
	cc := certs.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cc.ServerName = "example.com" // the httptest certificate's
	tc := tls.Client(split, cc)
	defer tc.Close()
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second)) // an answer that never comes fails
	br := bufio.NewReader(tc)
	req := "GET /a HTTP/1.1\r\nHost: gateway.example\r\n\r\n"
	held := func() bool { return parked(e) == 1 && (runtime.GOOS != "linux" || heldIn(e) == 1) }
	for round := range 3 {
		// The first round is sent whole; each after it, right after the
		// answer before it, in two parts: the first ten bytes of the
		// record (its header and the start of what it seals), then, once
		// the connection is parked with them, the rest.
		if round > 0 {
			split.cut = 10
			split.between = func() { waitFor(t, "parked inside a record", held) }
		}
		if _, err := io.WriteString(tc, req); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		answered(t, fmt.Sprintf("round %d", round), res, err, "up /a")
	}
	waitFor(t, "parked", held)
	stop()
}

// TestParkingChurn: connections that keep parking and waking at random
// moments (pauses around the parking interval, some in the middle of a
// request), some of whose clients leave: every request is answered with
// what it asked for. Then Shutdown, with connections parked, idle and
// (having just sent one more request) waking: every connection is
// closed, and none is left in the parker or its idle set.
func TestParkingChurn(t *testing.T) {
	t.Parallel()
	g := echoGateway(t, echoPath, "")
	const every = 5 * time.Millisecond
	e := New(g, Options{ParkIdleAfter: every})
	addr, stop := serveOn(t, e)
	const n = 60
	var churned, ended sync.WaitGroup
	errs := make(chan error, 2*n)
	quit, stopped := make(chan struct{}), make(chan struct{})
	for i := range n {
		c, br := dial(t, addr)
		churned.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			rnd := rand.New(rand.NewPCG(uint64(i), 7))
			req := fmt.Sprintf("GET /%d HTTP/1.1\r\nHost: gateway.example\r\n\r\n", i)
			left := false
			for k := 0; ; k++ {
				select {
				case <-quit:
				default:
					if i%4 == 0 && k == 5+i%7 {
						c.Close() // leaves, parked or not
						left = true
						break
					}
					_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // an answer that never comes fails
					if err := askIn(c, br, req, rnd.IntN(4) == 0, every, rnd); err != nil {
						errs <- fmt.Errorf("connection %d, request %d: %v", i, k, err)
						churned.Done()
						return
					}
					time.Sleep(time.Duration(rnd.IntN(5)) * every)
					continue
				}
				break
			}
			churned.Done()
			if left {
				return
			}
			if i%3 == 0 {
				// One more request, sent as Shutdown comes: the
				// connection wakes (or is served) meanwhile.
				_, _ = io.WriteString(c, req)
			}
			<-stopped
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.Copy(io.Discard, br); errors.Is(err, os.ErrDeadlineExceeded) {
				errs <- fmt.Errorf("connection %d still open after Shutdown", i)
			}
		}()
	}
	time.Sleep(400 * time.Millisecond)
	close(quit)
	churned.Wait()
	stop()
	close(stopped)
	ended.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if runtime.GOOS == "linux" {
		if held := heldIn(e); held != 0 {
			t.Errorf("the idle set holds %d connections after Shutdown", held)
		}
	}
	waitFor(t, "every connection forgotten", func() bool {
		e.parker.mu.Lock()
		defer e.parker.mu.Unlock()
		return len(e.parker.conns) == 0
	})
	if got := e.Parked(); got != 0 {
		t.Errorf("Parked says %d after Shutdown", got)
	}
}

// askIn sends req on c, whole or (split) in two parts with a pause of up
// to three parking intervals between them, and checks its answer: 200 and
// "up" and the request's path.
func askIn(c net.Conn, br *bufio.Reader, req string, split bool, every time.Duration, rnd *rand.Rand) error {
	cut := len(req)
	if split {
		cut = 1 + rnd.IntN(len(req)-1)
	}
	_, err := io.WriteString(c, req[:cut])
	if err == nil && cut < len(req) {
		time.Sleep(time.Duration(rnd.IntN(4)) * every)
		_, err = io.WriteString(c, req[cut:])
	}
	if err != nil {
		return err
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	path := strings.Fields(req)[1]
	if want := "up " + path; res.StatusCode != http.StatusOK || string(body) != want {
		return fmt.Errorf("%d %q, want %q", res.StatusCode, body, want)
	}
	return nil
}
