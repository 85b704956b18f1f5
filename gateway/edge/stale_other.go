//go:build !unix

package edge

import (
	"net"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// unasked says what an idle upstream connection has to read that no
// request asked for; without MSG_PEEK it cannot tell, and says nothing.
func unasked(*upConn) rawconn.Leftover { return rawconn.Nothing }

// fdOf returns -1: unasked does not look.
func fdOf(net.Conn) int { return -1 }
