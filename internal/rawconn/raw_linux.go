//go:build linux

package rawconn

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// IO reads and writes one stream socket (TCP or Unix) with raw system
// calls. As with net.Conn, any number of goroutines may read and write at
// once: a read runs while a write does, and two reads (or two writes)
// take turns, each whole, as net's do.
type IO struct {
	rc syscall.RawConn
	c  net.Conn // a *net.TCPConn or *net.UnixConn, for errors
	// rmu is held by a Read from the moment it sets rb until it has taken
	// rn and rerr, wmu by a Write for wb, wn and werr: the socket's own
	// locks are taken only inside rc's Read and Write, after those fields
	// are set, and released before they are read back.
	rmu, wmu        sync.Mutex
	rb              []byte
	rn              int
	rerr            syscall.Errno
	wb              []byte
	wn              int
	werr            syscall.Errno
	readFn, writeFn func(uintptr) bool
	sendFn          func(uintptr) bool
	// pend is what the next Read sends before it waits (SendFirst), pn
	// how much of it is sent, perr the error that ended the send.
	pend []byte
	pn   int
	perr syscall.Errno
	// unread is what the socket held when that Read began, when it held
	// something: nothing was sent (until the next SendFirst).
	unread Leftover
	// waiting says a read found the socket empty and waits in the
	// netpoller.
	waiting atomic.Bool
}

// Waiting reports whether a read found the socket empty and waits for
// bytes: whoever reads through IO holds nothing unread from the socket
// that it has not been given, at least until the wait ends.
func (r *IO) Waiting() bool { return r.waiting.Load() }

// Look says what the socket has to read now (Look), without waiting and
// without taking it: a reader Waiting may be parked on bytes that came
// since it found the socket empty, until it runs again. A socket that
// cannot be looked at says End.
func (r *IO) Look() Leftover {
	res := End
	if err := r.rc.Control(func(fd uintptr) { res = Look(fd) }); err != nil {
		return End
	}
	return res
}

// Of returns the raw reader and writer of c, nil when c is not a plain
// TCP connection, a Unix stream connection, or a wrapper that passes its
// bytes unchanged to one (Plain). (A Unix datagram or sequenced-packet
// connection keeps its messages' bounds, which a stream's reader would
// not: those are left to net.)
func Of(c net.Conn) *IO {
	for i := 0; i < 4; i++ {
		p, ok := c.(Plain)
		if !ok {
			break
		}
		c = p.PlainConn()
	}
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil
	}
	if _, unix := c.(*net.UnixConn); unix && !isStream(rc) {
		return nil
	}
	r := &IO{rc: rc, c: c}
	r.readFn, r.writeFn, r.sendFn = r.readOnce, r.writeAll, r.sendThenRead
	return r
}

// network names the connection's network in errors, as net does.
func (r *IO) network() string {
	if _, ok := r.c.(*net.UnixConn); ok {
		return "unix"
	}
	return "tcp"
}

// isStream reports whether rc's socket is a stream (SOCK_STREAM).
func isStream(rc syscall.RawConn) bool {
	typ := -1
	if err := rc.Control(func(fd uintptr) {
		typ, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TYPE)
	}); err != nil {
		return false
	}
	return typ == syscall.SOCK_STREAM
}

func (r *IO) readOnce(fd uintptr) bool {
	if r.waiting.Load() {
		r.waiting.Store(false) // woken: bytes, the end, or an error
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rb[0])), uintptr(len(r.rb)))
		switch e {
		case 0:
			r.rn = int(n)
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			r.waiting.Store(true)
			return false
		default:
			r.rerr = e
			return true
		}
	}
}

func (r *IO) writeAll(fd uintptr) bool {
	n, e, done := writeRaw(fd, r.wb[r.wn:])
	r.wn += n
	r.werr = e
	return done
}

// writeRaw writes p to the socket fd until all of it is written (done),
// the socket has no room (not done) or the write fails (done, with e).
func writeRaw(fd uintptr, p []byte) (written int, e syscall.Errno, done bool) {
	for written < len(p) {
		q := p[written:]
		n, _, err := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&q[0])), uintptr(len(q)))
		switch err {
		case 0:
			written += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return written, 0, false
		default:
			return written, err, true
		}
	}
	return written, 0, true
}

// sendThenRead sends what SendFirst left for this read and, once it is
// all sent, waits without reading: the netpoller's readiness was reset
// before the send began (RawConn.Read resets it before it calls this), so
// the answer's bytes, which come after the send, end the wait. It first
// looks (Look), without taking anything, whether the socket is quiet: bytes or
// the end that came before the reset would not end the wait, so then it
// sends nothing and ends the read (unread). A send that finds no room, or
// fails, ends the read too (Read finishes or reports it). Woken, it reads
// as readOnce.
func (r *IO) sendThenRead(fd uintptr) bool {
	if r.pend == nil {
		return r.readOnce(fd)
	}
	if r.pn == 0 {
		if r.unread = Look(fd); r.unread != Nothing {
			return true
		}
	}
	n, e, done := writeRaw(fd, r.pend[r.pn:])
	r.pn += n
	if !done || e != 0 {
		r.perr = e
		return true
	}
	r.pend = nil
	r.waiting.Store(true)
	return false
}

// ErrUnread is a Read's error when the request SendFirst left for it was
// not sent: the socket already held bytes, or its end, when that Read
// began. They are still there for the next Read. A reader that turns the
// error into another (bufio's users often do) can ask Unsent.
var ErrUnread = errors.New("rawconn: the socket had bytes to read before the request was sent")

// SendFirst has the next Read send b before it reads, as Write then Read
// would, with one system call fewer: that Read resets the socket's
// readiness, checks that the socket has nothing to read, sends b and,
// when the socket took all of it, waits for the answer's first bytes
// without first trying a read that could only find the socket empty. It
// is for a request and its answer: when the socket is not quiet as the
// Read begins (bytes no request asked for, or the end), b is not sent and
// the Read returns ErrUnread. The check comes after the reset, so bytes
// that arrive after it end the wait, and bytes that came before it are
// found by it. An error of the send is that Read's, named as a write's;
// what the socket had no room for, the Read writes as Write does before
// it reads. b must stay as it is until that Read returns, and no Write
// may run meanwhile.
func (r *IO) SendFirst(b []byte) {
	r.unread = Nothing
	if len(b) > 0 {
		r.pend, r.pn, r.perr = b, 0, 0
	}
}

// Unsent says what kept the request of the last SendFirst from being
// sent (its Read returned ErrUnread): Bytes or End; Nothing when it was
// sent, or is yet to be.
func (r *IO) Unsent() Leftover { return r.unread }

// Read reads into b as net.Conn's Read does, after sending what SendFirst
// left for it.
func (r *IO) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.rmu.Lock()
	defer r.rmu.Unlock()
	r.rb, r.rn, r.rerr = b, 0, 0
	var err error
	if r.pend != nil {
		err = r.rc.Read(r.sendFn)
		if err == nil && r.unread != Nothing {
			r.pend, r.rb = nil, nil
			return 0, ErrUnread
		}
		if err == nil && r.pend != nil {
			// The send ended the read: no room for the rest, or an error.
			if err = r.sendRest(); err != nil {
				r.pend, r.rb = nil, nil
				return 0, err
			}
			err = r.rc.Read(r.readFn)
		}
		r.pend = nil
	} else {
		err = r.rc.Read(r.readFn)
	}
	if r.waiting.Load() {
		r.waiting.Store(false) // the wait ended without bytes (a deadline, a close)
	}
	n, e := r.rn, r.rerr
	r.rb = nil
	if err != nil {
		return 0, opNamed(err, "read")
	}
	if e != 0 {
		return 0, &net.OpError{Op: "read", Net: r.network(), Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: os.NewSyscallError("read", e)}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// sendRest reports the error that ended SendFirst's send, or writes the
// rest of it as Write does.
func (r *IO) sendRest() error {
	if r.perr != 0 {
		return &net.OpError{Op: "write", Net: r.network(), Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: os.NewSyscallError("write", r.perr)}
	}
	_, err := r.Write(r.pend[r.pn:])
	return err
}

// Write writes b as net.Conn's Write does.
func (r *IO) Write(b []byte) (int, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.wb, r.wn, r.werr = b, 0, 0
	err := r.rc.Write(r.writeFn)
	n, e := r.wn, r.werr
	r.wb = nil
	if err != nil {
		return n, opNamed(err, "write")
	}
	if e != 0 {
		return n, &net.OpError{Op: "write", Net: r.network(), Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: os.NewSyscallError("write", e)}
	}
	return n, nil
}

// opNamed names the operation of a raw read's or write's error (a
// deadline, a closed connection) as net.Conn's would.
func opNamed(err error, op string) error {
	if oe, ok := err.(*net.OpError); ok {
		oe.Op = op
	}
	return err
}
