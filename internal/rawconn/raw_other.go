//go:build !linux

package rawconn

import (
	"errors"
	"net"
)

// IO: raw system calls are made on Linux only.
type IO struct{}

// Of returns nil: connections are read and written through net.Conn.
func Of(net.Conn) *IO { return nil }

// Read is never called: Of returns no IO.
func (*IO) Read([]byte) (int, error) { return 0, net.ErrClosed }

// Write is never called: Of returns no IO.
func (*IO) Write([]byte) (int, error) { return 0, net.ErrClosed }

// Waiting is never called: Of returns no IO.
func (*IO) Waiting() bool { return false }

// Look is never called: Of returns no IO.
func (*IO) Look() Leftover { return Nothing }

// SendFirst is never called: Of returns no IO.
func (*IO) SendFirst([]byte) {}

// Unsent is never called: Of returns no IO.
func (*IO) Unsent() Leftover { return Nothing }

// ErrUnread is never returned: Of returns no IO.
var ErrUnread = errors.New("rawconn: the socket had bytes to read before the request was sent")
