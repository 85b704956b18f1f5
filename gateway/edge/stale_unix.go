//go:build unix

package edge

import (
	"net"
	"syscall"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// unasked says what an idle upstream connection has to read that no
// request asked for: bytes the upstream sent while the connection waited
// in the pool (a second response, from an upstream that read a request's
// body as a request of its own, or a buggy one), or its end. Read as the
// answer to the next request sent on it, bytes would answer that request
// with what was never its answer, and each request after it with the
// answer of the one before. It looks without waiting and without taking
// the bytes: one system call.
func unasked(u *upConn) rawconn.Leftover {
	if u.fd < 0 {
		return rawconn.Nothing
	}
	// The connection is this request's alone (taken from the pool): its
	// descriptor cannot be closed meanwhile.
	return rawconn.Look(uintptr(u.fd))
}

// fdOf returns the descriptor of a TCP connection, -1 for another kind.
func fdOf(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	if rc.Control(func(d uintptr) { fd = int(d) }) != nil {
		return -1
	}
	return fd
}
