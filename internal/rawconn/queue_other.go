//go:build !linux

package rawconn

import (
	"net"
	"syscall"
)

// Unread cannot tell what waits in a socket's buffers off Linux: ok is
// false.
func Unread(net.Conn) (n int, ok bool) { return 0, false }

// Unacked cannot tell what waits in a socket's buffers off Linux: ok is
// false.
func Unacked(net.Conn) (n int, ok bool) { return 0, false }

// Received cannot tell what a socket received off Linux: ok is false.
func Received(net.Conn) (n uint64, ok bool) { return 0, false }

// Connected cannot tell a socket's state off Linux: ok is false.
func Connected(syscall.RawConn) (yes bool, received uint64, ok bool) { return false, 0, false }
