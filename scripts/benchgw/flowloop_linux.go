package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/floodgate/floodgate/gateway"
)

// flowLoop serves the gateway g on addr from event loops as loop429's (one
// per GOMAXPROCS, each on a locked thread with its own epoll set and
// listening socket), reading each request's head as the edge engine's
// front does (package plainhead: the field lines kept as offsets into the
// read buffer, nothing copied or made canonical), running it through the
// gateway's flow unchanged (Preflight, Begin, Run, Finish) and writing the
// gateway's own answers as bytes. It serves no request the flow passes
// (it answers 502 and closes the connection) and no request that is not
// plain: the 429 path of an engine of the gateway's own, with no bound on
// time or size, beside the edge engine's and the floors'.
func flowLoop(addr string, g *gateway.Gateway) error {
	listen, err := sockaddr(addr)
	if err != nil || listen.Port == 0 {
		return fmt.Errorf("flowloop: addr %q: want a numeric IPv4 host and a port (%v)", addr, err)
	}
	d := newDateLine()
	return runLoops(addr, listen, nil, func(l *loop) func() error {
		fl := &flowLoopState{loop: l, g: g, conns: map[int]*flowConn{}}
		fl.x.date = d
		return fl.run
	})
}

// flowConn is a client connection of a flow loop: what it sent past the
// last whole head, and its address (its text written once).
type flowConn struct {
	fd       int
	in       []byte
	peer     netip.Addr
	peerText string
}

type flowLoopState struct {
	*loop
	g     *gateway.Gateway
	conns map[int]*flowConn
	x     flowExchange // its Pass answers 502
}

func (l *flowLoopState) run() error {
	return l.runWith(l.accept, func(fd int) {
		if c := l.conns[fd]; c != nil {
			l.readable(c)
		}
	})
}

func (l *flowLoopState) accept() {
	for {
		fd, sa, ok := l.acceptOne()
		if !ok {
			return
		}
		c := &flowConn{fd: fd}
		if s4, ok := sa.(*unix.SockaddrInet4); ok {
			c.peer = netip.AddrFrom4(s4.Addr)
			c.peerText = c.peer.String()
		}
		l.conns[fd] = c
		if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			l.closeConn(c)
		}
	}
}

func (l *flowLoopState) closeConn(c *flowConn) {
	delete(l.conns, c.fd)
	unix.Close(c.fd)
}

// readable reads what came on c once, answers each whole head in it in
// order, and writes the answers in one write.
func (l *flowLoopState) readable(c *flowConn) {
	n, err := unix.Read(c.fd, l.buf)
	if n <= 0 || err != nil {
		if !errors.Is(err, unix.EAGAIN) {
			l.closeConn(c)
		}
		return
	}
	data := l.buf[:n]
	if len(c.in) > 0 {
		c.in = append(c.in, data...)
		data = c.in
	}
	l.x.out = l.x.out[:0]
	keep := true
	for keep {
		i := bytes.Index(data, headEnd)
		if i < 0 {
			break
		}
		keep = serveHead(l.g, &l.x, c.peer, c.peerText, data[:i+4])
		data = data[i+4:]
	}
	c.in = append(c.in[:0], data...)
	if out := l.x.out; len(out) > 0 {
		if w, err := unix.Write(c.fd, out); err != nil || w != len(out) {
			keep = false
		}
	}
	if !keep {
		l.closeConn(c)
	}
}
