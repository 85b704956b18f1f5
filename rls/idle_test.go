package rls

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/connectivity"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestServerClosesIdleConnections: a connection that has had no call in
// flight for MaxConnectionIdle is closed with a GOAWAY (gRPC keeps one
// forever by default: a client that opens connections and never calls
// held places of the listener's cap for good), while a connection whose
// call has been in flight longer than that keeps serving.
func TestServerClosesIdleConnections(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng := &slowEngine{Engine: limiter.New(st, limiter.Options{}), entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv, err := NewServer(New(eng, mustParse(t, basic), Options{}), ServerOptions{MaxConnectionIdle: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr, cancel, served := start(t, srv)
	busy := dial(t, addr)
	defer busy.Close()
	answered := make(chan error, 1)
	go func() {
		ctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		_, err := rlsv3.NewRateLimitServiceClient(busy).ShouldRateLimit(ctx,
			&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "busy")}})
		answered <- err
	}()
	<-eng.entered // the busy connection's call is in flight

	// A connection that never calls: after its HTTP/2 preface, nothing
	// but the answers to the server's SETTINGS and PINGs.
	// A bound for failing only: the GOAWAY is due after 100 ms.
	c, fr := rawH2(t, addr, 10*time.Second)
	for goaway := false; !goaway; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the idle connection got no GOAWAY: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			goaway = true
		}
	}
	// The busy connection, older than the idle one, was not closed: a
	// GOAWAY would have taken its client out of READY.
	if s := busy.GetState(); s != connectivity.Ready {
		t.Errorf("the connection with a call in flight is %v; want READY", s)
	}
	close(eng.release)
	if err := <-answered; err != nil {
		t.Errorf("the call in flight: %v", err)
	}
	c.Close()
	busy.Close()
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestServerClosesSilentConnections: a connection that sends nothing, not
// even its HTTP/2 preface, is closed after HandshakeTimeout (gRPC's own
// default is two minutes, for which it held a place of the listener's cap
// and held up a stop).
func TestServerClosesSilentConnections(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := NewServer(New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{}), ServerOptions{HandshakeTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr, cancel, served := start(t, srv)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A bound for failing only: the close is due after 100 ms.
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil { // the server's SETTINGS, then its close
		t.Errorf("the silent connection was not closed: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
