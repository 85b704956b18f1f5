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

// closesAtOnce makes a connection over the limit closed at once, unread
// and unanswered, for a listener whose clients speak HTTP/2 from their
// first byte (gRPC): an HTTP/1 503 means nothing to them, and a GOAWAY
// would have to follow a SETTINGS frame, could be lost when closing with
// the client's preface unread resets the connection, and over TLS would
// need a handshake that a flood must not be able to buy. A gRPC client
// reports the close as the server being unavailable and dials again after
// its backoff. It must be called before Accept.
func (l *connLimit) closesAtOnce() { l.answer = nil }

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
		if l.answer == nil {
			_ = c.Close()
			continue
		}
		shed(c, l.answer)
	}
}

// shedWriteBound bounds the write of the answer to a connection over the
// limit. The answer is smaller than any socket's send buffer and the
// connection is new, so the write does not wait; the bound only keeps a
// socket that would make it wait from holding the accept loop.
const shedWriteBound = 10 * time.Millisecond

// shed answers a connection over the limit and closes it, in the accept
// loop itself: a connection past the limit is closed before the next is
// taken, so that a burst of them holds no descriptor beyond the limit
// however long the process waits for a CPU (answered on goroutines of
// their own, hundreds were open at once on a busy machine).
func shed(c net.Conn, answer []byte) {
	_ = c.SetWriteDeadline(time.Now().Add(shedWriteBound))
	_, _ = c.Write(answer)
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
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

// countedFiles is the open-file limit as the connection caps count it: a
// limit that is unknown (0) or effectively unlimited counts as 1<<20, so
// that every listener still gets a bound.
func countedFiles(limit uint64) int {
	n := int(min(limit, 1<<20))
	if n <= 0 {
		n = 1 << 20
	}
	return n
}

// callerConns is the cap of the listener a process's callers use (the
// gateway's, the rate-limit service's gRPC one) out of files open files:
// half of them, so that the store, the upstreams and the other listeners
// keep the rest.
func callerConns(files int) int { return max(files/2, 64) }

// apiConns is the cap of the check API's listener out of files open
// files: a quarter, as the rate-limit service's gRPC listener gets beside
// the gateway (its callers are services, as Envoy is), so that a flood of
// it leaves the gateway's callers, the store and the upstreams the rest.
func apiConns(files int) int { return max(files/4, 64) }

// sideConns is the cap of a listener for probes, scrapes and operators
// (admin, ops, debug) out of files open files: they need few connections,
// and a client that holds more must not take the descriptors the process
// serves its callers with.
func sideConns(files int) int { return min(max(files/32, 16), 1024) }

// socketWatches bounds the net/http engine's socket watches (each a
// duplicate descriptor held while a request waits or an answer streams)
// out of files open files: a sixteenth, so that a flood of streams does
// not take the descriptors the upstreams and the store need; past it a
// request is watched through its context alone.
func socketWatches(files int) int { return max(files/16, 16) }
