//go:build linux

package upstreamtest

import (
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// Delivered waits until the other end of c has acknowledged every byte
// written on c (the send queue, SIOCOUTQ, is empty): they are in the other
// end's socket, read or not, and no longer on their way. On loopback a
// write can return before its bytes reach the other socket (the kernel
// hands them over later on a loaded machine). It reports false when that
// takes longer than limit or c has no socket to ask.
func Delivered(c net.Conn, limit time.Duration) bool {
	rc := rawconn.SocketOf(c)
	if rc == nil {
		return false
	}
	deadline := time.Now().Add(limit)
	for {
		n, ierr := 0, error(nil)
		if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil || ierr != nil {
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
