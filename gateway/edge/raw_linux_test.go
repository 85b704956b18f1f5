//go:build linux

package edge

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/rawconn"
	"github.com/floodgate/floodgate/internal/upstreamtest"
)

// limited passes its connection's bytes unchanged, as a limit on open
// connections does (rawconn.Plain).
type limited struct{ net.Conn }

func (l limited) PlainConn() net.Conn { return l.Conn }

// TestEngineReadsAndWritesRaw: the edge engine reads and writes the
// clients' connections (behind a connection limit, as floodgate serve
// accepts them) and its upstream connections with raw system calls.
func TestEngineReadsAndWritesRaw(t *testing.T) {
	t.Parallel()
	g := echoGateway(t, echoPath, "")
	e := New(g, Options{ParkIdleAfter: time.Minute})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := serveListener(t, e, limitedListener{ln})
	defer stop()
	c, br := dial(t, ln.Addr().String())
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: gateway.example\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(br, nil)
	answered(t, "the request", res, err, "up /a")

	e.parker.mu.Lock()
	clients, raw := 0, 0
	for ec := range e.parker.conns {
		clients++
		if rc, ok := ec.Conn.(*rawconn.Conn); ok && rc.Raw() != nil {
			raw++
		}
	}
	e.parker.mu.Unlock()
	if clients != 1 || raw != 1 {
		t.Fatalf("%d of %d client connections read and written raw, want 1 of 1", raw, clients)
	}
	ups := 0
	e.ups.Range(func(_, v any) bool {
		ups++
		cc, err := v.(*upstream).hc.AcquireConn(0, false)
		if err != nil {
			t.Fatal(err)
		}
		u := connOf(cc.Conn())
		if u == nil {
			t.Fatalf("the upstream connection is a %T", cc.Conn())
		}
		if rc, ok := u.Conn.(*rawconn.Conn); !ok || rc.Raw() == nil || !strings.HasPrefix(u.RemoteAddr().String(), "127.0.0.1:") {
			t.Fatalf("the upstream connection is not read and written raw: %+v", u)
		}
		v.(*upstream).hc.ReleaseConn(cc)
		return true
	})
	if ups != 1 {
		t.Fatalf("%d upstreams, want 1", ups)
	}
}

// limitedListener accepts connections wrapped as a connection limit wraps
// them.
type limitedListener struct{ net.Listener }

func (l limitedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return limited{c}, nil
}

// countingListener's connections count their writes. They are not Plain,
// so the engine writes through them rather than raw.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestStreamedHeadWithItsBody: a chunked answer whose body came with its
// head (a small one, written by the upstream at once) reaches the client
// in two writes, its head with its first chunk and then the last chunk,
// not in a write of the head alone first; the head goes out alone only
// when the body has not come (TestStreamedAnswerHeadAtOnce in package
// gateway).
func TestStreamedHeadWithItsBody(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Raw(t, func(c net.Conn, _ *http.Request) bool {
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
		return err == nil
	})
	g := policyGateway(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: http://`+up+`}
`)
	e := New(g, Options{ParkIdleAfter: time.Minute})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	stop := serveListener(t, e, countingListener{ln, &writes})
	defer stop()
	c, br := dial(t, ln.Addr().String())
	for i := range 3 {
		before := writes.Load()
		if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: gateway.example\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		answered(t, "a small chunked answer", res, err, "hello")
		if got := writes.Load() - before; got > 2 {
			t.Fatalf("request %d: a chunked answer that came whole took %d writes to the client, want 2 (the head with the first chunk, then the last)", i+1, got)
		}
	}
}
