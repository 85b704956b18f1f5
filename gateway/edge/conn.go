package edge

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// h2Preface starts every HTTP/2 connection with prior knowledge (h2c).
const h2Preface = "PRI * HTTP/2.0\r\n"

// conn is a client connection of the edge engine: the bytes read ahead
// of the engine (to tell HTTP/2 from HTTP/1, or while watching for the
// client to leave) are returned first.
type conn struct {
	net.Conn
	pre []byte
	// head is a small buffer for the first bytes of a request (headBuf);
	// a connection parked in the idle set gives it back.
	head *[sniffBytes]byte

	// A request's read deadline moves up to three times (the head's
	// bound, the body's, then the idle one), each costing timer work in
	// the runtime. The deadline asked for is noted (want); the
	// connection's own (set) is moved only to bring it earlier, and a
	// read cut by it before want is retried with set moved to want: a
	// busy connection moves its real deadline about once per
	// read_header, not three times a request.
	want, set time.Time
	// headNext says fasthttp's idle deadline was taken: the deadline it
	// sets next, none, once the next request's first byte came, is where
	// that request's head starts, bounded here rather than by fasthttp's
	// ReadTimeout, which would read the clock for it. headRead says the
	// head has begun and has no bound yet: the first read of it from the
	// connection sets read_header from then. A head that came whole
	// with its first byte (most do) is parsed without a read, and costs
	// no clock read; one that did not is read under its bound from
	// within microseconds of its first byte.
	headNext, headRead bool

	// The address of the other end, and its text for an IPv4 one (the
	// key it is counted under), worked out on the first request.
	addr     netip.Addr
	addrText string
	addrSet  bool

	// tls says the connection came through TLS (X-Forwarded-Proto: https).
	tls bool

	// eng is the engine that accepted the connection, which holds it
	// among its live ones until it closes or is handed over to net/http
	// (Engine.track).
	eng *Engine
	// first says the engine waits for the connection's first request (or
	// its TLS handshake), before fasthttp or net/http has it: Shutdown
	// closes it then (Engine.closeFirst).
	first atomic.Bool

	// Parking (park.go). p is the engine's parker (nil: never parked),
	// noPark says the connection was handed over (never parked).
	// ended says the handler returned: the next read deadline fasthttp
	// sets is its idle one, and idleRead that the next read is the wait
	// for the next request. idle is the state of that wait; parkMu orders
	// the parker's cut of the wait with the wait's own deadline moves.
	// parkNext says fasthttp let the connection go to be parked (its
	// Close parks it), parkedOut that it is parked.
	p         *parker
	noPark    bool
	ended     bool
	idleRead  bool
	idle      atomic.Int64
	parkMu    sync.Mutex
	parkNext  atomic.Bool
	parkedOut atomic.Bool

	// While the parker's idle set holds the connection (idle_linux.go):
	// its descriptor, the hold's number and the end of its idle time (Unix
	// nanoseconds, 0 for none). Guarded by the set's lock.
	parkFD    int32
	parkSeq   uint32
	parkUntil int64

	// A request that asks for 100 Continue is decided before its body
	// (Engine.expect): expecting says its decision is being made, resume
	// holds it once admitted until the handler forwards it, or until the
	// connection closes without the handler (its body never came).
	expecting bool
	resume    atomic.Pointer[exchange]

	// untilClose holds the body of an answer the engine writes itself once
	// fasthttp hands the connection over (Engine.untilClose), until it
	// does: a connection fasthttp closes instead (a failed flush of an
	// answer before it) ends that body's request.
	untilClose atomic.Pointer[body]

	// Each write to the client waits at most send (the gateway's
	// SendTimeout, nanoseconds; 0: no bound) for the client to take it:
	// one that keeps its connection and reads nothing is cut, and its
	// request ends as for a client that left. The write deadline is moved
	// to send from now only when less than half of it is left, when the
	// handler has an answer to write and when a part of a streamed answer
	// came from the upstream (never before a wait for the upstream), so a
	// write may wait between about half of send and send; a busy
	// connection moves it about once per send/2. Where send is long
	// beside the parker's sweeps, the time is the parker's (at most a
	// sweep behind, read for free) while they run, else (and once they
	// stopped, at Shutdown) the monotonic clock's. wBy is
	// when the deadline set last passes (monoNow), wSet the deadline in
	// force, wAsked the one fasthttp asked for (server.timeouts.write),
	// which is never passed.
	send   int64
	wBy    int64
	wSet   time.Time
	wAsked time.Time
	// wEnd is, with server.timeouts.write, when the answer to the request
	// being served must be written by: the write timeout from the
	// handler's start (the end of the request's headers), as net/http
	// counts it. fasthttp asks for its write deadline only once the
	// handler returned, after any wait in a queue or for the upstream;
	// SetWriteDeadline never lets that pass wEnd.
	wEnd time.Time
}

// monoBase and monoNow read the monotonic clock alone, cheaper than a
// time.Time: a request's write bound is checked with it.
var monoBase = time.Now()

func monoNow() int64 { return int64(time.Since(monoBase)) + 1 }

// boundWrite moves the write deadline to send from now when less than
// half of the bound is left, never past the deadline fasthttp asked for.
func (c *conn) boundWrite() {
	if c.send == 0 {
		return
	}
	var now int64
	if c.p != nil && c.send >= 8*int64(c.p.every) {
		if swept := c.p.now.Load(); swept != 0 {
			now = swept + int64(c.p.every) // the latest the clock can be
		}
	}
	if now == 0 { // a short bound, or the parker's sweeps do not run
		now = monoNow()
	}
	if c.wBy != 0 && c.wBy-now >= c.send/2 {
		return
	}
	c.wBy = monoNow() + c.send
	t := time.Now().Add(time.Duration(c.send))
	if !c.wAsked.IsZero() && c.wAsked.Before(t) {
		t = c.wAsked
	}
	c.wSet = t
	_ = c.Conn.SetWriteDeadline(t)
}

// unboundWrite drops the write bound of a connection handed over to
// net/http, which bounds its own writes; the deadline fasthttp asked for
// stays.
func (c *conn) unboundWrite() {
	c.wEnd = time.Time{}
	if c.send == 0 {
		return
	}
	c.send, c.wBy, c.wSet = 0, 0, c.wAsked
	_ = c.Conn.SetWriteDeadline(c.wAsked)
}

// SetWriteDeadline takes the write deadline fasthttp asks for
// (server.timeouts.write, per answer), keeping the write bound's when that
// comes first.
func (c *conn) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() && !c.wEnd.IsZero() && c.wEnd.Before(t) {
		t = c.wEnd
	}
	c.wAsked = t
	if c.wBy != 0 && !c.wSet.IsZero() && (t.IsZero() || t.After(c.wSet)) {
		return nil // the bound's comes first, and moves as writes go on, never past t
	}
	c.wSet = t
	return c.Conn.SetWriteDeadline(t)
}

// Close closes the connection, or parks it when fasthttp let it go to be
// parked. A request admitted before its body whose body never came is
// finished first, and so is one whose answer the engine was to write
// (untilClose).
func (c *conn) Close() error {
	if x := c.resume.Swap(nil); x != nil {
		x.e.abandon(x)
	}
	if b := c.untilClose.Swap(nil); b != nil {
		_ = b.CloseWithError(net.ErrClosed)
		b.e.closing.Add(-1)
	}
	if c.parkNext.CompareAndSwap(true, false) {
		go c.p.park(c)
		return nil
	}
	if c.p != nil {
		c.p.remove(c)
	}
	if c.eng != nil {
		c.eng.untrack(c)
	}
	return c.Conn.Close()
}

// handled notes that the handler returned (the fields of a connection
// handed over are left alone: net/http reads and sets its deadlines from
// more than one goroutine).
func (c *conn) handled() {
	if !c.noPark {
		c.ended = true
	}
}

// peer returns the address of the connection's other end and, for an IPv4
// one, its text; both are worked out once a connection.
func (c *conn) peer() (netip.Addr, string) {
	if !c.addrSet {
		c.addr, c.addrSet = peerOf(c.RemoteAddr()), true
		if c.addr.Is4() {
			c.addrText = c.addr.String()
		}
	}
	return c.addr, c.addrText
}

// SetReadDeadline notes t as the read deadline, moving the connection's
// only when t is earlier than what it has (or it has none).
func (c *conn) SetReadDeadline(t time.Time) error {
	// The flags are written only when set: a connection handed over to
	// net/http, which never sets them, has its deadlines set and its
	// reads made from more than one goroutine.
	if c.headRead {
		c.headRead = false
	}
	if c.headNext {
		c.headNext = false
		if t.IsZero() && c.eng != nil {
			c.headRead = true // bounded by its first read (Read)
		}
	}
	// The first deadline set after the handler returned is fasthttp's idle
	// one, set before it waits for the next request.
	// A request already read ahead (pipelined) sets the next deadline
	// without that wait: its reads are not one.
	if c.ended || c.idleRead {
		c.idleRead = c.ended && !t.IsZero()
		c.headNext = c.ended && !t.IsZero()
		c.ended = false
	}
	c.want = t
	if t.IsZero() || (!c.set.IsZero() && !t.Before(c.set)) {
		return nil // a later deadline (or none): taken when the set one passes
	}
	c.set = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines; the read one as SetReadDeadline does.
func (c *conn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// read reads from the connection under the deadline asked for: when the
// connection's own deadline passes first, it is moved to that one and the
// read goes on.
func (c *conn) read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if n > 0 || err == nil || !isTimeout(err) {
			return n, err
		}
		if !c.want.IsZero() && !time.Now().Before(c.want) {
			return n, err // the deadline asked for has passed
		}
		c.set = c.want
		if err := c.Conn.SetReadDeadline(c.want); err != nil {
			return 0, err
		}
	}
}

// sniffBytes is the most a new connection's first read takes: the start
// of its first request, usually all of it.
const sniffBytes = 512

// heads holds the head buffers of connections parked in the idle set.
var heads = sync.Pool{New: func() any { return new([sniffBytes]byte) }}

// headBuf returns the connection's head buffer, taking one when it has
// none.
func (c *conn) headBuf() []byte {
	if c.head == nil {
		c.head = heads.Get().(*[sniffBytes]byte)
	}
	return c.head[:]
}

// dropHead gives the head buffer back; nothing may still be read from it
// (c.pre is empty).
func (c *conn) dropHead() {
	if c.head != nil {
		c.pre = nil
		heads.Put(c.head)
		c.head = nil
	}
}

func (c *conn) Read(b []byte) (int, error) {
	if c.headRead {
		_ = c.SetReadDeadline(time.Now().Add(c.eng.header)) // clears headRead
	}
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	if c.idleRead {
		c.idleRead = false
		if c.p != nil && !c.noPark {
			return c.readIdle(b)
		}
	}
	// fasthttp reads the first byte of a kept-alive connection's next
	// request alone (so that an idle connection holds no buffer): read
	// what has come into the small buffer the connection has anyway, so
	// that the rest of the request costs no second read.
	into := b
	if len(b) > 0 && len(b) < 16 {
		into = c.headBuf()
	}
	// A read of nothing without an error (which io.Reader allows) would
	// stop fasthttp: read again, a bounded number of times.
	for range 100 {
		n, err := c.read(into)
		if n > 0 && len(into) != len(b) {
			m := copy(b, into[:n])
			c.pre = into[m:n]
			return m, nil
		}
		if n > 0 || err != nil || len(b) == 0 {
			return n, err
		}
		into = b
	}
	return 0, io.ErrNoProgress
}

// sniff reads the first bytes of a new connection, at most until deadline,
// and says where it goes: h2 when it speaks HTTP/2 with prior knowledge,
// bareLF when a line of its first request's head ends in a bare LF (which
// fasthttp does not read and net/http does). The bytes stay readable.
func (c *conn) sniff(deadline time.Time) (h2, bareLF bool, err error) {
	if err := c.SetReadDeadline(deadline); err != nil {
		return false, false, err
	}
	n := 0
	for n < 3 {
		m, err := c.read(c.headBuf()[n:])
		n += m
		if err != nil {
			if n > 0 && errors.Is(err, io.EOF) {
				break
			}
			return false, false, err
		}
		if !h2Start(c.head[:n]) {
			break
		}
	}
	c.pre = c.head[:n]
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return false, false, err
	}
	// The engine that takes the connection sets its own deadlines.
	c.set = time.Time{}
	if err := c.Conn.SetReadDeadline(time.Time{}); err != nil {
		return false, false, err
	}
	// A bare LF anywhere in the head read so far (up to the empty line
	// ending it) sends the connection to net/http, which reads it.
	head := c.pre
	if end := bytes.Index(head, []byte("\r\n\r\n")); end >= 0 {
		head = head[:end+2]
	}
	for i, b := range head {
		if b == '\n' && (i == 0 || head[i-1] != '\r') {
			bareLF = true
			break
		}
	}
	return n >= 3 && h2Start(c.pre), bareLF, nil
}

// h2Start reports whether b starts as HTTP/2's preface does (b may be
// shorter or longer than the preface).
func h2Start(b []byte) bool {
	if len(b) >= len(h2Preface) {
		return string(b[:len(h2Preface)]) == h2Preface
	}
	return h2Preface[:len(b)] == string(b)
}

// maxWatchBytes bounds what a connection holds read ahead of the engine
// (a request pipelined behind the one that waits, read by watches): past
// it a watch reads no more, and only looks for the client's end.
const maxWatchBytes = 64 << 10

// watch reads the connection while the engine does not (a request waiting
// for its place in a queue, or a response streaming to the client), to
// notice the client leaving: the channel it returns is closed when the
// client closed its end (or only shut its side down), or the connection
// broke. While a request waits, the read deadline the engine asked for
// holds; while a response streams (streaming), there is none: the client
// may take its time. stop ends the watch; the bytes it read stay readable,
// after those read ahead before it and before any the engine reads from
// the connection. stop must be called before the engine reads again.
//
// What the connection holds read ahead is bounded by maxWatchBytes. Past
// that bound the watch reads no more: it waits for the socket to become
// readable and then looks, without taking anything, whether the client's
// end came (rawconn.WaitEnd), once each time; a client that goes on sending fills
// its socket's buffers and then wakes the watch no more. (Once those are
// full, the end a client sends waits behind the bytes it could not send
// yet, and arrives only as the engine reads; a reset arrives at once.)
// The look needs the connection's socket: a connection that gives it (as
// TCP and Unix ones do), bare, behind a wrapper that passes its bytes
// unchanged, or under TLS, whose records are left to it (a client that
// ends TLS with an alert and keeps its connection open is not noticed
// there). It is made on Linux. Elsewhere, and for another kind of
// connection, past the bound a client leaving is noticed only when the
// engine next writes to it or reads it (or the queue's wait ends).
func (c *conn) watch(streaming bool) (gone <-chan struct{}, stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	var pending []byte
	c.set = c.want
	if streaming {
		c.set = time.Time{}
	}
	_ = c.Conn.SetReadDeadline(c.set)
	room := maxWatchBytes - len(c.pre)
	go func() {
		defer close(ended)
		var left bool
		if pending, left = watchRead(c.Conn, room); left {
			close(done)
		}
	}()
	return done, func() {
		_ = c.Conn.SetReadDeadline(time.Unix(1, 0)) // unblocks the read, or the wait
		<-ended
		c.set = c.want
		_ = c.Conn.SetReadDeadline(c.set) // as the engine asked
		switch {
		case len(pending) == 0:
		case len(c.pre) == 0:
			c.pre = pending
		default:
			// What the engine had not read yet comes first.
			c.pre = append(c.pre[:len(c.pre):len(c.pre)], pending...)
		}
	}
}

// watchRead reads nc until room bytes are pending, then looks for the
// client's end without reading (rawconn.WaitEnd), until the client is gone (left),
// the read deadline passes (a watch's stop sets one in the past) or the
// connection breaks (left).
func watchRead(nc net.Conn, room int) (pending []byte, left bool) {
	for len(pending) < room {
		if len(pending) == cap(pending) {
			// Grown by doubling from 4 KiB, never past room.
			grown := make([]byte, len(pending), min(max(2*cap(pending), 4<<10), room))
			copy(grown, pending)
			pending = grown
		}
		n, err := nc.Read(pending[len(pending):cap(pending)])
		pending = pending[:len(pending)+n]
		if err != nil {
			return pending, !isTimeout(err)
		}
	}
	rc := rawconn.SocketOf(nc)
	return pending, rc != nil && rawconn.WaitEnd(rc)
}

// chanListener is a net.Listener fed from a channel: the edge engine hands
// the connections it does not serve itself to net/http through one.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to the listener's server; it closes c when the listener is
// closed.
func (l *chanListener) push(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
