package app

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connLimit is a listener that serves at most max connections at once.
// Past that it answers a new connection at once with 503 and closes it,
// rather than leaving it waiting or running the process out of file
// descriptors, so that the admin listener, the store and the upstreams
// always have descriptors left.
type connLimit struct {
	net.Listener
	max    int64
	answer []byte // what a connection over the limit is told
	open   atomic.Int64
	shed   atomic.Uint64
}

// overloaded is the whole answer to a connection over the limit.
var overloaded = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n" +
	"Retry-After: 1\r\nConnection: close\r\nContent-Length: 33\r\n\r\n{\"message\":\"Service Unavailable\"}")

// tlsOverloaded is the answer over the limit on a TLS listener, whose
// clients would take an HTTP 503 for a broken handshake: a TLS record
// holding a fatal internal_error alert (RFC 8446 §6.2), which a client
// reports as such ("remote error: tls: internal error"). It costs no
// handshake, which a flood of connections must not be able to buy.
var tlsOverloaded = []byte{21, 3, 3, 0, 2, 2, 80}

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{Listener: ln, max: int64(max), answer: overloaded}
}

// speaksTLS makes the answer over the limit a TLS alert, for a listener
// whose connections go on to a TLS handshake. It must be called before
// Accept.
func (l *connLimit) speaksTLS() { l.answer = tlsOverloaded }

// Accept returns the next connection within the limit.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.shed.Add(1)
		go shed(c, l.answer)
	}
}

// shed answers a connection over the limit and closes it; a client that
// does not read within a second is simply closed.
func shed(c net.Conn, answer []byte) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(answer)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = c.Close()
}

// limitedConn gives its place back when it is closed.
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

// PlainConn returns the connection it limits, whose bytes it passes
// unchanged: its socket may be read and written directly (rawconn.Plain).
func (c *limitedConn) PlainConn() net.Conn { return c.Conn }

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}
