//go:build linux

package edge

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a TCP connection's socket with raw system calls,
// which do not tell Go's scheduler that a call is under way. The socket is
// non-blocking, so each call returns at once (EAGAIN when there is nothing
// to read or no room to write, and then the goroutine waits in Go's
// netpoller, under the connection's deadlines, as net.Conn's Read and
// Write do). A thread that the kernel preempts in an announced call (a
// write that wakes its reader on the same CPU, often) has its P taken by
// the runtime's monitor and handed to another thread, and must find a P
// again when it resumes: on two cores shared with other processes that
// cost about a tenth of the CPU of a refusal, which raw calls do not pay.
// The price is that the goroutines queued on a preempted thread's P wait
// for it, unless the other Ps are idle and take them: a higher p99 at
// moderate load on shared cores (docs/engines.md, run 16).
//
// The race detector counts the syscall package's reads and writes as
// synchronizing with one another; it does not see these calls, so tests
// that hand state between goroutines through a socket read here need
// synchronization of their own.
type rawIO struct {
	rc              syscall.RawConn
	c               net.Conn // for the addresses in errors
	rb              []byte
	rn              int
	rerr            syscall.Errno
	wb              []byte
	wn              int
	werr            syscall.Errno
	readFn, writeFn func(uintptr) bool
}

// newRawIO returns the raw reader and writer of c, nil when c is not a
// plain TCP connection or a wrapper that passes its bytes unchanged to one
// (plainConn).
func newRawIO(c net.Conn) *rawIO {
	if p, ok := c.(plainConn); ok {
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
	r := &rawIO{rc: rc, c: tc}
	r.readFn, r.writeFn = r.readOnce, r.writeAll
	return r
}

func (r *rawIO) readOnce(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rb[0])), uintptr(len(r.rb)))
		switch e {
		case 0:
			r.rn = int(n)
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			r.rerr = e
			return true
		}
	}
}

func (r *rawIO) writeAll(fd uintptr) bool {
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

// read reads into b as net.Conn's Read does.
func (r *rawIO) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.rb, r.rn, r.rerr = b, 0, 0
	err := r.rc.Read(r.readFn)
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

// write writes b as net.Conn's Write does.
func (r *rawIO) write(b []byte) (int, error) {
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
