//go:build linux

package rawconn

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection, closed with
// the test.
func tcpPair(t *testing.T) (server, client *net.TCPConn) {
	t.Helper()
	s, c := connPair(t, "tcp", "127.0.0.1:0")
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

// connPair returns the two ends of a connection of network to a listener
// on address, closed with the test.
func connPair(t *testing.T, network, address string) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); c.Close() })
	return s, c
}

// limited passes its connection's bytes unchanged, as a limit on open
// connections does.
type limited struct{ net.Conn }

func (l limited) PlainConn() net.Conn { return l.Conn }

// rawRW is the read and write of a rawIO, as functions.
type rawRW struct {
	name  string
	read  func(c *net.TCPConn, b []byte) (int, error)
	write func(c *net.TCPConn, b []byte) (int, error)
}

func rawAndNet(t *testing.T) []rawRW {
	raw := func(c *net.TCPConn) *IO {
		t.Helper()
		r := Of(limited{c})
		if r == nil {
			t.Fatal("no raw path for a TCP connection behind a connection limit")
		}
		return r
	}
	return []rawRW{
		{"net.Conn",
			func(c *net.TCPConn, b []byte) (int, error) { return c.Read(b) },
			func(c *net.TCPConn, b []byte) (int, error) { return c.Write(b) }},
		{"raw",
			func(c *net.TCPConn, b []byte) (int, error) { return raw(c).Read(b) },
			func(c *net.TCPConn, b []byte) (int, error) { return raw(c).Write(b) }},
	}
}

// bigBytes returns 8 MiB that differ from one 4 KiB to the next.
func bigBytes() []byte {
	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	for i := range big {
		big[i] += byte(i / 4096)
	}
	return big
}

// readSlowly reads n bytes from c, 64 KiB at a time with a pause after
// each, and returns their SHA-256 (of what came, when c ends first).
func readSlowly(c net.Conn, n int) [32]byte {
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for left := n; left > 0; {
		m, err := c.Read(buf[:min(len(buf), left)])
		h.Write(buf[:m])
		left -= m
		if err != nil {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// staleConn reports whether err says the other end reset the connection
// (or closed it), as a gateway tells a kept connection gone stale.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// opOf returns the operation an error names, "" for none.
func opOf(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Op
	}
	return ""
}

// TestRawAnswersAsNetConn: reading and writing a socket with raw system
// calls gives what net.Conn's Read and Write give, in every case the
// engine meets: bytes both ways, a write larger than the socket's buffers
// to a slow reader, nothing read and nothing written, each deadline, the
// other end closing or resetting, and the connection closed here.
func TestRawAnswersAsNetConn(t *testing.T) {
	t.Parallel()
	for _, rw := range rawAndNet(t) {
		t.Run(rw.name, func(t *testing.T) {
			t.Parallel()
			s, c := tcpPair(t)
			if n, err := rw.read(s, nil); n != 0 || err != nil {
				t.Fatalf("read of nothing: %d, %v", n, err)
			}
			if n, err := rw.write(s, nil); n != 0 || err != nil {
				t.Fatalf("write of nothing: %d, %v", n, err)
			}
			if _, err := c.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 64)
			if n, err := rw.read(s, b); err != nil || string(b[:n]) != "hello" {
				t.Fatalf("read %q, %v; want hello", b[:n], err)
			}

			// 8 MiB to a reader that takes 64 KiB at a time: the write
			// waits for room again and again, and every byte arrives in
			// order.
			big := bigBytes()
			got := make(chan [32]byte, 1)
			go func() { got <- readSlowly(c, len(big)) }()
			if n, err := rw.write(s, big); n != len(big) || err != nil {
				t.Fatalf("wrote %d of %d: %v", n, len(big), err)
			}
			if <-got != sha256.Sum256(big) {
				t.Fatal("the bytes that arrived are not those written")
			}

			// The read deadline.
			_ = s.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
			n, err := rw.read(s, b)
			if n != 0 || !isTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded) || opOf(err) != "read" {
				t.Fatalf("read past its deadline: %d, %v (op %q)", n, err, opOf(err))
			}
			_ = s.SetReadDeadline(time.Time{})

			// The write deadline, with the other end not reading.
			_ = s.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			n, err = rw.write(s, make([]byte, 64<<20))
			if n >= 64<<20 || !isTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded) || opOf(err) != "write" {
				t.Fatalf("write past its deadline: %d, %v (op %q)", n, err, opOf(err))
			}

			// The other end closes: the end of the stream (after what
			// it sent before).
			s2, c2 := tcpPair(t)
			_, _ = c2.Write([]byte("bye"))
			c2.Close()
			if n, err := rw.read(s2, b); err != nil || string(b[:n]) != "bye" {
				t.Fatalf("read %q, %v; want bye", b[:n], err)
			}
			if n, err := rw.read(s2, b); n != 0 || err != io.EOF {
				t.Fatalf("read after the other end closed: %d, %v; want io.EOF", n, err)
			}

			// The other end resets: an error that says a kept
			// connection went stale, reading and writing.
			s3, c3 := tcpPair(t)
			_ = c3.SetLinger(0)
			c3.Close()
			time.Sleep(20 * time.Millisecond)
			if _, err := rw.read(s3, b); !staleConn(err) || !errors.Is(err, syscall.ECONNRESET) || opOf(err) != "read" {
				t.Fatalf("read after a reset: %v (op %q)", err, opOf(err))
			}
			s4, c4 := tcpPair(t)
			_ = c4.SetLinger(0)
			c4.Close()
			time.Sleep(20 * time.Millisecond)
			_, err = rw.write(s4, []byte("x"))
			for i := 0; err == nil && i < 10; i++ {
				_, err = rw.write(s4, []byte("x")) // the reset may be learnt a write late
			}
			if !staleConn(err) || opOf(err) != "write" {
				t.Fatalf("write after a reset: %v (op %q)", err, opOf(err))
			}

			// Closed here.
			s.Close()
			if _, err := rw.read(s, b); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read of a closed connection: %v", err)
			}
			if _, err := rw.write(s, b); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("write of a closed connection: %v", err)
			}
		})
	}
}

// TestRawOnlyForPlainTCP: the raw path is taken for a TCP connection,
// bare or behind a wrapper that passes its bytes unchanged, and never for
// TLS or a connection without a socket.
func TestRawOnlyForPlainTCP(t *testing.T) {
	t.Parallel()
	s, c := tcpPair(t)
	if Of(s) == nil || Of(limited{s}) == nil {
		t.Fatal("no raw path for a TCP connection")
	}
	if Of(tls.Client(c, &tls.Config{})) != nil {
		t.Fatal("a raw path under TLS")
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if Of(p1) != nil || Of(limited{p1}) != nil {
		t.Fatal("a raw path for a connection without a socket")
	}

	// Wrapped, a TCP connection is read raw, any other through its own
	// methods, and both pass their bytes.
	w := Wrap(limited{s})
	if w.Raw() == nil || Of(w) == nil {
		t.Fatal("a wrapped TCP connection is not read raw")
	}
	if _, err := w.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	if n, err := c.Read(b); err != nil || string(b[:n]) != "ping" {
		t.Fatalf("read %q, %v", b[:n], err)
	}
	wp := Wrap(p1)
	if wp.Raw() != nil {
		t.Fatal("a wrapped pipe read raw")
	}
	go func() { _, _ = p2.Write([]byte("pong")) }()
	if n, err := wp.Read(b); err != nil || string(b[:n]) != "pong" {
		t.Fatalf("read %q through a wrapped pipe, %v", b[:n], err)
	}
}

// TestSendFirst: a request left for the next read (SendFirst) goes out
// before that read waits, and the read returns its answer: answers that
// come at once, hundreds of times, one that comes later, a request larger
// than the socket's buffers (the read finishes the send, every byte in
// order, then reads), bytes or the end already there (nothing is sent:
// ErrUnread), a send that fails (its error ends the read; it does not
// wait) and a read deadline while no answer comes.
func TestSendFirst(t *testing.T) {
	t.Parallel()
	s, c := tcpPair(t)
	r := Of(s)
	if r == nil {
		t.Fatal("no raw path for a TCP connection")
	}
	// The other end answers each 8-byte request at once with its bytes
	// upper-cased, and a request "later..." after 50 ms.
	go func() {
		req := make([]byte, 8)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			if string(req) == "later..." {
				time.Sleep(50 * time.Millisecond)
			}
			if _, err := c.Write(bytes.ToUpper(req)); err != nil {
				return
			}
		}
	}()
	b := make([]byte, 64)
	// One deadline for all: a wait that missed its answer ends there.
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range 500 {
		req := fmt.Appendf(nil, "req%05d", i)
		r.SendFirst(req)
		n, err := io.ReadFull(r, b[:8])
		if err != nil || !bytes.Equal(b[:n], bytes.ToUpper(req)) {
			t.Fatalf("exchange %d: read %q, %v; want %q", i, b[:n], err, bytes.ToUpper(req))
		}
	}
	r.SendFirst([]byte("later..."))
	if n, err := io.ReadFull(r, b[:8]); err != nil || string(b[:n]) != "LATER..." {
		t.Fatalf("an answer 50 ms later: %q, %v", b[:n], err)
	}
	_ = s.SetReadDeadline(time.Time{})

	// 8 MiB to a reader that takes 64 KiB at a time, then an answer.
	s2, c2 := tcpPair(t)
	r2 := Of(s2)
	big := bigBytes()
	go func() {
		sum := readSlowly(c2, len(big))
		_, _ = c2.Write(sum[:])
	}()
	r2.SendFirst(big)
	sum := make([]byte, 32)
	if _, err := io.ReadFull(r2, sum); err != nil {
		t.Fatalf("the answer to 8 MiB: %v", err)
	}
	if want := sha256.Sum256(big); !bytes.Equal(sum, want[:]) {
		t.Fatal("the bytes that arrived are not those sent")
	}

	// Bytes no request asked for, there before the read: nothing is sent,
	// the read says so, and the bytes are the next read's.
	s5, c5 := tcpPair(t)
	r5 := Of(s5)
	if _, err := c5.Write([]byte("unasked")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_ = s5.SetReadDeadline(time.Now().Add(10 * time.Second))
	r5.SendFirst([]byte("request"))
	if n, err := r5.Read(b); n != 0 || !errors.Is(err, ErrUnread) || r5.Unsent() != Bytes {
		t.Fatalf("a send over unread bytes: %d, %v, unsent %v", n, err, r5.Unsent())
	}
	if n, err := r5.Read(b); err != nil || string(b[:n]) != "unasked" {
		t.Fatalf("the bytes there before: %q, %v", b[:n], err)
	}
	r5.SendFirst([]byte("request"))
	if r5.Unsent() != Nothing {
		t.Fatal("a new SendFirst still says unsent")
	}
	_ = c5.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := c5.Read(b); !isTimeout(err) {
		t.Fatalf("the other end read %q, %v; want nothing sent", b[:n], err)
	}

	// The other end closed, or reset: nothing is sent either.
	for _, reset := range []bool{false, true} {
		s3, c3 := tcpPair(t)
		r3 := Of(s3)
		if reset {
			_ = c3.SetLinger(0)
		}
		c3.Close()
		time.Sleep(20 * time.Millisecond)
		_ = s3.SetReadDeadline(time.Now().Add(10 * time.Second))
		r3.SendFirst([]byte("x"))
		if n, err := r3.Read(b); n != 0 || !errors.Is(err, ErrUnread) || r3.Unsent() != End {
			t.Fatalf("a send after the other end's close (reset %v): %d, %v", reset, n, err)
		}
	}

	// The send fails (this end shut its writing down): the send's error,
	// a write's, ends the read.
	s6, _ := tcpPair(t)
	r6 := Of(s6)
	_ = s6.CloseWrite()
	_ = s6.SetReadDeadline(time.Now().Add(10 * time.Second))
	r6.SendFirst([]byte("x"))
	if _, err := r6.Read(b); !errors.Is(err, syscall.EPIPE) || opOf(err) != "write" || r6.Unsent() != Nothing {
		t.Fatalf("a send that fails: %v (op %q)", err, opOf(err))
	}

	// No answer: the read's deadline ends the wait after the send.
	s4, c4 := tcpPair(t)
	r4 := Of(s4)
	_ = s4.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	r4.SendFirst([]byte("silence"))
	if n, err := r4.Read(b); n != 0 || !isTimeout(err) || opOf(err) != "read" {
		t.Fatalf("a send nobody answers: %d, %v (op %q)", n, err, opOf(err))
	}
	_ = c4.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := io.ReadFull(c4, b[:7]); err != nil || string(b[:n]) != "silence" {
		t.Fatalf("the other end read %q, %v; want the request sent", b[:n], err)
	}
}

// unixPair returns the two ends of a Unix connection of the given network
// ("unix" or "unixpacket"), closed with the test.
func unixPair(t *testing.T, network string) (server, client *net.UnixConn) {
	t.Helper()
	s, c := connPair(t, network, t.TempDir()+"/s.sock")
	return s.(*net.UnixConn), c.(*net.UnixConn)
}

// TestRawUnixStream: a Unix stream connection is read and written raw, as
// net.Conn reads and writes it (bytes both ways, a write larger than the
// socket's buffers to a slow reader, each deadline, the other end gone,
// the connection closed here, errors named as net names them); a
// sequenced-packet one, whose reads keep the bounds of its messages, is
// left to net.
func TestRawUnixStream(t *testing.T) {
	t.Parallel()
	if p, _ := unixPair(t, "unixpacket"); Of(p) != nil || Wrap(p).Raw() != nil {
		t.Fatal("a raw path for a sequenced-packet Unix connection")
	}
	s, c := unixPair(t, "unix")
	r := Of(limited{s})
	if r == nil || Wrap(s).Raw() == nil {
		t.Fatal("no raw path for a Unix stream connection")
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	if n, err := r.Read(b); err != nil || string(b[:n]) != "hello" {
		t.Fatalf("read %q, %v; want hello", b[:n], err)
	}
	big := bigBytes()
	got := make(chan [32]byte, 1)
	go func() { got <- readSlowly(c, len(big)) }()
	if n, err := r.Write(big); n != len(big) || err != nil {
		t.Fatalf("wrote %d of %d: %v", n, len(big), err)
	}
	if <-got != sha256.Sum256(big) {
		t.Fatal("the bytes that arrived are not those written")
	}
	_ = s.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if n, err := r.Read(b); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) || opOf(err) != "read" {
		t.Fatalf("read past its deadline: %d, %v (op %q)", n, err, opOf(err))
	}
	_ = s.SetReadDeadline(time.Time{})
	_ = s.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := r.Write(make([]byte, 64<<20)); n >= 64<<20 || !errors.Is(err, os.ErrDeadlineExceeded) || opOf(err) != "write" {
		t.Fatalf("write past its deadline: %d, %v (op %q)", n, err, opOf(err))
	}
	_ = s.SetWriteDeadline(time.Time{})

	// A request sent by the read of its answer, as the Redis store's
	// connections are not, but any user of SendFirst may be.
	s2, c2 := unixPair(t, "unix")
	go func() {
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c2, buf); err == nil && string(buf) == "ping" {
			_, _ = c2.Write([]byte("pong"))
		}
	}()
	r2 := Of(s2)
	r2.SendFirst([]byte("ping"))
	if n, err := r2.Read(b); err != nil || string(b[:n]) != "pong" {
		t.Fatalf("the answer to a request sent first: %q, %v", b[:n], err)
	}

	// The other end leaves: the end of the stream after what it sent,
	// and then a write that says the connection is gone, named as net
	// names it.
	_, _ = c2.Write([]byte("bye"))
	c2.Close()
	if n, err := r2.Read(b); err != nil || string(b[:n]) != "bye" {
		t.Fatalf("read %q, %v; want bye", b[:n], err)
	}
	if n, err := r2.Read(b); n != 0 || err != io.EOF {
		t.Fatalf("read after the other end closed: %d, %v; want io.EOF", n, err)
	}
	_, err := r2.Write([]byte("x"))
	var oe *net.OpError
	if !staleConn(err) || !errors.As(err, &oe) || oe.Op != "write" || oe.Net != "unix" {
		t.Fatalf("write after the other end closed: %#v", err)
	}
	s.Close()
	if _, err := r.Read(b); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a closed connection: %v", err)
	}
	if _, err := r.Write(b); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write of a closed connection: %v", err)
	}
}

// TestConcurrentCallsStayWhole: as with net.Conn, goroutines may write to
// one connection at once, and read from it at once. Each write is larger
// than the socket's buffers, so it waits for room halfway (the moment
// another write could take over its state); every write still arrives
// whole and in one piece, and concurrent reads between them take every
// byte once. (The net/http transport writes a request while the reverse
// proxy's tunnel, given the connection by the answer, already writes to
// it.)
func TestConcurrentCallsStayWhole(t *testing.T) {
	t.Parallel()
	s, c := tcpPair(t)
	r := Of(s)
	const writers, size = 8, 1 << 20
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			n, err := r.Write(bytes.Repeat([]byte{byte('a' + w)}, size))
			if err == nil && n != size {
				err = fmt.Errorf("wrote %d of %d", n, size)
			}
			errs <- err
		}()
	}
	got := make([]byte, 0, writers*size)
	buf := make([]byte, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for len(got) < writers*size {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		time.Sleep(50 * time.Microsecond)
	}
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	seen := map[byte]bool{}
	for i := 0; i < len(got); i += size {
		run := got[i : i+size]
		if seen[run[0]] || bytes.Count(run, run[:1]) != size {
			t.Fatalf("the write at %d is not whole: it starts with %q and has %d of them", i, run[0], bytes.Count(run, run[:1]))
		}
		seen[run[0]] = true
	}

	// Reads at once: every byte sent is read once, by one of them.
	const readers, total = 8, 4 << 20
	sums := make(chan int, readers)
	for i := 0; i < readers; i++ {
		go func() {
			b, sum := make([]byte, 1500), 0
			for {
				n, err := r.Read(b)
				for _, x := range b[:n] {
					sum += int(x)
				}
				if err != nil {
					sums <- sum
					return
				}
			}
		}()
	}
	want := 0
	out := make([]byte, total)
	for i := range out {
		out[i] = byte(i * 7)
		want += int(out[i])
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	c.Close() // the readers end at the end of the stream
	sum := 0
	for i := 0; i < readers; i++ {
		sum += <-sums
	}
	if sum != want {
		t.Fatalf("the readers' bytes add up to %d, want %d", sum, want)
	}
}
