//go:build linux

package upstreamtest

import (
	"net"
	"testing"
	"time"
)

// TestDelivered: bytes written to a peer that reads nothing are delivered
// once its socket holds them; bytes past what its receive buffer takes
// stay in the sender's queue, and Delivered says so after its limit.
func TestDelivered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if err := peer.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}

	if _, err := c.Write([]byte("a few bytes")); err != nil {
		t.Fatal(err)
	}
	if !Delivered(c, 5*time.Second) {
		t.Fatal("a few bytes to a peer with room for them: not delivered")
	}

	// More than the peer's buffer holds: the rest waits in c's queue.
	if err := c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	if n, _ := c.Write(big); n == 0 {
		t.Fatal("nothing of a mebibyte was written")
	}
	if Delivered(c, 50*time.Millisecond) {
		t.Fatal("a mebibyte to a peer that reads nothing: delivered")
	}
}
