package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/internal/upstreamtest"
)

// TestUnsolicitedUpstreamBytesAnswerNobody: bytes an upstream sends on a
// kept-alive connection that no request asked for (a second response: an
// upstream that read a request's body as a request of its own, a buggy
// one) answer no later request, on each engine. Read as the answer to the
// next request sent on that connection, they would give it a response that
// was never its own, and each request after it the response of the one
// before: one client's answers served to another.
func TestUnsolicitedUpstreamBytesAnswerNobody(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		name := "with the answer"
		if late {
			name = "after the answer"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			forFronts(t, proxyFronts, func(t *testing.T, fr string) { testUnsolicitedUpstreamBytes(t, fr, late) })
		})
	}
}

// TestUnsolicitedUpstreamBytesUnderLoad: the same upstream, sending a
// second response with each answer, behind each engine, with eight clients
// at once: every client gets the answer to its own request. A request
// taking a kept connection just as the answer before it was read is where
// the bytes would slip through (net/http's transport looks for them only
// once it has put the connection back in its idle pool).
func TestUnsolicitedUpstreamBytesUnderLoad(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		g, _ := unsolicitedGateway(t, false)
		base := serveFront(t, fr, g, nil)
		var wg sync.WaitGroup
		var wrong atomic.Int64
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := newClient(t)
				for i := range 100 {
					path := fmt.Sprintf("/w%d/req%d", w, i)
					a := do(t, c, "GET", base+path, nil)
					if want := "the answer to " + path + "\n"; a.body != want || a.status != 200 {
						if wrong.Add(1) <= 3 {
							t.Errorf("%s was answered %d %q", path, a.status, a.body)
						}
					}
				}
			}()
		}
		wg.Wait()
		if n := wrong.Load(); n > 0 {
			t.Errorf("%d of 800 requests got an answer not theirs", n)
		}
	})
}

func testUnsolicitedUpstreamBytes(t *testing.T, fr string, late bool) {
	g, written := unsolicitedGateway(t, late)
	base := serveFront(t, fr, g, nil)
	c := newClient(t)
	for i := range 6 {
		path := fmt.Sprintf("/req%d", i)
		a := do(t, c, "GET", base+path, nil)
		if want := "the answer to " + path + "\n"; a.body != want || a.status != 200 {
			t.Errorf("%s was answered %d %q", path, a.status, a.body)
		}
		if late {
			// The unasked bytes are there before the next request (a
			// connection the gateway closed may not take them).
			select {
			case <-written:
			case <-time.After(5 * time.Second):
			}
		}
	}
}

// unsolicitedGateway is a gateway in front of an upstream that sends a
// second response no request asked for after each answer: with it, or 20
// ms later (late), then told on written.
func unsolicitedGateway(t *testing.T, late bool) (*Gateway, <-chan struct{}) {
	t.Helper()
	written := make(chan struct{}, 64)
	extra := []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 16\r\nContent-Type: text/plain\r\n\r\nnobody's answer\n")
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
		body := "the answer to " + req.URL.Path + "\n"
		answer := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s", len(body), body))
		if !late {
			answer = append(answer, extra...)
		}
		if _, err := c.Write(answer); err != nil {
			return false
		}
		if late {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-done:
				return false
			}
			if _, err := c.Write(extra); err != nil {
				return false
			}
			upstreamtest.Delivered(c, 5*time.Second)
			select {
			case written <- struct{}{}:
			default:
			}
		}
		return true
	})
	return gatewayTo(t, "http://"+addr), written
}

// TestUpstreamClosedKeptConnections: an upstream that closes its idle
// connections (a restart, its own idle timeout) ends every connection the
// gateway keeps to it; the next requests go over new ones, on each
// engine, however many were kept. Each ended connection is closed as it
// is found, none counts as unasked bytes, and none is a 502.
func TestUpstreamClosedKeptConnections(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		const kept = 40
		var inFlight sync.WaitGroup
		inFlight.Add(kept)
		release := make(chan struct{})
		var first atomic.Int64
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if first.Add(1) <= kept {
				inFlight.Done()
				<-release // the first kept requests wait together: kept connections
			}
			_, _ = io.WriteString(w, "ok "+r.URL.Path)
		}))
		t.Cleanup(up.Close)
		go func() { inFlight.Wait(); close(release) }()
		base := serveFront(t, fr, gatewayTo(t, up.URL), nil)

		var wg sync.WaitGroup
		for i := range kept {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := do(t, newClient(t), "GET", fmt.Sprintf("%s/warm%d", base, i), nil)
				if a.status != 200 {
					t.Errorf("warm-up %d: %d %q", i, a.status, a.body)
				}
			}()
		}
		wg.Wait()
		up.Config.SetKeepAlivesEnabled(false) // closes its idle connections
		time.Sleep(100 * time.Millisecond)    // their ends reach the gateway
		c := newClient(t)
		for i := range 5 {
			path := fmt.Sprintf("/after%d", i)
			if a := do(t, c, "GET", base+path, nil); a.status != 200 || a.body != "ok "+path {
				t.Errorf("%s after the upstream closed %d kept connections: %d %q", path, kept, a.status, a.body)
			}
		}
	})
}

// gatewayTo is a gateway whose every request goes to upstream under a
// limit that never binds.
func gatewayTo(t *testing.T, upstream string) *Gateway {
	t.Helper()
	return gatewayWith(t, upstream, TransportOptions{})
}

// gatewayWith is gatewayTo with the upstream connections tuned by o.
func gatewayWith(t *testing.T, upstream string, o TransportOptions) *Gateway {
	t.Helper()
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100000, Window: time.Hour})
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Matcher: MatcherFunc(withUpstream{oneRule(rule), u}.Match), Engine: memEngine(t), Upstream: o})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestUpstreamLeftAfterTheRequest: an upstream that reads a request on a
// kept connection and closes it without an answer may have acted on it,
// so the request is sent again (on another connection) only when its
// method is idempotent: a POST without a body reaches the upstream once
// and its client gets a 502, on each engine; a GET is sent again and
// answered.
func TestUpstreamLeftAfterTheRequest(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		var mu sync.Mutex
		seen := map[string]int{}
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			key := req.Method + " " + req.URL.Path
			mu.Lock()
			seen[key]++
			n := seen[key]
			mu.Unlock()
			if strings.HasPrefix(req.URL.Path, "/drop") && n == 1 {
				return false // read, maybe acted on, never answered
			}
			body := "done " + key
			_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			return err == nil
		})
		base := serveFront(t, fr, gatewayTo(t, "http://"+addr), nil)
		c := newClient(t)
		// A POST with no Content-Length at all (no body: RFC 9112 6.3).
		if a := do(t, c, "GET", base+"/ok", nil); a.status != 200 {
			t.Fatalf("GET /ok: %d %q", a.status, a.body)
		}
		status := rawStatus(t, base, "POST /dropBARE HTTP/1.1\r\nHost: x\r\n\r\n")
		mu.Lock()
		n := seen["POST /dropBARE"]
		mu.Unlock()
		if n != 1 || status != 502 {
			t.Errorf("a POST without Content-Length whose upstream left: sent %d times, answered %d; want once, 502", n, status)
		}
		for _, m := range []string{"POST", "GET"} {
			if a := do(t, c, "GET", base+"/ok", nil); a.status != 200 {
				t.Fatalf("GET /ok: %d %q", a.status, a.body) // the connection the next request takes
			}
			a := do(t, c, m, base+"/drop"+m, nil)
			mu.Lock()
			n := seen[m+" /drop"+m]
			mu.Unlock()
			switch m {
			case "POST":
				if n != 1 || a.status != 502 {
					t.Errorf("a POST without a body whose upstream left: sent %d times, answered %d %q; want once, 502", n, a.status, a.body)
				}
			case "GET":
				if n != 2 || a.status != 200 {
					t.Errorf("a GET whose upstream left: sent %d times, answered %d %q; want twice, 200", n, a.status, a.body)
				}
			}
		}
	})
}

// TestUpstreamTimeout: an upstream that does not answer within the
// upstream timeout costs its client a 504 by that timeout, on each
// engine: on a new connection, on a kept one (whose request the edge
// engine sends from the read that waits for the answer), and when the
// answer's head comes a byte at a time and is still not whole at the
// timeout. The edge engine keeps a kept connection's deadline while more
// than half of the timeout is left (readDeadline), so the wait is at least
// half the timeout. The next request is answered by an upstream that
// answers.
func TestUpstreamTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			switch req.URL.Path {
			case "/silent":
				time.Sleep(3 * timeout)
				return false
			case "/trickle":
				for _, b := range []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") {
					if _, err := c.Write([]byte{b}); err != nil {
						return false
					}
					time.Sleep(timeout / 10)
				}
				return false
			}
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return err == nil
		})
		base := serveFront(t, fr, gatewayWith(t, "http://"+addr, TransportOptions{ResponseHeaderTimeout: timeout}), nil)
		c := newClient(t)
		for _, path := range []string{"/silent", "/ok", "/silent", "/ok", "/trickle", "/ok"} {
			start := time.Now()
			a := do(t, c, "GET", base+path, nil)
			took := time.Since(start)
			want := 200
			if path != "/ok" {
				want = 504
			}
			if a.status != want {
				t.Errorf("%s: %d %q after %v; want %d", path, a.status, a.body, took, want)
			}
			if want == 504 && (took < timeout/2 || took > 2*timeout+time.Second) {
				t.Errorf("%s: answered after %v; want the timeout, %v (at least half of it)", path, took, timeout)
			}
		}
	})
}

// TestUnsolicitedBytesJustBeforeTheNextRequest: an upstream sends a second
// response after its answer, and the next request comes right after those
// bytes reached the gateway, before the transport's reader of the kept
// connection has woken to read them (on a loaded machine, that reader may
// take milliseconds to run). They never answer it. Before, the net/http
// engine's check of a kept connection took a reader parked in the
// netpoller for one with nothing to read, and the second response
// answered the next request (as CI once found, 60 ms after the bytes
// came).
func TestUnsolicitedBytesJustBeforeTheNextRequest(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		extra := []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 16\r\nContent-Type: text/plain\r\n\r\nnobody's answer\n")
		sent := make(chan struct{}, 1)
		release := make(chan struct{}, 1)
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			body := "the answer to " + req.URL.Path + "\n"
			if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s", len(body), body); err != nil {
				return false
			}
			select {
			case <-release: // the client has its answer
			case <-time.After(10 * time.Second):
				return false
			}
			if _, err := c.Write(extra); err != nil {
				return false
			}
			// Written is not there yet: on a loaded machine the kernel
			// can hand the bytes to the gateway's socket milliseconds
			// later, and bytes that come after the next request was
			// sent are its answer for any proxy.
			upstreamtest.Delivered(c, 5*time.Second)
			sent <- struct{}{}
			return true
		})
		base := serveFront(t, fr, gatewayTo(t, "http://"+addr), nil)
		c := newClient(t)
		wrong := 0
		for i := range 200 {
			path := fmt.Sprintf("/req%d", i)
			a := do(t, c, "GET", base+path, nil)
			if want := "the answer to " + path + "\n"; a.body != want || a.status != 200 {
				if wrong++; wrong <= 3 {
					t.Errorf("%s was answered %d %q", path, a.status, a.body)
				}
			}
			release <- struct{}{}
			select {
			case <-sent: // the unasked bytes are in the gateway's socket: the next request goes now
			case <-time.After(10 * time.Second):
				// The connection was closed (the bytes were seen): the
				// upstream serves the next one on a new one.
			}
		}
		if wrong > 0 {
			t.Errorf("%d of 200 requests got an answer not theirs", wrong)
		}
	})
}
