//go:build linux

package rawconn

import (
	"syscall"
	"unsafe"
)

// Look says what the socket fd has to read, without waiting and without
// taking anything (MSG_PEEK): one raw system call, so it may be made from a
// RawConn's callback.
func Look(fd uintptr) Leftover {
	var b [1]byte
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
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
