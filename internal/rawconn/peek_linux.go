//go:build linux

package rawconn

import (
	"syscall"
	"unsafe"
)

// peek reads one byte of the socket fd without taking it or waiting, in
// a raw system call.
func peek(fd uintptr) (int, syscall.Errno) {
	var b [1]byte
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return int(n), e
}
