//go:build linux

// Past its bound a watch looks for the client's end without reading: on
// Linux (watch_linux.go). Elsewhere it stops watching there.

package edge

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/rawconn"
	"github.com/floodgate/floodgate/internal/waittest"
)

// tcpPair returns the two ends of a loopback TCP connection, closed with
// the test.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	sc := <-accepted
	if sc == nil {
		t.Fatal("the listener accepted no connection")
	}
	t.Cleanup(func() { sc.Close() })
	_ = cc.SetDeadline(time.Now().Add(time.Minute)) // a client that blocks fails
	return cc.(*net.TCPConn), sc.(*net.TCPConn)
}

// tlsPair returns the two ends of a loopback TLS connection, its handshake
// made, closed with the test.
func tlsPair(t *testing.T) (client, server *tls.Conn) {
	t.Helper()
	certs := httptest.NewUnstartedServer(http.NotFoundHandler())
	certs.StartTLS()
	t.Cleanup(certs.Close)
	cc, sc := tcpPair(t)
	cfg := certs.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.ServerName = "example.com" // the httptest certificate's
	tc := tls.Client(cc, cfg)
	ts := tls.Server(sc, &tls.Config{Certificates: certs.TLS.Certificates})
	shook := make(chan error, 1)
	go func() { shook <- ts.Handshake() }()
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-shook; err != nil {
		t.Fatal(err)
	}
	return tc, ts
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// pattern returns n bytes that differ from one KiB to the next, so that
// bytes out of order do not compare equal.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i>>10) ^ byte(i)
	}
	return b
}

// TestWatchNoticesAnEndPastItsBound: a client that sends more than a
// watch reads ahead (a request pipelined behind one that waits, or a large
// body) and then closes its connection is noticed leaving, over TCP (bare,
// and read raw as the engine reads it) and over TLS. The bytes the watch
// read come first after it, then the rest.
func TestWatchNoticesAnEndPastItsBound(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"tcp", "raw", "tls"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var client, server net.Conn
			switch kind {
			case "tls":
				client, server = tlsPair(t)
			case "raw":
				cc, sc := tcpPair(t)
				client, server = cc, rawconn.Wrap(sc)
			default:
				client, server = tcpPair(t)
			}
			ec := &conn{Conn: server}
			sent := pattern(maxWatchBytes + 10<<10)
			gone, stop := ec.watch(false)
			if _, err := client.Write(sent); err != nil {
				t.Fatal(err)
			}
			if err := client.Close(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "noticed: the client closed its connection 10 KiB past the watch's bound", func() bool { return closed(gone) })
			stop()
			if len(ec.pre) != maxWatchBytes || !bytes.Equal(ec.pre, sent[:maxWatchBytes]) {
				t.Fatalf("the watch left %d bytes to read first, want the first %d sent", len(ec.pre), maxWatchBytes)
			}
			_ = server.SetReadDeadline(time.Now().Add(time.Minute))
			got, err := io.ReadAll(ec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, sent) {
				t.Fatalf("read %d bytes after the watch, want the %d sent, in order", len(got), len(sent))
			}
		})
	}
}

// countedSocket is a TCP connection whose socket counts the looks made
// in the waits on it: the calls of its raw reads' callbacks.
type countedSocket struct {
	*net.TCPConn
	looks *atomic.Int64
}

func (c countedSocket) SyscallConn() (syscall.RawConn, error) {
	rc, err := c.TCPConn.SyscallConn()
	if err != nil {
		return nil, err
	}
	return countedRaw{rc, c.looks}, nil
}

// countedRaw counts the calls of its reads' callbacks.
type countedRaw struct {
	syscall.RawConn
	looks *atomic.Int64
}

func (r countedRaw) Read(f func(fd uintptr) bool) error {
	return r.RawConn.Read(func(fd uintptr) bool {
		r.looks.Add(1)
		return f(fd)
	})
}

// queued returns what the socket of c holds, asked with ask: the bytes
// it has received that were not read (rawconn.Unread), or the bytes sent
// that the other end has not acknowledged (rawconn.Unacked).
func queued(t *testing.T, c net.Conn, ask func(net.Conn) (int, bool)) int {
	t.Helper()
	n, ok := ask(c)
	if !ok {
		t.Fatal("the socket's queue could not be read")
	}
	return n
}

// TestWatchPastItsBoundHoldsNoMore: a client that sends a mebibyte behind
// a request and stays makes a watch hold its bound and no more, in one
// watch or in two after one another, and look for the client's end once
// each time its socket becomes readable, never in a loop: a client that
// sends without end costs a look for each of its arrivals, and once its
// socket's buffers are full, nothing. stop ends the wait at once, and a
// reset of the connection then is noticed.
func TestWatchPastItsBoundHoldsNoMore(t *testing.T) {
	t.Parallel()
	cc, sc := tcpPair(t)
	var looks atomic.Int64
	ec := &conn{Conn: rawconn.Wrap(countedSocket{sc, &looks})}
	sent := pattern(1 << 20)
	gone, stop := ec.watch(true)
	wrote := make(chan error, 1)
	go func() {
		_, err := cc.Write(sent) // blocks once the buffers are full
		wrote <- err
	}()
	// The watch holds what it read; the server's socket has the next
	// bytes, and the client some of the rest, which there is no room for.
	waitFor(t, "past the bound: bytes left in both sockets", func() bool {
		return queued(t, sc, rawconn.Unread) > 0 && queued(t, cc, rawconn.Unacked) > 0
	})
	// Time for a watch that looks in a loop to show it in its count (the
	// count is checked below, never the time).
	time.Sleep(50 * time.Millisecond)
	if closed(gone) {
		t.Fatal("the watch took a client that is still there for gone")
	}
	waittest.Returns(t, "the stop of a watch past its bound", func() struct{} { stop(); return struct{}{} })
	if len(ec.pre) != maxWatchBytes || !bytes.Equal(ec.pre, sent[:maxWatchBytes]) {
		t.Fatalf("the watch holds %d bytes, want the first %d sent", len(ec.pre), maxWatchBytes)
	}

	// A second watch before the engine reads: the connection holds its
	// bound already, so it reads nothing, and looks.
	gone, stop = ec.watch(true)
	if err := cc.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := cc.Close(); err != nil { // a reset: the client's end, despite full buffers
		t.Fatal(err)
	}
	if err := <-wrote; err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err) // the write ends, whole (its socket took the rest) or cut by the close
	}
	waitFor(t, "noticed: the client reset its connection, with the watch's bound held and more behind", func() bool { return closed(gone) })
	stop()
	if len(ec.pre) != maxWatchBytes || !bytes.Equal(ec.pre, sent[:maxWatchBytes]) {
		t.Fatalf("after a second watch the connection holds %d bytes, want the first %d sent", len(ec.pre), maxWatchBytes)
	}
	// One look per KiB sent is far more than its arrivals make (a
	// watch that looks in a loop makes thousands a millisecond).
	n := looks.Load()
	t.Logf("%d looks", n)
	if n > int64(len(sent)>>10) {
		t.Fatalf("the watches looked %d times for %d bytes sent: they look without waiting", n, len(sent))
	}
}
