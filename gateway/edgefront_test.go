package gateway_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/gateway/edge"
)

// The gateway's tests run on the edge engine too, through this hook.
func init() {
	gateway.EdgeFront = func(t testing.TB, g *gateway.Gateway) string {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		e := edge.New(g, edge.Options{Fallback: &http.Server{Handler: g}})
		done := make(chan error, 1)
		go func() { done <- e.Serve(ln) }()
		t.Cleanup(func() {
			_ = e.Close()
			ln.Close()
			<-done
		})
		return "http://" + ln.Addr().String()
	}
}
