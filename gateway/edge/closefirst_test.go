package edge

import (
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
	certs := httptest.NewUnstartedServer(http.NotFoundHandler())
	certs.StartTLS()
	t.Cleanup(certs.Close)
	for _, kind := range []string{"plain", "plain, 2 bytes", "TLS, no handshake", "TLS, half a handshake", "TLS, handshake done"} {
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
			_ = e.Close() // context.Canceled when a request was under way
			// A bound for a loaded machine, not a speed: well short of
			// ReadHeaderTimeout.
			timeout := time.After(20 * time.Second)
			for i := range n {
				select {
				case <-ended:
				case <-timeout:
					t.Fatal(fmt.Sprintf("%d of %d connections still open 20 s after Close", n-i, n))
				}
			}
			if err := <-served; err != nil {
				t.Fatal(err)
			}
		})
	}
}
