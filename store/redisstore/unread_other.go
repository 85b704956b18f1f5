//go:build !linux

package redisstore

import "net"

// unread reports false: only Linux tells how many bytes wait unread.
func unread(net.Conn) bool { return false }
