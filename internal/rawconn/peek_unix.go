//go:build unix && !linux

package rawconn

import (
	"errors"
	"syscall"
)

// peek reads one byte of the socket fd without taking it or waiting.
func peek(fd uintptr) (int, syscall.Errno) {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	var e syscall.Errno
	if err != nil && !errors.As(err, &e) {
		e = syscall.EIO
	}
	return n, e
}
