package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// TestUpstreamThatReadsNothingTimesOut: an upstream that accepts the
// connection and reads nothing of a request (a process stopped, or one
// that never reads) fails the request within the upstream timeout, 504,
// whatever the size of its body: a 64 MiB body, which fills the sockets'
// buffers, is not held while the gateway's write waits for ever. Its
// concurrency slot comes back, so the next request is served too.
func TestUpstreamThatReadsNothingTimesOut(t *testing.T) {
	t.Parallel()
	ln := silentUpstream(t)
	if d := NewTransport(TransportOptions{}).ResponseHeaderTimeout; d != 30*time.Second {
		t.Fatalf("the default upstream timeout is %s, want 30s", d)
	}
	p := compilePolicy(t, "readsnothing.yaml", fmt.Sprintf(`version: 1
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: %q
limits:
  - name: one-at-a-time
    algorithm: concurrency
    limit: 1
    key: global
`, "http://"+ln.Addr().String()))
	for _, front := range []string{frontNetHTTP, frontEdge} {
		t.Run(front, func(t *testing.T) {
			addr := serveOn(t, front, p, TransportOptions{ResponseHeaderTimeout: 300 * time.Millisecond})
			c := &http.Client{Timeout: 10 * time.Second}
			post := func(size int64) (*http.Response, string, error) {
				resp, err := c.Post("http://"+addr+"/a", "application/octet-stream", io.LimitReader(zeros{}, size))
				if err != nil {
					return nil, "", err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, strings.TrimSpace(string(b)), nil
			}
			// The client may see its body's write cut (the gateway answers
			// and closes before reading all of it), but never its own
			// timeout.
			resp, body, err := post(64 << 20)
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				t.Fatalf("a 64 MiB body to an upstream that reads nothing: %v", err)
			case err == nil && resp.StatusCode != http.StatusGatewayTimeout:
				t.Errorf("a 64 MiB body: %s %q, want 504", resp.Status, body)
			}
			// Its concurrency slot came back: the next request reaches the
			// upstream and times out as well.
			resp, body, err = post(10)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusGatewayTimeout {
				t.Errorf("the next request: %s %q, want 504", resp.Status, body)
			}
		})
	}
}

// silentUpstream listens on loopback, accepts every connection and never
// reads from it nor writes to it, until the test ends.
func silentUpstream(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln
}

// serveOn serves a gateway of p with upstream options o on front (net/http
// or edge) on loopback until the test ends, and returns its address.
func serveOn(t *testing.T, front string, p *policy.Policy, o TransportOptions) string {
	t.Helper()
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
	if front == frontEdge {
		return EdgeFrontTimeouts(t, g, time.Minute)
	}
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g}
	go func() { _ = srv.Serve(fl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return fl.Addr().String()
}

// TestUpstreamTLSHandshakeBounded: an https upstream that accepts the
// connection and never answers its TLS handshake costs a request 504 at
// the handshake timeout on both engines (net/http's transport bounded it;
// the edge engine waited for ever), and the next request is answered too.
func TestUpstreamTLSHandshakeBounded(t *testing.T) {
	t.Parallel()
	if d := NewTransport(TransportOptions{}).TLSHandshakeTimeout; d != 5*time.Second {
		t.Fatalf("the default handshake timeout is %s, want 5s", d)
	}
	ln := silentUpstream(t)
	p := compilePolicy(t, "handshake.yaml", fmt.Sprintf(`version: 1
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: %q
`, "https://"+ln.Addr().String()))
	for _, front := range []string{frontNetHTTP, frontEdge} {
		t.Run(front, func(t *testing.T) {
			addr := serveOn(t, front, p, TransportOptions{TLSHandshakeTimeout: 300 * time.Millisecond})
			c := &http.Client{Timeout: 10 * time.Second}
			for i := range 2 {
				resp, err := c.Get("http://" + addr + "/a")
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusGatewayTimeout {
					t.Errorf("request %d: %s %q, want 504", i, resp.Status, strings.TrimSpace(string(b)))
				}
			}
		})
	}
}
