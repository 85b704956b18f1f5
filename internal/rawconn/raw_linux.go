//go:build linux

package rawconn

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// IO reads and writes one TCP connection's socket with raw system calls.
// One read and one write may run at once, not two of either.
type IO struct {
	rc              syscall.RawConn
	c               net.Conn // for the addresses in errors
	rb              []byte
	rn              int
	rerr            syscall.Errno
	wb              []byte
	wn              int
	werr            syscall.Errno
	readFn, writeFn func(uintptr) bool
	// waiting says a read found the socket empty and waits in the
	// netpoller.
	waiting atomic.Bool
}

// Waiting reports whether a read found the socket empty and waits for
// bytes: whoever reads through IO holds nothing unread from the socket
// that it has not been given, at least until the wait ends.
func (r *IO) Waiting() bool { return r.waiting.Load() }

// Of returns the raw reader and writer of c, nil when c is not a plain
// TCP connection or a wrapper that passes its bytes unchanged to one
// (Plain).
func Of(c net.Conn) *IO {
	for i := 0; i < 4; i++ {
		p, ok := c.(Plain)
		if !ok {
			break
		}
		c = p.PlainConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &IO{rc: rc, c: tc}
	r.readFn, r.writeFn = r.readOnce, r.writeAll
	return r
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
	for r.wn < len(r.wb) {
		p := r.wb[r.wn:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
			r.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			r.werr = e
			return true
		}
	}
	return true
}

// Read reads into b as net.Conn's Read does.
func (r *IO) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.rb, r.rn, r.rerr = b, 0, 0
	err := r.rc.Read(r.readFn)
	if r.waiting.Load() {
		r.waiting.Store(false) // the wait ended without bytes (a deadline, a close)
	}
	n, e := r.rn, r.rerr
	r.rb = nil
	if err != nil {
		return 0, opNamed(err, "read")
	}
	if e != 0 {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: os.NewSyscallError("read", e)}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Write writes b as net.Conn's Write does.
func (r *IO) Write(b []byte) (int, error) {
	r.wb, r.wn, r.werr = b, 0, 0
	err := r.rc.Write(r.writeFn)
	n, e := r.wn, r.werr
	r.wb = nil
	if err != nil {
		return n, opNamed(err, "write")
	}
	if e != 0 {
		return n, &net.OpError{Op: "write", Net: "tcp", Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: os.NewSyscallError("write", e)}
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
