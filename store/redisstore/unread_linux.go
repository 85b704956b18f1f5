package redisstore

import (
	"net"
	"syscall"
	"unsafe"
)

// unread reports whether bytes wait in the kernel's receive buffer of c,
// not yet read by this process (TIOCINQ): Redis has answered, but the
// goroutine that reads the connection has not run.
func unread(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var n int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil {
		return false
	}
	return errno == 0 && n > 0
}
