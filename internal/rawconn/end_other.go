//go:build !linux

package rawconn

import (
	"net"
	"syscall"
)

// SocketOf returns nil: a socket's end is looked for without reading it
// on Linux only (WaitEnd).
func SocketOf(net.Conn) syscall.RawConn { return nil }

// WaitEnd is never called: SocketOf returns no socket.
func WaitEnd(syscall.RawConn) bool { return false }

// WatchEnd returns nil: a socket's end is watched for on Linux only. A
// connection's end is then told by whoever reads it.
func WatchEnd(net.Conn, func()) (stop func()) { return nil }
