//go:build unix

package rawconn

import "syscall"

// Look says what the socket fd has to read, without waiting and without
// taking anything (MSG_PEEK). On Linux it is one raw system call, so it
// may be made from a RawConn's callback.
func Look(fd uintptr) Leftover {
	for {
		n, e := peek(fd)
		switch {
		case e == syscall.EINTR:
		case e == 0 && n > 0:
			return Bytes
		case e == syscall.EAGAIN:
			return Nothing
		default:
			return End // 0 bytes and no error is the end; another error, a broken socket
		}
	}
}
