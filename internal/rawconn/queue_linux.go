package rawconn

import (
	"net"

	"golang.org/x/sys/unix"
)

// Unread returns how many bytes wait in the receive buffer of c's socket,
// not yet read by this process (SIOCINQ); ok is false when that cannot be
// told (no socket under c).
func Unread(c net.Conn) (n int, ok bool) { return queueLen(c, unix.SIOCINQ) }

// Unacked returns how many bytes c's socket holds that its peer has not
// acknowledged yet, sent or still to send (SIOCOUTQ); ok is false when
// that cannot be told (no socket under c).
func Unacked(c net.Conn) (n int, ok bool) { return queueLen(c, unix.SIOCOUTQ) }

func queueLen(c net.Conn, req uint) (int, bool) {
	rc := SocketOf(c)
	if rc == nil {
		return 0, false
	}
	n, ierr := 0, error(nil)
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), req) }); err != nil || ierr != nil {
		return 0, false
	}
	return n, true
}
