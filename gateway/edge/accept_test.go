package edge

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// starvedListener fails its accepts as a process out of descriptors does
// (EMFILE) while starve is above zero, then accepts as its listener.
type starvedListener struct {
	net.Listener
	starve atomic.Int64
}

func (l *starvedListener) Accept() (net.Conn, error) {
	if l.starve.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptOutOfDescriptorsGoesOn: accepts that fail because the process
// is out of descriptors (other connections, held open by a client, took
// them) do not end the engine: it serves the next connection once one can
// be accepted. It ended serving, and with it the process.
func TestAcceptOutOfDescriptorsGoesOn(t *testing.T) {
	t.Parallel()
	g := policyGateway(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: roomy, rate: 1000000, burst: 1000000, key: global, scope: global}
`)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &starvedListener{Listener: inner}
	ln.starve.Store(5)
	e := New(g, Options{})
	done := make(chan error, 1)
	go func() { done <- e.Serve(ln) }()
	c := &http.Client{Timeout: 30 * time.Second}
	res, err := c.Get("http://" + inner.Addr().String() + "/x")
	if err != nil {
		t.Fatalf("after five accepts out of descriptors: %v (Serve: %v)", err, serveErr(done))
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if ln.starve.Load() >= 0 {
		t.Errorf("the failing accepts were not all made (%d left)", ln.starve.Load())
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// serveErr is what Serve returned, if it has.
func serveErr(done <-chan error) error {
	select {
	case err := <-done:
		return err
	default:
		return nil
	}
}
