package gateway

import (
	"context"
	"crypto/tls"
	"errors"
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
	// looking is set while checkKept looks at the idle socket, and stays
	// set when it closes the connection: bytes a read takes meanwhile
	// answer no request (Read).
	looking atomic.Bool
	// look looks at the socket for checkKept: nil for the socket's own
	// Look (a test puts its reader's turn before that).
	look func() rawconn.Leftover
	// writeBound bounds each write's wait for the upstream to take its
	// bytes (0: none); writeDeadline is the write deadline set, in Unix
	// nanoseconds (0: none).
	writeBound    time.Duration
	writeDeadline atomic.Int64
}

// errUnasked is the read's error when the bytes it took came while
// checkKept looked at a kept connection no request was sent on.
var errUnasked = errors.New("gateway: the upstream sent bytes no request asked for on a kept connection")

// dialUpstream dials as d does and watches the connection; each write on
// it fails when the upstream takes none of it for writeBound (0: no
// bound).
func dialUpstream(d *net.Dialer, writeBound time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &upstreamConn{Conn: rawconn.Wrap(c), writeBound: writeBound}, nil
	}
}

// SetDeadline sets the connection's deadlines, and keeps the write
// deadline for Write.
func (c *upstreamConn) SetDeadline(t time.Time) error {
	c.keepWriteDeadline(t)
	return c.Conn.SetDeadline(t)
}

// SetWriteDeadline sets the write deadline, and keeps it for Write.
func (c *upstreamConn) SetWriteDeadline(t time.Time) error {
	c.keepWriteDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *upstreamConn) keepWriteDeadline(t time.Time) {
	if t.IsZero() {
		c.writeDeadline.Store(0)
	} else {
		c.writeDeadline.Store(t.UnixNano())
	}
}

// Write writes b, within the connection's write bound: net/http's
// transport bounds the wait for an answer only once the request is
// written, so an upstream that reads nothing of a request's body (a
// process stopped, or one that never reads) would otherwise hold the
// request, its client and its concurrency slot for ever. The deadline is
// moved only when less than half the bound is left, so each write may
// wait between half the bound and the bound.
func (c *upstreamConn) Write(b []byte) (int, error) {
	if c.writeBound > 0 {
		now := time.Now()
		if d := c.writeDeadline.Load(); d == 0 || time.Duration(d-now.UnixNano()) <= c.writeBound/2 {
			t := now.Add(c.writeBound)
			c.writeDeadline.Store(t.UnixNano())
			if err := c.Conn.SetWriteDeadline(t); err != nil {
				return 0, err
			}
		}
	}
	return c.Conn.Write(b)
}

func (c *upstreamConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// Read reads as the connection does, except that bytes it took while
// checkKept looked at the connection, or after checkKept closed it, are
// nobody's answer: the read fails with errUnasked. (The transport's
// reader may have woken on them just before checkKept closed the
// connection for holding them, and a request sent meanwhile would take
// them for its answer.)
func (c *upstreamConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.looking.Load() {
		return 0, errUnasked
	}
	return n, err
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
// request on another); after limit, it closes the connection itself.
//
// A reader waiting may be parked on bytes that came since it looked, and
// not yet have run: the socket is then looked at too (one MSG_PEEK), and
// a connection holding bytes, or its end, is closed. A socket found empty
// may be empty because the reader ran between the two looks and took the
// bytes: the reader must still be waiting after the look (it stops
// waiting before it reads), or the wait for it begins again. A reader
// that wakes while the socket is looked at, or just before it is closed,
// may take the bytes after all: its read fails (upstreamConn.Read), so
// they answer no request sent after the check.
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
	look := uc.look
	if look == nil {
		look = uc.Raw().Look
	}
	var start time.Time
	for i := 0; ; i++ {
		if uc.closed.Load() {
			return
		}
		if uc.Raw().Waiting() {
			uc.looking.Store(true)
			if look() != rawconn.Nothing {
				_ = uc.Close() // looking stays set: what the reader takes now is refused
				return
			}
			settled := uc.Raw().Waiting()
			uc.looking.Store(false)
			if settled {
				return // parked on an empty socket, and nothing taken since
			}
		}
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
}
