//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package app

import "syscall"

// reusePort leaves the socket as it is where SO_REUSEPORT is not known:
// the address is the process's own.
func reusePort(_, _ string, _ syscall.RawConn) error { return nil }
