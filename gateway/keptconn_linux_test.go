//go:build linux

package gateway

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// TestCheckKept: a kept connection whose reader waits on an empty socket
// is used at once; one whose reader does not settle (it holds bytes, or
// never looked, or took bytes as it was looked at) is closed after the
// limit, and a closed one is left alone.
func TestCheckKept(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := dialUpstream(&net.Dialer{Timeout: time.Second}, 0)
	pair := func() (*upstreamConn, net.Conn) {
		t.Helper()
		c, err := dial(t.Context(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		uc := c.(*upstreamConn)
		if uc.Raw() == nil {
			t.Fatal("an upstream TCP connection is not read raw")
		}
		return uc, s
	}

	// The reader waits on the empty socket: used at once, left open.
	uc, s := pair()
	read := make(chan error, 1)
	go func() {
		_, err := uc.Read(make([]byte, 16))
		read <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !uc.Raw().Waiting() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	checkKept(uc, time.Second)
	if uc.closed.Load() || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("a connection whose reader waits: closed %v after %v", uc.closed.Load(), time.Since(start))
	}
	_, _ = s.Write([]byte("x"))
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if uc.Raw().Waiting() {
		t.Fatal("still waiting after its read returned")
	}

	// Nobody reads it (as when the transport's reader found bytes in its
	// buffer and has not closed it yet): closed after the limit.
	uc2, _ := pair()
	start = time.Now()
	checkKept(uc2, 30*time.Millisecond)
	if !uc2.closed.Load() || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("an unsettled connection: closed %v after %v", uc2.closed.Load(), time.Since(start))
	}

	// The reader is seen waiting, then wakes and takes bytes that came
	// as the socket is looked at (as the transport's reader does with a
	// second response): its read fails rather than hand them on, the
	// empty socket does not make the connection fit to use, and since
	// nobody closes it here, it is closed after the limit.
	uc4, s4 := pair()
	read4 := make(chan error, 1)
	go func() {
		_, err := uc4.Read(make([]byte, 64)) // room for all it is sent
		read4 <- err
	}()
	deadline = time.Now().Add(5 * time.Second)
	for !uc4.Raw().Waiting() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	uc4.look = func() rawconn.Leftover {
		if _, err := s4.Write([]byte("HTTP/1.1 400 Bad Request\r\n")); err != nil {
			t.Error(err)
		}
		if err := <-read4; !errors.Is(err, errUnasked) {
			t.Errorf("a read that took bytes while the socket was looked at: %v, want %v", err, errUnasked)
		}
		return uc4.Raw().Look()
	}
	checkKept(uc4, 30*time.Millisecond)
	if !uc4.closed.Load() {
		t.Fatal("a connection whose reader took bytes between the two looks was left to carry a request")
	}

	// Closed already: nothing to wait for.
	uc3, _ := pair()
	_ = uc3.Close()
	start = time.Now()
	checkKept(uc3, time.Second)
	if time.Since(start) > 500*time.Millisecond {
		t.Fatalf("waited %v on a closed connection", time.Since(start))
	}
}
