package statsd

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// server is a statsd server on loopback that collects the lines it gets.
type server struct {
	ln    net.Listener
	lines chan string
	mu    sync.Mutex // guards conns
	conns []net.Conn
}

// stop closes the listener and every connection, as a server that ends.
func (s *server) stop() {
	s.ln.Close()
	s.dropConns()
}

// dropConns closes every connection the server accepted.
func (s *server) dropConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

func listen(t *testing.T, addr string) *server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, lines: make(chan string, 1000)}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, conn)
			s.mu.Unlock()
			go func() {
				defer conn.Close()
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					s.lines <- sc.Text()
				}
			}()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *server) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-s.lines:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no line within 10s")
		return ""
	}
}

func TestClientSendsLinesOverTCP(t *testing.T) {
	t.Parallel()
	s := listen(t, "127.0.0.1:0")
	c, err := New(Options{Addr: s.ln.Addr().String(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Counter("a.b", 3)
	c.Gauge("g", 0)
	c.Timer("t", 12)
	c.Timer("t", 1.5)
	c.Flush()
	for _, want := range []string{"a.b:3|c", "g:0|g", "t:12|ms", "t:1.500000|ms"} {
		if got := s.next(t); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// TestClientReconnects: when the server drops the connection, lines given
// afterwards reach it again over a new one.
func TestClientReconnects(t *testing.T) {
	t.Parallel()
	s := listen(t, "127.0.0.1:0")
	c, err := New(Options{Addr: s.ln.Addr().String(), FlushInterval: 20 * time.Millisecond, RetryInterval: 50 * time.Millisecond, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Counter("first", 1)
	if got := s.next(t); got != "first:1|c" {
		t.Fatalf("%q", got)
	}
	s.dropConns()
	// Lines sent into the closed connection before its end is known are
	// lost, as with any statsd client over TCP; the next ones go over a
	// new connection.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.Counter("later", 2)
		select {
		case l := <-s.lines:
			if l != "later:2|c" {
				t.Fatalf("%q", l)
			}
			s.mu.Lock()
			n := len(s.conns)
			s.mu.Unlock()
			if n < 2 {
				t.Fatalf("a line over %d connections", n)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatal("no line reached the server")
}

// TestClientBoundsItsBuffer: with no server, lines past MaxBuffer are
// dropped and counted, and Flush returns.
func TestClientBoundsItsBuffer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there
	c, err := New(Options{Addr: addr, MaxBuffer: 100, FlushInterval: time.Hour, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 20 {
		c.Counter("name", 1) // 11 bytes a line
	}
	start := time.Now()
	c.Flush()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Flush took %v", d)
	}
	if n := c.Dropped(); n != 9 {
		t.Errorf("dropped %d lines, want 9 (11 of 9 bytes fit in 100)", n)
	}
}

func TestClientSendsWholeLinesOverUDP(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c, err := New(Options{Network: "udp", Addr: pc.LocalAddr().String(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := strings.Repeat("x", 100)
	for range 30 {
		c.Counter(name, 1)
	}
	c.Flush()
	got := 0
	buf := make([]byte, 64<<10)
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for got < 30 {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %d lines: %v", got, err)
		}
		if n > datagramSize {
			t.Errorf("datagram of %d bytes", n)
		}
		for _, l := range strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n") {
			if l != name+":1|c" {
				t.Fatalf("line %q", l)
			}
			got++
		}
	}
}

// A line costs no allocation of its own once the buffer has room: the
// rate-limit service adds a timer for every gRPC call.
func TestLinesDoNotAllocate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there
	c, err := New(Options{Addr: addr, MaxBuffer: 1 << 20, FlushInterval: time.Hour, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.mu.Lock()
	c.buf = make([]byte, 0, 1<<20)
	c.mu.Unlock()
	allocs := testing.AllocsPerRun(100, func() {
		c.Timer("ratelimit_server.ShouldRateLimit.response_time", 3)
		c.Timer("ratelimit_server.ShouldRateLimit.response_time", 2.5)
		c.Counter("ratelimit.service.rate_limit.d.user.total_hits", 12345678901234)
		c.Gauge("ratelimit.go.numGoroutines", 7)
	})
	if allocs != 0 {
		t.Errorf("%v allocations for four lines, want 0", allocs)
	}
	got := string(c.take())
	if want := "ratelimit_server.ShouldRateLimit.response_time:3|ms\nratelimit_server.ShouldRateLimit.response_time:2.500000|ms\n" +
		"ratelimit.service.rate_limit.d.user.total_hits:12345678901234|c\nratelimit.go.numGoroutines:7|g\n"; !strings.HasPrefix(got, want) {
		t.Errorf("lines:\n%.300s\nwant first:\n%s", got, want)
	}
}
