//go:build linux

package edge

import (
	"crypto/tls"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// socketOf returns the raw connection of the socket under c, to wait on
// without reading it: c's own when c gives its socket (syscall.Conn, as
// TCP and Unix connections do), or that of the connection under a wrapper
// that passes its bytes unchanged (rawconn.Plain) or under TLS (whose
// records stay the TLS layer's: the socket is looked at, never read). It
// returns nil for another kind.
func socketOf(c net.Conn) syscall.RawConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	for range 4 {
		p, ok := c.(rawconn.Plain)
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

// waitEnd waits, without reading, for the other end of rc's socket to
// close it or shut its side down (or for the socket to break), and then
// reports true. It looks (ended) once as it begins and once each time the
// netpoller wakes it, whose events are edge-triggered: when bytes or the
// end come, or, as an event tells the socket's whole state, when room to
// write comes back while the engine writes. Waiting makes none: a socket
// with bytes waiting but no end costs one look each time more come, and
// none once its buffer is full.
// The connection's read deadline ends the wait (false), as a read's
// would; its closing ends it too (true).
func waitEnd(rc syscall.RawConn) bool {
	gone := false
	err := rc.Read(func(fd uintptr) bool {
		gone = ended(fd)
		return gone
	})
	if err != nil {
		return !isTimeout(err)
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
