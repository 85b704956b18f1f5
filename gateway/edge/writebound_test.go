package edge

import (
	"net"
	"testing"
	"time"
)

// deadlineConn records the write deadlines set on it.
type deadlineConn struct {
	benchConn
	set []time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

// TestWriteBound: a connection's write deadline is moved to the send
// bound from now when less than half of it is left (on the parker's clock
// where the bound is long beside its sweeps, which may be a sweep behind),
// is never left in the past for a write, never passes the deadline fasthttp
// asks for (server.timeouts.write), and is dropped at a hand-over.
func TestWriteBound(t *testing.T) {
	const every = time.Second
	const send = 60 * time.Second
	p := newParker(nil, every)
	rc := &deadlineConn{benchConn: benchConn{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}}}
	c := &conn{Conn: rc, send: int64(send), p: p}

	left := func() time.Duration { return time.Until(c.wSet) }
	c.boundWrite()
	if len(rc.set) != 1 || left() < send-time.Second || left() > send {
		t.Fatalf("first write: deadlines %v, %v left; want one, about %v away", rc.set, left(), send)
	}
	// Requests within half the bound move nothing.
	for range 1000 {
		c.boundWrite()
	}
	if len(rc.set) != 1 {
		t.Fatalf("a busy connection moved its write deadline %d times, want once", len(rc.set))
	}
	// The parker's clock runs on: past half the bound (allowing for a
	// sweep behind) the deadline moves, and is again the bound away.
	p.now.Store(monoNow() + int64(send/2))
	c.boundWrite()
	if len(rc.set) != 2 {
		t.Fatalf("half the bound gone on the parker's clock: deadlines %v, want a second", rc.set)
	}
	// A real clock that ran past the deadline (a connection idle for
	// longer than the bound, the parker's clock caught up): the next
	// write's deadline is never in the past.
	c.wBy = monoNow() - int64(time.Minute)
	p.now.Store(monoNow())
	c.boundWrite()
	if left() < send-time.Second {
		t.Fatalf("after an idle time past the bound: %v left for the write, want about %v", left(), send)
	}

	// fasthttp's own write deadline (server.timeouts.write) when earlier
	// is set at once and never passed; a later one, or none, leaves the
	// bound's.
	n := len(rc.set)
	_ = c.SetWriteDeadline(time.Now().Add(time.Hour))
	_ = c.SetWriteDeadline(time.Time{})
	if len(rc.set) != n {
		t.Fatalf("a later asked deadline moved the bound's: %v", rc.set[n:])
	}
	early := time.Now().Add(5 * time.Second)
	_ = c.SetWriteDeadline(early)
	if !c.wSet.Equal(early) {
		t.Fatalf("an earlier asked deadline: in force %v, want %v", c.wSet, early)
	}
	c.wBy = 0
	c.boundWrite()
	if !c.wSet.Equal(early) {
		t.Fatalf("the bound moved past the asked deadline: %v, want %v", c.wSet, early)
	}

	// Handed over to net/http: its deadlines are its own.
	_ = c.SetWriteDeadline(time.Time{})
	c.unboundWrite()
	if !c.wSet.IsZero() || !rc.set[len(rc.set)-1].IsZero() || c.send != 0 {
		t.Fatalf("after the hand-over: in force %v, last set %v, bound %d; want none", c.wSet, rc.set[len(rc.set)-1], c.send)
	}
	c.boundWrite()
	later := time.Now().Add(time.Hour)
	_ = c.SetWriteDeadline(later)
	if !rc.set[len(rc.set)-1].Equal(later) {
		t.Fatalf("net/http's deadline after the hand-over not set: %v", rc.set[len(rc.set)-1])
	}

	// A short bound is kept on the monotonic clock.
	short := &conn{Conn: rc, send: int64(300 * time.Millisecond), p: p}
	short.boundWrite()
	if d := time.Until(short.wSet); d > 300*time.Millisecond || d < 200*time.Millisecond {
		t.Fatalf("a bound of 300ms: %v left", d)
	}
}
