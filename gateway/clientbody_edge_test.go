package gateway_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/gateway/edge"
)

// The client body tests run on the edge engine with short read timeouts,
// through this hook.
func init() {
	gateway.EdgeFrontTimeouts = func(t testing.TB, g *gateway.Gateway, read time.Duration) string {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		e := edge.New(g, edge.Options{Fallback: &http.Server{Handler: g}, ReadHeaderTimeout: read, ReadTimeout: read})
		done := make(chan error, 1)
		go func() { done <- e.Serve(ln) }()
		t.Cleanup(func() {
			_ = e.Close()
			ln.Close()
			<-done
		})
		return ln.Addr().String()
	}
}
