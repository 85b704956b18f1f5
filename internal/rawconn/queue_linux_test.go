//go:build linux

package rawconn

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// TestQueues: Unread counts the bytes a socket received and nobody read,
// through a TLS connection too, Received every byte it received, read or
// not, Connected says a connected socket is, and Unacked reaches zero once the other end's kernel took what was
// written; a connection with no socket under it cannot tell.
func TestQueues(t *testing.T) {
	t.Parallel()
	client, server := endPair(t)
	before, ok := Received(server)
	if !ok {
		t.Fatal("Received could not tell a TCP socket's count")
	}
	if yes, n, ok := Connected(SocketOf(server)); !yes || n != before || !ok {
		t.Fatalf("Connected: %v, %d, %v; want a connected socket that received %d", yes, n, ok, before)
	}
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for n, ok := Unacked(client); n != 0; n, ok = Unacked(client) {
		if !ok || time.Now().After(deadline) {
			t.Fatalf("Unacked: %d, %v; want 0 once delivered", n, ok)
		}
		time.Sleep(time.Millisecond)
	}
	if n, ok := Unread(server); n != 5 || !ok {
		t.Fatalf("Unread: %d, %v; want 5 bytes", n, ok)
	}
	if n, ok := Unread(tls.Server(server, &tls.Config{})); n != 5 || !ok {
		t.Fatalf("Unread through TLS: %d, %v; want the socket's 5 bytes", n, ok)
	}
	if _, err := io.ReadFull(server, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	if n, ok := Unread(server); n != 0 || !ok {
		t.Fatalf("Unread once read: %d, %v; want 0", n, ok)
	}
	if n, ok := Received(tls.Server(server, &tls.Config{})); n != before+5 || !ok {
		t.Fatalf("Received once read, through TLS: %d, %v; want %d", n, ok, before+5)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok := Unread(a); ok {
		t.Error("Unread told a pipe's queue")
	}
	if _, ok := Unacked(a); ok {
		t.Error("Unacked told a pipe's queue")
	}
	if _, ok := Received(a); ok {
		t.Error("Received told a pipe's count")
	}
	if _, _, ok := Connected(nil); ok {
		t.Error("Connected told no socket's state")
	}
}
