package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
)

// pipeListener is a net.Listener whose connections are in-memory pipes
// made by its dial method. Unlike a loopback socket it works inside a
// synctest bubble: a goroutine waiting on a pipe is durably blocked, so
// the bubble's fake clock can move on.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial makes a pipe and hands its server end to Accept.
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, errors.New("pipe listener closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// pipeServer serves h with a real http.Server over in-memory pipes and
// returns a real http.Transport that reaches it at any http:// URL (use
// "http://pipe/"). Both are shut down when the test ends. Call it inside
// the synctest bubble that uses it.
func pipeServer(t *testing.T, h http.Handler) *http.Transport {
	t.Helper()
	l := newPipeListener()
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	tr := &http.Transport{DialContext: l.dial}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = srv.Close()
		<-done
	})
	return tr
}
