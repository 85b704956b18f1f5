package gateway_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/gateway/edge"
)

// The gateway's tests run on the edge engine too, through these hooks:
// with the engine's default timeouts, and with short read timeouts for the
// tests of a client's body.
func init() {
	gateway.EdgeFront = func(t testing.TB, g *gateway.Gateway) string {
		return "http://" + serveEdge(t, g, edge.Options{})
	}
	gateway.EdgeFrontTimeouts = func(t testing.TB, g *gateway.Gateway, read time.Duration) string {
		return serveEdge(t, g, edge.Options{ReadHeaderTimeout: read, ReadTimeout: read})
	}
	gateway.EdgeFrontAs = func(t testing.TB, g *gateway.Gateway, front *http.Server) string {
		return serveEdgeAs(t, g, front)
	}
}

// serveEdgeAs serves g on the edge engine as floodgate serve does on
// engine fast: its bounds and timeouts those of front, the net/http
// server it hands what it cannot serve to.
func serveEdgeAs(t testing.TB, g *gateway.Gateway, front *http.Server) string {
	return serveEdge(t, g, edge.Options{
		ReadHeaderTimeout: front.ReadHeaderTimeout,
		ReadTimeout:       front.ReadTimeout,
		WriteTimeout:      front.WriteTimeout,
		IdleTimeout:       front.IdleTimeout,
		MaxHeaderBytes:    front.MaxHeaderBytes,
		Fallback:          front,
	})
}

// serveEdge serves g on the edge engine with o (net/http as its fallback)
// on loopback until the test ends, and returns its address.
func serveEdge(t testing.TB, g *gateway.Gateway, o edge.Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.Fallback == nil {
		o.Fallback = &http.Server{Handler: g}
	}
	e := edge.New(g, o)
	done := make(chan error, 1)
	go func() { done <- e.Serve(ln) }()
	t.Cleanup(func() {
		_ = e.Close()
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}
