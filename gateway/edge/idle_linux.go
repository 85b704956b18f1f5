//go:build linux

package edge

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// idleSet holds parked connections (over TCP, plain or TLS) without a
// goroutine each: their sockets wait in an epoll set of the parker's own,
// each until its next request's first bytes (or its end) come or its idle
// time ends, and one goroutine (wait) hands the connections that woke to
// goroutines of their own. A goroutine waiting in a read costs a parked
// connection about 3 KiB (its stack and its state); in the set it costs
// the connection's state alone, without its head buffer.
type idleSet struct {
	ep   int // the epoll descriptor
	wake int // an eventfd that ends wait (closeAll)

	// resume is called, on a goroutine of its own, with each connection
	// whose next request began or that ended; expire with each whose idle
	// time ended (expireDue). Both are out of the set by then.
	resume, expire func(*conn)

	mu     sync.Mutex // guards conns, seq, closed and the conns' park fields
	conns  map[int32]*conn
	seq    uint32
	closed bool
	done   chan struct{} // closed when wait returned
}

// wakeData marks the eventfd's events: no socket has a negative descriptor.
const wakeData = -1

// newIdleSet opens an idle set and starts its wait (idleSet.resume and
// expire say what resume and expire are for).
func newIdleSet(resume, expire func(*conn)) (*idleSet, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("gateway: edge: idle set: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("gateway: edge: idle set: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeData}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(wake)
		unix.Close(ep)
		return nil, fmt.Errorf("gateway: edge: idle set: %w", err)
	}
	s := &idleSet{ep: ep, wake: wake, resume: resume, expire: expire, conns: map[int32]*conn{}, done: make(chan struct{})}
	go s.wait()
	return s, nil
}

// hold adds c to the set, until the first of: bytes or the end come on
// it (resume), its read deadline passes (expireDue), or the set closes
// (closeAll). A held connection gives its head buffer back. It reports
// false, leaving c alone, when c is not over TCP or the set is closed.
//
// A TLS connection is held as a plain one: the wait that was cut to park
// it returned nothing, so its TLS layer holds no bytes it could give (at
// most the start of a record, whose rest the socket has yet to receive,
// which wakes the set).
func (s *idleSet) hold(c *conn) bool {
	fd := plainFD(c.Conn)
	if fd < 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.seq++
	seq := s.seq
	// One shot: the first event takes the connection out of the set's
	// waits; it is then removed before anything else is done with it.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(fd), Pad: int32(seq)}
	if err := unix.EpollCtl(s.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return false
	}
	c.parkFD, c.parkSeq, c.parkUntil = int32(fd), seq, 0
	if !c.want.IsZero() {
		c.parkUntil = c.want.UnixNano()
	}
	s.conns[int32(fd)] = c
	c.dropHead() // taken again when it wakes
	return true
}

// expireDue removes from the set the connections whose idle time ended
// at now and hands them to expire. The parker calls it at each of its
// ticks: an idle connection is closed at most a tick after its time.
func (s *idleSet) expireDue(now time.Time) {
	t := now.UnixNano()
	var due []*conn
	s.mu.Lock()
	for _, c := range s.conns {
		if c.parkUntil != 0 && c.parkUntil <= t {
			due = append(due, c)
		}
	}
	for _, c := range due {
		s.drop(c)
	}
	s.mu.Unlock()
	for _, c := range due {
		s.expire(c)
	}
}

// take removes from the set the connection held on fd under seq and
// returns it; nil when it is no longer there (taken before, or its
// descriptor reused since).
func (s *idleSet) take(fd int32, seq uint32) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conns[fd]
	if c == nil || c.parkSeq != seq {
		return nil
	}
	s.drop(c)
	return c
}

// drop removes c from the set; s.mu is held.
func (s *idleSet) drop(c *conn) {
	delete(s.conns, c.parkFD)
	// The descriptor is still c's (it is closed only after this).
	_ = unix.EpollCtl(s.ep, unix.EPOLL_CTL_DEL, int(c.parkFD), nil)
	c.parkFD, c.parkSeq, c.parkUntil = -1, 0, 0
}

// wait hands on the connections the set's events name until the set
// closes.
func (s *idleSet) wait() {
	defer close(s.done)
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(s.ep, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// Not expected of a valid epoll descriptor: the set can no
			// longer wait, so it lets its connections go as if each had
			// woken (their reads find what there is, or wait under their
			// deadlines), and takes no more.
			s.mu.Lock()
			s.closed = true
			var all []*conn
			for _, c := range s.conns {
				all = append(all, c)
			}
			for _, c := range all {
				s.drop(c)
			}
			s.mu.Unlock()
			for _, c := range all {
				go s.resume(c)
			}
			return
		}
		for _, ev := range events[:n] {
			if ev.Fd == wakeData {
				s.mu.Lock()
				closed := s.closed
				s.mu.Unlock()
				if closed {
					return
				}
				continue
			}
			if c := s.take(ev.Fd, uint32(ev.Pad)); c != nil {
				go s.resume(c)
			}
		}
	}
}

// closeAll closes the set: its wait ends, and the connections it held
// are removed from it and returned (for the caller to close).
func (s *idleSet) closeAll() []*conn {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	all := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		all = append(all, c)
	}
	for _, c := range all {
		s.drop(c)
	}
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	_, _ = unix.Write(s.wake, one)
	s.mu.Unlock()
	<-s.done
	unix.Close(s.wake)
	unix.Close(s.ep)
	return all
}

// held reports how many connections the set holds.
func (s *idleSet) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// plainFD returns the socket descriptor of a TCP connection, plain or
// under TLS (through wrappers that pass its bytes unchanged), -1 for
// another kind.
func plainFD(c net.Conn) int {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	for range 4 {
		p, ok := c.(rawconn.Plain)
		if !ok {
			break
		}
		c = p.PlainConn()
	}
	if _, ok := c.(*net.TCPConn); !ok {
		return -1
	}
	return fdOf(c)
}
