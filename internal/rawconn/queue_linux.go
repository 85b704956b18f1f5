package rawconn

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Unread returns how many bytes wait in the receive buffer of c's socket,
// not yet read by this process (SIOCINQ); ok is false when that cannot be
// told (no socket under c).
func Unread(c net.Conn) (n int, ok bool) { return queueLen(c, unix.SIOCINQ) }

// Unacked returns how many bytes c's socket holds that its peer has not
// acknowledged yet, sent or still to send (SIOCOUTQ); ok is false when
// that cannot be told (no socket under c).
func Unacked(c net.Conn) (n int, ok bool) { return queueLen(c, unix.SIOCOUTQ) }

// Received returns how many bytes of data c's TCP socket has received in
// all, read by this process or not (TCP_INFO's tcpi_bytes_received), so
// that two readings tell whether any arrived between them; ok is false
// when that cannot be told (no TCP socket under c).
func Received(c net.Conn) (n uint64, ok bool) {
	info, ok := tcpInfo(SocketOf(c))
	if !ok {
		return 0, false
	}
	return info.Bytes_received, true
}

// Connected reports whether the TCP socket of rc (a dial's, as
// net.Dialer's ControlContext is given it) is connected, its peer having
// answered the handshake, whether or not the dial's goroutine has seen it
// yet, and how many bytes of data it has received since (a TLS server's
// handshake, say), read or not. ok is false when that cannot be told (rc
// is closed, or no TCP socket).
func Connected(rc syscall.RawConn) (yes bool, received uint64, ok bool) {
	info, ok := tcpInfo(rc)
	if !ok {
		return false, 0, false
	}
	return info.State == unix.BPF_TCP_ESTABLISHED, info.Bytes_received, true
}

// tcpInfo reads the TCP_INFO of rc's socket.
func tcpInfo(rc syscall.RawConn) (*unix.TCPInfo, bool) {
	if rc == nil {
		return nil, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || ierr != nil {
		return nil, false
	}
	return info, true
}

func queueLen(c net.Conn, req uint) (int, bool) {
	rc := SocketOf(c)
	if rc == nil {
		return 0, false
	}
	n, ierr := 0, error(nil)
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), req) }); err != nil || ierr != nil {
		return 0, false
	}
	return n, true
}
