package edge

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestCloseEndsConnectionsBeforeTheirFirstRequest: Close closes at once
// the connections whose first bytes the engine still waits for, plain or
// TLS, before, during and after their TLS handshake, as net/http's
// Server.Close closes its new connections: left to ReadHeaderTimeout
// (a minute here), each would hold its descriptor, its place under
// server.max_connections and a goroutine that long after Close returned.
func TestCloseEndsConnectionsBeforeTheirFirstRequest(t *testing.T) {
	t.Parallel()
	kinds := append([]string{"plain, 2 bytes"}, firstKinds...)
	firstRequestNeverComes(t, kinds, func(e *Engine) {
		_ = e.Close() // context.Canceled when a request was under way
	})
}

// TestShutdownEndsConnectionsBeforeTheirFirstRequest: Shutdown closes the
// connections whose first request has not come, plain or TLS, before,
// during and after their TLS handshake, as it closes idle ones: fasthttp
// could serve none of them any more, and before, Shutdown returned with
// them still open, each holding its descriptor, its place under
// server.max_connections and a goroutine until ReadHeaderTimeout (a
// minute here).
func TestShutdownEndsConnectionsBeforeTheirFirstRequest(t *testing.T) {
	t.Parallel()
	firstRequestNeverComes(t, firstKinds, func(e *Engine) {
		if err := e.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

// firstKinds are the connections firstRequestNeverComes opens that send no
// byte of a request.
var firstKinds = []string{"plain", "TLS, no handshake", "TLS, half a handshake", "TLS, handshake done"}

// firstRequestNeverComes opens, for each of kinds, connections to an engine
// whose ReadHeaderTimeout is a minute that send no whole request, stops the
// engine with stop, and checks that each connection is closed well before
// that minute.
func firstRequestNeverComes(t *testing.T, kinds []string, stop func(e *Engine)) {
	certs := httptest.NewUnstartedServer(http.NotFoundHandler())
	certs.StartTLS()
	t.Cleanup(certs.Close)
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := New(echoGateway(t, echoPath, ""), Options{ReadHeaderTimeout: time.Minute})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			if kind == "plain" || kind == "plain, 2 bytes" {
				go func() { served <- e.Serve(ln) }()
			} else {
				go func() {
					served <- e.Serve(tls.NewListener(ln, &tls.Config{Certificates: certs.TLS.Certificates, NextProtos: []string{"http/1.1"}}))
				}()
			}
			const n = 8
			ended := make(chan error, n)
			for range n {
				c, _ := dial(t, ln.Addr().String())
				var r io.Reader = c
				switch kind {
				case "plain, 2 bytes":
					if _, err := io.WriteString(c, "GE"); err != nil {
						t.Fatal(err)
					}
				case "TLS, half a handshake":
					// A ClientHello's first bytes: a handshake record's head.
					if _, err := c.Write([]byte{22, 3, 1, 0, 200}); err != nil {
						t.Fatal(err)
					}
				case "TLS, handshake done":
					tc := tls.Client(c, &tls.Config{RootCAs: certs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs,
						ServerName: "example.com", NextProtos: []string{"http/1.1"}})
					if err := tc.Handshake(); err != nil {
						t.Fatal(err)
					}
					r = tc
				}
				go func() {
					_, err := io.Copy(io.Discard, r)
					ended <- err
				}()
			}
			// Let the engine take them all in.
			time.Sleep(200 * time.Millisecond)
			stop(e)
			// A bound for a loaded machine, not a speed: well short of
			// ReadHeaderTimeout.
			timeout := time.After(20 * time.Second)
			for i := range n {
				select {
				case <-ended:
				case <-timeout:
					t.Fatal(fmt.Sprintf("%d of %d connections still open 20 s after the engine stopped", n-i, n))
				}
			}
			if err := <-served; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestShutdownEndsConnectionsBeforeTheirFirstRequestAtOnce: Shutdown
// closes a connection whose first request has not come as it begins, not
// once the requests in flight have finished: beside an answer that streams
// until its client leaves, such a connection is closed well before
// Shutdown's minute (and ReadHeaderTimeout's) has passed.
func TestShutdownEndsConnectionsBeforeTheirFirstRequestAtOnce(t *testing.T) {
	t.Parallel()
	g := echoGateway(t, func(w io.Writer, r *http.Request) {
		w.(http.ResponseWriter).Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: tick\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}, "")
	e := New(g, Options{ReadHeaderTimeout: time.Minute})
	addr, stop := serveOn(t, e)
	streaming, br := dial(t, addr)
	if _, err := io.WriteString(streaming, "GET /events HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("no answer: %v", err)
	}
	idle, _ := dial(t, addr)
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, idle)
		ended <- err
	}()
	time.Sleep(200 * time.Millisecond) // the engine takes it in
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shut <- e.Shutdown(ctx)
	}()
	select {
	case <-ended:
	case <-time.After(20 * time.Second): // a bound for a loaded machine
		t.Error("a connection that sent nothing was still open 20 s into Shutdown")
	}
	streaming.Close() // the stream's request ends, and with it Shutdown
	if err := <-shut; err != nil {
		t.Error(err)
	}
	stop()
}
