package app

import (
	"bufio"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestShedConnectionsClosedBeforeTheNextAccept: a connection past a
// listener's bound is answered and closed before Accept takes the next
// one, so that a burst past the bound never holds descriptors beyond it,
// however long the process waits for a CPU. Before, each was answered on
// a goroutine of its own: on a busy machine the accept loop took hundreds
// of them before any ran, and a flood of 400 connections to the check API
// (bound 64) ran a process with 256 open files out of descriptors.
func TestShedConnectionsClosedBeforeTheNextAccept(t *testing.T) {
	// One CPU, as a process gets when others take the rest: a goroutine
	// started by the accept loop waits until the loop blocks.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	const past = 50
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	// The bound's one connection, then past more, all accepted by the
	// kernel before the limit sees them.
	var accepted []net.Conn
	for range past + 2 {
		c, err := net.DialTimeout("tcp", real.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		s, err := real.Accept()
		if err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, s)
	}
	src := &sliceListener{Listener: real, conns: accepted}
	l := newConnLimit(src, 1)
	held, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// The listener gives the last connection only once the held one
	// is closed, so Accept returns it within the bound after shedding
	// the others.
	src.before = map[int]func(){past + 1: func() { held.Close() }}
	last, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer last.Close()
	if n := src.closed.Load() - 1; n != past { // and the held one
		t.Fatalf("%d of the %d connections past the bound closed when Accept returned the next; want all", n, past)
	}
	if got := l.shed.Load(); got != past {
		t.Errorf("shed %d, want %d", got, past)
	}
	// Each was told why.
	for i, c := range clients[1 : past+1] {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d past the bound: %v; want 503", i+2, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("connection %d past the bound: %d, want 503", i+2, resp.StatusCode)
		}
	}
}

// sliceListener hands out conns in order, running before[i] before the
// i-th, and records how many of them were closed.
type sliceListener struct {
	net.Listener
	conns  []net.Conn
	next   int
	before map[int]func()
	closed atomic.Int64
}

func (l *sliceListener) Accept() (net.Conn, error) {
	if l.next >= len(l.conns) {
		return nil, net.ErrClosed
	}
	if f := l.before[l.next]; f != nil {
		f()
	}
	c := &closeCounted{Conn: l.conns[l.next], n: &l.closed}
	l.next++
	return c, nil
}

// closeCounted counts its first Close.
type closeCounted struct {
	net.Conn
	n    *atomic.Int64
	done atomic.Bool
}

func (c *closeCounted) Close() error {
	if !c.done.Swap(true) {
		c.n.Add(1)
	}
	return c.Conn.Close()
}

// CloseWrite passes a half close on to the connection.
func (c *closeCounted) CloseWrite() error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}
