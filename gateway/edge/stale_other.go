//go:build !unix

package edge

import "net"

// unasked reports whether an idle upstream connection has bytes no request
// asked for; without MSG_PEEK it cannot tell, and says no.
func unasked(*upConn) bool { return false }

// fdOf returns -1: unasked does not look.
func fdOf(net.Conn) int { return -1 }
