package h2guard

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// pair returns the two ends of a loopback TCP connection: the client's,
// and an HTTP/2 framer on it, and the server's as a Conn of New's (its
// preface read) whose cuts cuts counts. Their buffers hold the least the
// kernel allows.
func pair(t *testing.T, cuts *Cuts) (net.Conn, *http2.Framer, *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(1)
	_ = s.(*net.TCPConn).SetWriteBuffer(1)
	return c, http2.NewFramer(c, c), New(s, PrefaceRead, cuts)
}

// readUntilCut reads g in the background until its Read fails and
// returns that error, or fails t once 10 s passed.
func readUntilCut(t *testing.T, g *Conn) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := g.Read(buf); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the connection's Read still runs 10 s after the flood")
		return nil
	}
}

// TestDataOnAStreamEndedIsChargedWhenRead: DATA frames on a stream the
// client ended spend the budget as they are read, before the server
// refuses any, so a server whose writes lag its reads, or that has not
// written at all, cuts the flood all the same. Before, they were charged
// only as the server wrote its refusals: net/http, its writes lagging,
// read on, queued 10,000 refusals and closed the connection itself, no
// cut counted.
func TestDataOnAStreamEndedIsChargedWhenRead(t *testing.T) {
	cuts := &Cuts{}
	_, fr, g := pair(t, cuts)
	// No answer at all from the server's side: its refusals all still to
	// be written.
	go func() {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}, EndHeaders: true, EndStream: true})
		for range 2 * Burst {
			if fr.WriteData(1, false, []byte{0}) != nil {
				return
			}
		}
	}()
	_ = g.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := readUntilCut(t, g); !errors.Is(err, ErrCalm) {
		t.Fatalf("%d DATA frames on a stream ended: Read ended with %v, not ErrCalm", 2*Burst, err)
	}
	count(t, cuts, KindRefusedStream, 1)
}

// TestCutWhileAWriteWaits: a client cut while the server's write to it
// waits (it reads nothing) is cut, its Read failing and its cut counted,
// once that write gives way within a second. Before, the cut waited for
// the write, for as long as the client kept its connection.
func TestCutWhileAWriteWaits(t *testing.T) {
	cuts := &Cuts{}
	c, fr, g := pair(t, cuts)
	go func() {
		// Frames that carry nothing, 1 MiB of them: past any buffer.
		_, _ = g.Write(make([]byte, 1<<20))
	}()
	// The write has begun: the client reads nothing more of it.
	if _, err := io.ReadFull(c, make([]byte, frameHeaderLength)); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = fr.WriteSettings()
		for i := range 2 * Burst {
			if fr.WritePing(false, [8]byte{byte(i)}) != nil {
				return
			}
		}
	}()
	if err := readUntilCut(t, g); !errors.Is(err, ErrCalm) {
		t.Fatalf("Read ended with %v, not ErrCalm", err)
	}
	count(t, cuts, KindPing, 1)
}
