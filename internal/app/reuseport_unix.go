//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package app

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// reusePort sets SO_REUSEPORT on a socket about to listen, so that
// another process of the same user may listen on the same address: the
// kernel spreads new connections over the listeners open there.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}
