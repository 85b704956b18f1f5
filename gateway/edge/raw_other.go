//go:build !linux

package edge

import "net"

// rawIO: only on Linux; elsewhere connections are read and written
// through net.Conn.
type rawIO struct{}

func newRawIO(net.Conn) *rawIO             { return nil }
func (*rawIO) read(b []byte) (int, error)  { return 0, nil }
func (*rawIO) write(b []byte) (int, error) { return 0, nil }
