package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http/httptrace"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// upstreamConn is a connection the net/http engine's transport (NewTransport)
// dialed to an upstream: read and written with raw system calls (rawconn),
// and watched, so that a kept connection holding bytes no request asked
// for carries no other request (checkKept).
type upstreamConn struct {
	*rawconn.Conn
	closed atomic.Bool
}

// dialUpstream dials as d does and watches the connection.
func dialUpstream(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &upstreamConn{Conn: rawconn.Wrap(c)}, nil
	}
}

func (c *upstreamConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// keptWaitLimit bounds how long a request waits for the transport's reader
// of a kept connection to settle (checkKept); past it the connection is
// closed instead, and the request goes on another. The reader settles in
// microseconds once it runs; the bound is for a machine so loaded that it
// does not run, where closing a good connection would cost a request
// with a body a 502.
const keptWaitLimit = time.Second

// withKeptCheck returns ctx with a trace that checks each kept HTTP/1
// connection the transport hands the request (checkKept). The trace is
// the request's own: httptrace composes it with any trace ctx has.
func withKeptCheck(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: gotConn})
}

func gotConn(info httptrace.GotConnInfo) {
	if info.Reused {
		checkKept(info.Conn, keptWaitLimit)
	}
}

// checkKept makes sure that c, a kept HTTP/1 connection the transport is
// about to send a request on, holds no bytes that no request asked for
// (an upstream's second response, sent with an answer). The transport's
// reader of the connection looks for such bytes itself once the answer
// before was read, and closes the connection when it finds some; but a
// request can take the connection from the idle pool before the reader
// has looked, and then those bytes answer it. So the request waits until
// the reader waits on an empty socket (it holds nothing, nothing is
// unread) or has closed the connection (the transport then sends the
// request on another); after limit, it closes the connection itself. A
// reader waiting may be parked on bytes that came since it looked, and
// not yet have run: the socket is then looked at too (one MSG_PEEK), and
// a connection holding bytes, or its end, is closed.
func checkKept(c net.Conn, limit time.Duration) {
	if tc, ok := c.(*tls.Conn); ok {
		if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
			return // HTTP/2: framed, and read all the time
		}
		c = tc.NetConn()
	}
	uc, ok := c.(*upstreamConn)
	if !ok || uc.Raw() == nil {
		return // not watched
	}
	var start time.Time
	for i := 0; !uc.Raw().Waiting() && !uc.closed.Load(); i++ {
		switch {
		case i < 64:
			runtime.Gosched()
		case start.IsZero():
			start = time.Now()
		case time.Since(start) > limit:
			_ = uc.Close()
			return
		default:
			time.Sleep(20 * time.Microsecond)
		}
	}
	// A reader waiting may be parked on bytes that came since it found
	// the socket empty and not yet have run to read them (for
	// milliseconds on a loaded machine): the socket itself is looked at.
	if !uc.closed.Load() && uc.Raw().Look() != rawconn.Nothing {
		_ = uc.Close()
	}
}
