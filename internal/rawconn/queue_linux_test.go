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
// through a TLS connection too, and Unacked reaches zero once the other
// end's kernel took what was written; a connection with no socket under
// it cannot tell.
func TestQueues(t *testing.T) {
	t.Parallel()
	client, server := endPair(t)
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
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok := Unread(a); ok {
		t.Error("Unread told a pipe's queue")
	}
	if _, ok := Unacked(a); ok {
		t.Error("Unacked told a pipe's queue")
	}
}
