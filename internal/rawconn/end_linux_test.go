//go:build linux

package rawconn

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// endPair returns the two ends of a loopback TCP connection (tcpPair),
// each with a deadline that fails a test that blocks.
func endPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	server, client = tcpPair(t)
	_ = client.SetDeadline(time.Now().Add(time.Minute))
	_ = server.SetDeadline(time.Now().Add(time.Minute))
	return client, server
}

// within fails the test when ch is not closed within a minute: a bound
// on a hang, not a measure.
func within(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestWatchEndNoticesAnEndBehindBytes: a peer that sends bytes nobody
// reads and then closes its connection (or only shuts its side down) is
// noticed leaving, while another goroutine holds the connection's reads
// (as net/http's background read does, here stopped after one byte, as
// it stops); the bytes stay in the connection, in order, for its reader.
func TestWatchEndNoticesAnEndBehindBytes(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"close", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			client, server := endPair(t)
			first := make(chan byte, 1)
			go func() { // the connection's own reader, blocked as the watch begins
				var b [1]byte
				_, _ = server.Read(b[:])
				first <- b[0]
			}()
			gone := make(chan struct{})
			stop := WatchEnd(server, func() { close(gone) })
			if stop == nil {
				t.Fatal("WatchEnd found no socket under a TCP connection")
			}
			sent := bytes.Repeat([]byte("0123456789abcdef"), 1<<10)
			if _, err := client.Write(sent); err != nil {
				t.Fatal(err)
			}
			if how == "close" {
				_ = client.Close()
			} else if err := client.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			within(t, "the watch to notice the peer's end", gone)
			stop()
			got := []byte{<-first}
			rest, err := io.ReadAll(server)
			if err != nil {
				t.Fatal(err)
			}
			if got = append(got, rest...); !bytes.Equal(got, sent) {
				t.Fatalf("the connection read %d bytes after the watch, want the %d sent, in order", len(got), len(sent))
			}
		})
	}
}

// TestWatchEndStopLeavesTheConnection: a peer that sends bytes and stays
// is not noticed leaving; stop returns, and the connection is as it was:
// its bytes, its deadlines and its writes are its own.
func TestWatchEndStopLeavesTheConnection(t *testing.T) {
	t.Parallel()
	client, server := endPair(t)
	gone := make(chan struct{})
	stop := WatchEnd(server, func() { close(gone) })
	if stop == nil {
		t.Fatal("WatchEnd found no socket under a TCP connection")
	}
	if _, err := io.WriteString(client, "GET /next HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	within(t, "stop to return", stopped)
	select {
	case <-gone:
		t.Fatal("a peer that stays was noticed leaving")
	default:
	}
	// The bytes are the connection's, and it reads and writes as before.
	got := make([]byte, len("GET /next HTTP/1.1\r\n"))
	if _, err := io.ReadFull(server, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != "GET /next HTTP/1.1\r\n" {
		t.Fatalf("the connection read %q after the watch", got)
	}
	if _, err := io.WriteString(server, "ok"); err != nil {
		t.Fatalf("the connection was closed with its watch: %v", err)
	}
	back := make([]byte, 2)
	if _, err := io.ReadFull(client, back); err != nil || string(back) != "ok" {
		t.Fatalf("the peer read %q, %v", back, err)
	}
}

// TestWatchEndOnlySockets: a connection with no socket under it is not
// watched; one under TLS, or behind a wrapper that passes its bytes
// unchanged, has its socket found.
func TestWatchEndOnlySockets(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if stop := WatchEnd(a, func() {}); stop != nil {
		stop()
		t.Fatal("WatchEnd watched a connection with no socket")
	}
	_, server := endPair(t)
	if SocketOf(tls.Server(server, &tls.Config{})) == nil {
		t.Error("SocketOf found no socket under TLS")
	}
	if SocketOf(limited{server}) == nil {
		t.Error("SocketOf found no socket behind a Plain wrapper")
	}
}
