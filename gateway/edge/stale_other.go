//go:build !unix

package edge

import "net"

// unasked says what an idle upstream connection has to read that no
// request asked for; without MSG_PEEK it cannot tell, and says nothing.
func unasked(*upConn) leftover { return nothing }

// fdOf returns -1: unasked does not look.
func fdOf(net.Conn) int { return -1 }
