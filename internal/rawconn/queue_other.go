//go:build !linux

package rawconn

import "net"

// Unread cannot tell what waits in a socket's buffers off Linux: ok is
// false.
func Unread(net.Conn) (n int, ok bool) { return 0, false }

// Unacked cannot tell what waits in a socket's buffers off Linux: ok is
// false.
func Unacked(net.Conn) (n int, ok bool) { return 0, false }
