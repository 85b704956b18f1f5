//go:build unix && !linux

package rawconn

import "syscall"

// Look says what the socket fd has to read, without waiting and without
// taking anything (MSG_PEEK).
func Look(fd uintptr) Leftover {
	var b [1]byte
	for {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EINTR:
		case err == nil && n > 0:
			return Bytes
		case err == syscall.EAGAIN:
			return Nothing
		default:
			return End // 0 bytes and no error is the end; another error, a broken socket
		}
	}
}
