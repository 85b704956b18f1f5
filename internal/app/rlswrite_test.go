package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/rls"
)

// TestRLSJSONClientThatNeverReadsIsCut: floodgate rls's HTTP listener
// (/json) closes the connection of a client that sends requests and never
// reads their answers once a write to it has waited rls.DefaultWriteTimeout,
// as its gRPC listener does. Without the bound such a client held its
// connection, its place under the listener's cap, a goroutine and the
// answers queued on it for as long as it stayed connected.
func TestRLSJSONClientThatNeverReadsIsCut(t *testing.T) {
	addrs := startCappedRLS(t, rlsConns{})
	c := dialTCP(t, addrs["HTTP"])
	defer c.Close()
	// A small receive buffer: the server's answers stop being taken after
	// a few of them.
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	// 60 descriptors a request: each answer is a few KiB.
	var descs []string
	for i := range 60 {
		descs = append(descs, fmt.Sprintf(`{"entries":[{"key":"client","value":"c%d"}]}`, i))
	}
	body := `{"domain":"shop","descriptors":[` + strings.Join(descs, ",") + `]}`
	one := []byte(fmt.Sprintf("POST /json HTTP/1.1\r\nHost: rls\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	var batch []byte
	for range 64 {
		batch = append(batch, one...)
	}
	// Pipeline requests until the server stops taking them (its answers
	// are stuck), or 64 MiB of them.
	sent := 0
	for sent < 64<<20 {
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Write(batch)
		sent += n
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("after %d bytes of requests: %v", sent, err)
			}
			break
		}
	}
	// The server closes the connection within the bound: with requests
	// left unread on it, the close resets it, and a write fails with
	// something other than its deadline.
	bound := rls.DefaultWriteTimeout + 30*time.Second
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Write(one)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return // closed by the server
		}
		if time.Since(start) > bound {
			t.Fatalf("%v after a client sent %d bytes of requests and read none of their answers, the server still holds its connection (write bound %v)",
				bound, sent, rls.DefaultWriteTimeout)
		}
	}
}
