package app

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// A connection the gateway's net/http server serves must begin its first
// request within server.timeouts.read_header (after its TLS handshake), or
// it is closed. net/http's server bounds an HTTP/1 request's head so, but
// HTTP/2 (h2c, and h2 by ALPN over TLS) has no such bound: from its
// preface to its first stream, a connection that sends nothing, only
// PINGs, or a request's headers in CONTINUATION frames a few bytes at a
// time, was kept until the idle timeout (120s by default), holding a place
// of server.max_connections without a request ever counted
// (TestH2SlowHeadersAreCut). After the first request, a connection without
// a request open is bounded by the idle timeout, as a kept-alive HTTP/1 one
// is.

// firstRequest is a connection's wait for its first request.
type firstRequest struct {
	mu    sync.Mutex
	begun bool // a request began, or the connection was closed
	timer *time.Timer
}

type firstRequestKey struct{}

// waitingFirst holds the waits of the connections open (by connection), so
// that a connection closed before its first request stops its timer at
// once (firstRequestEnds): a flood of connections that close at once
// leaves no timers behind for read_header.
var waitingFirst sync.Map

// firstRequestEnds is a ConnState that stops the wait of a connection
// closed or taken over (then next is called, when not nil).
func firstRequestEnds(next func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(c net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			if v, ok := waitingFirst.LoadAndDelete(c); ok {
				f := v.(*firstRequest)
				f.mu.Lock()
				f.begun = true
				f.timer.Stop()
				f.mu.Unlock()
			}
		}
		if next != nil {
			next(c, st)
		}
	}
}

// boundFirstRequest returns a ConnContext that does what next does and
// closes the connection when no request began on it within d (0: no
// bound) of its accept; a TLS connection is given d once more then, from
// the end of its handshake if that was still under way.
func boundFirstRequest(d time.Duration, next func(context.Context, net.Conn) context.Context) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		if next != nil {
			ctx = next(ctx, c)
		}
		if d <= 0 {
			return ctx
		}
		f := &firstRequest{}
		tc, _ := c.(*tls.Conn)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.timer = time.AfterFunc(d, func() {
			f.mu.Lock()
			handshake := tc
			tc = nil
			f.mu.Unlock()
			if handshake != nil {
				// The first request has d from the handshake's end: wait
				// for one under way (the server bounds it), then give d
				// once more.
				_ = handshake.ConnectionState()
				f.mu.Lock()
				if !f.begun {
					f.timer.Reset(d)
				}
				f.mu.Unlock()
				return
			}
			f.mu.Lock()
			closing := !f.begun
			f.begun = true
			f.mu.Unlock()
			if closing {
				_ = c.Close()
			}
		})
		waitingFirst.Store(c, f)
		return context.WithValue(ctx, firstRequestKey{}, f)
	}
}

// firstRequestBegins wraps h: a request that reaches it ends its
// connection's wait (boundFirstRequest).
func firstRequestBegins(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f, _ := r.Context().Value(firstRequestKey{}).(*firstRequest); f != nil {
			f.mu.Lock()
			if !f.begun {
				f.begun = true
				f.timer.Stop()
			}
			f.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}
