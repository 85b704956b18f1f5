//go:build !linux

package upstreamtest

import (
	"net"
	"time"
)

// Delivered cannot ask the socket what the other end acknowledged here:
// it waits 50 ms, or limit when that is shorter, and reports false.
func Delivered(_ net.Conn, limit time.Duration) bool {
	time.Sleep(min(limit, 50*time.Millisecond))
	return false
}
