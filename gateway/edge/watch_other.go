//go:build !linux

package edge

import (
	"net"
	"syscall"
)

// socketOf returns nil: past its bound, a watch looks for the client's end
// only on Linux (waitEnd).
func socketOf(net.Conn) syscall.RawConn { return nil }

// waitEnd is never called: socketOf returns no socket.
func waitEnd(syscall.RawConn) bool { return false }
