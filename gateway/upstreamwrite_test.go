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
			pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
			if err != nil {
				t.Fatal(err)
			}
			g, err := New(Options{Matcher: pm, Engine: memEngine(t),
				Upstream: TransportOptions{ResponseHeaderTimeout: 300 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			if err := g.UseRoutes(p.File()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(g.CloseRoutes)
			var addr string
			if front == frontNetHTTP {
				fl, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := &http.Server{Handler: g}
				go func() { _ = srv.Serve(fl) }()
				t.Cleanup(func() { _ = srv.Close() })
				addr = fl.Addr().String()
			} else {
				addr = EdgeFrontTimeouts(t, g, time.Minute)
			}
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
