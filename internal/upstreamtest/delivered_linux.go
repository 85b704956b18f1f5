//go:build linux

package upstreamtest

import (
	"net"
	"time"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// Delivered waits until the other end of c has acknowledged every byte
// written on c (the send queue, SIOCOUTQ, is empty): they are in the other
// end's socket, read or not, and no longer on their way. On loopback a
// write can return before its bytes reach the other socket (the kernel
// hands them over later on a loaded machine). It reports false when that
// takes longer than limit or c has no socket to ask.
func Delivered(c net.Conn, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		n, ok := rawconn.Unacked(c)
		if !ok {
			return false
		}
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
}
