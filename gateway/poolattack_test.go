package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/upstreamtest"
)

// poolGateway is a gateway of the policy file src, its pools made, its
// upstream connections tuned by o.
func poolGateway(t *testing.T, src string, o TransportOptions) *Gateway {
	t.Helper()
	p := compilePolicy(t, "poolattack.yaml", src)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Matcher: pm, Engine: memEngine(t), Upstream: o})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.UseRoutes(p.File()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.CloseRoutes)
	return g
}

// TestPoolSlowRequestSentOnce: a client that asks a pool's targets for
// something they are slow on (a GET they do not answer within the
// upstream timeout) gets its 504 by that timeout, and its request reaches
// the upstream once. Sent again to each target in turn, one admitted,
// once-charged request would be as many upstream requests as the pool
// has targets (up to 64), each running the slow path to the timeout, its
// client waiting the timeout once per target; and each attempt would be a
// failure of its target, so that three such requests, from one client,
// take every target of the pool out at once.
func TestPoolSlowRequestSentOnce(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		var slow atomic.Int64
		done := make(chan struct{})
		answer := func(c net.Conn, req *http.Request) bool {
			if req.URL.Path == "/slow" {
				slow.Add(1)
				select {
				case <-time.After(4 * timeout):
				case <-done:
				}
				return false
			}
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return err == nil
		}
		a, b, c := upstreamtest.Raw(t, answer), upstreamtest.Raw(t, answer), upstreamtest.Raw(t, answer)
		t.Cleanup(func() { close(done) })
		g := poolGateway(t, fmt.Sprintf(`version: 1
routes:
  - name: api
    match: {paths: ["/**"]}
    upstreams: ["http://%s", "http://%s", "http://%s"]
    health: {failures: 3, eject: 1h}
limits:
  - {name: wide, rate: 100000000, burst: 1000000000000, key: global}
`, a, b, c), TransportOptions{ResponseHeaderTimeout: timeout})
		base := serveFront(t, fr, g, nil)
		cl := newClient(t)

		// Once sent, once waited for: its 504 comes after one upstream
		// timeout, not one per target (what it takes is not asserted: a
		// loaded machine stretches it; the upstream's count says it).
		start := time.Now()
		an := do(t, cl, "GET", base+"/slow", nil)
		took := time.Since(start)
		if an.status != http.StatusGatewayTimeout {
			t.Errorf("GET /slow: %d after %v; want 504 by the upstream timeout, %v", an.status, took, timeout)
		}
		if n := slow.Load(); n != 1 {
			t.Errorf("one GET /slow reached the upstream %d times (its 504 after %v, the upstream timeout %v)", n, took, timeout)
		}

		// Three more at once, from the same client.
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				do(t, cl, "GET", base+"/slow", nil)
			}()
		}
		wg.Wait()
		out := 0
		for _, st := range g.Targets() {
			if !st.Healthy {
				out++
			}
		}
		if out == 3 {
			t.Errorf("four slow GETs of one client took all 3 targets out (the upstream saw %d requests)", slow.Load())
		}
		if an := do(t, cl, "GET", base+"/ok", nil); an.status != 200 {
			t.Errorf("GET /ok: %d", an.status)
		}
	})
}

// TestUpstreamConnectionWaitBounded: with server.upstream.max_conns_per_host
// reached (a client holding the only connection with an answer that
// streams), a request waiting for a connection is answered 504 by the
// upstream timeout on both engines, as the edge engine's wait for a free
// connection is bounded: it never waits for as long as another client
// chooses to hold the upstream.
func TestUpstreamConnectionWaitBounded(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		done := make(chan struct{})
		addr := upstreamtest.Raw(t, func(c net.Conn, req *http.Request) bool {
			if req.URL.Path == "/hold" {
				// A stream that goes on for as long as the test.
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata:\n\r\n"); err != nil {
					return false
				}
				select {
				case <-time.After(20 * time.Second):
				case <-done:
				}
				return false
			}
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return err == nil
		})
		t.Cleanup(func() { close(done) })
		g := gatewayWith(t, "http://"+addr, TransportOptions{ResponseHeaderTimeout: timeout, MaxConnsPerHost: 1})
		base := serveFront(t, fr, g, nil)

		// The holder: a raw client that reads the stream's head and stays.
		hc, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer hc.Close()
		_ = hc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(hc, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(hc), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("the stream: %v %v", resp, err)
		}

		cl := newClient(t)
		cl.Timeout = 10 * timeout
		start := time.Now()
		resp2, err := cl.Get(base + "/ok")
		took := time.Since(start)
		if err != nil {
			t.Fatalf("GET /ok waiting for the upstream's only connection: no answer after %v (%v); want 504 by the upstream timeout, %v", took, err, timeout)
		}
		resp2.Body.Close()
		if resp2.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("GET /ok: %d after %v; want 504 by the upstream timeout, %v", resp2.StatusCode, took, timeout)
		}
	})
}
