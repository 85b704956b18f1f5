//go:build linux

package rawconn

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SocketOf returns the raw connection of the socket under c, to wait on
// without reading it (WaitEnd): c's own when c gives its socket
// (syscall.Conn, as TCP and Unix connections do), or that of the
// connection under a wrapper that passes its bytes unchanged (Plain) or
// under TLS (whose records stay the TLS layer's: the socket is looked at,
// never read). It returns nil for another kind.
func SocketOf(c net.Conn) syscall.RawConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	for range 4 {
		p, ok := c.(Plain)
		if !ok {
			break
		}
		c = p.PlainConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// endEvents are the events of a socket whose other end closed it or shut
// its side down (POLLRDHUP), or that broke.
const endEvents = unix.POLLRDHUP | unix.POLLHUP | unix.POLLERR | unix.POLLNVAL

// WaitEnd waits, without reading, for the other end of rc's socket to
// close it or shut its side down (or for the socket to break), and then
// reports true. It looks (ended) once as it begins and once each time the
// netpoller wakes it, whose events are edge-triggered: when bytes or the
// end come, or, as an event tells the socket's whole state, when room to
// write comes back while its owner writes. Waiting makes none: a socket
// with bytes waiting but no end costs one look each time more come, and
// none once its buffer is full.
// The connection's read deadline ends the wait (false), as a read's
// would; its closing ends it too (true).
func WaitEnd(rc syscall.RawConn) bool {
	gone := false
	err := rc.Read(func(fd uintptr) bool {
		gone = ended(fd)
		return gone
	})
	if err != nil {
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
	return gone
}

// ended reports whether the socket fd's other end closed it or shut its
// side down, or the socket broke, without waiting and without taking
// anything: a poll of it with no timeout, in one raw system call (it
// tells the end even behind bytes not read yet, which a peek cannot).
func ended(fd uintptr) bool {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}
	var now unix.Timespec // no timeout: the poll returns at once
	for {
		n, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&now)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
		case e != 0:
			return true // a socket that cannot be polled is broken
		default:
			return n > 0 && pfd.Revents&endEvents != 0
		}
	}
}

// WatchEnd watches the socket under c (SocketOf) for its other end to
// close it or shut its side down, or for it to break (WaitEnd), while
// another goroutine may hold c's reads and deadlines (as net/http's
// server does with its connections' background reads): it waits on a
// duplicate of the socket's descriptor, of its own in the netpoller, and
// neither reads c nor moves c's deadlines. ended is called, from the
// watch's goroutine, when the end comes; stop ends the watch (it closes
// the duplicate) and returns once it has ended: ended is never called
// after stop returns, nor after stop began. The duplicate costs a few
// system calls. WatchEnd returns nil when c has no socket, or the
// duplicate cannot be made.
func WatchEnd(c net.Conn, ended func()) (stop func()) {
	rc := SocketOf(c)
	if rc == nil {
		return nil
	}
	f := dupSocket(rc)
	if f == nil {
		return nil
	}
	frc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil
	}
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Closing the duplicate ends the wait too: stop's doing, not
		// the client's.
		if WaitEnd(frc) && !stopping.Load() {
			ended()
		}
	}()
	return func() {
		stopping.Store(true)
		_ = f.Close()
		<-done
	}
}

// dupSocket returns a duplicate of rc's socket descriptor, closed on exec,
// as a file in the netpoller (the socket is non-blocking, as net makes
// its sockets: the duplicate shares that), or nil when none can be made.
func dupSocket(rc syscall.RawConn) *os.File {
	nfd := -1
	if err := rc.Control(func(fd uintptr) {
		if !isNonblock(fd) {
			return // a file that the netpoller would not wait on
		}
		if d, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err == nil {
			nfd = d
		}
	}); err != nil || nfd < 0 {
		if nfd >= 0 {
			_ = unix.Close(nfd)
		}
		return nil
	}
	return os.NewFile(uintptr(nfd), "socket")
}

// isNonblock reports whether the descriptor fd is non-blocking.
func isNonblock(fd uintptr) bool {
	fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	return err == nil && fl&unix.O_NONBLOCK != 0
}
