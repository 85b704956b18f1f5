package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// loopProxy passes requests without a body, on addr, to target from event
// loops of its own: one per GOMAXPROCS, each on a locked thread with its own
// epoll set and its own listening socket (SO_REUSEPORT), reading each
// socket once when it is ready and never parking a goroutine. Each client
// connection has an upstream connection of its own; the request's head goes
// as it came, the upstream's answer (which must have a Content-Length) as
// it came. It does none of a gateway's work: the floor of what Go and the
// kernel cost for the pass-through when an event loop drives the sockets,
// beside the bare fasthttp proxy (fastproxy) and the edge engine. A request
// with a body, or an answer without a Content-Length, closes its connection.
func loopProxy(addr, target string) error {
	host, err := targetHost("loopproxy", target)
	if err != nil {
		return err
	}
	up, err := sockaddr(host)
	if err != nil {
		return fmt.Errorf("loopproxy: target: %w", err)
	}
	listen, err := sockaddr(addr)
	if err != nil || listen.Port == 0 {
		return fmt.Errorf("loopproxy: addr %q: want a numeric IPv4 host and a port (%v)", addr, err)
	}
	return runLoops(addr, listen, up, func(l *loop) func() error { return l.run })
}

// runLoops starts one loop per GOMAXPROCS listening on listen (passing to
// up, when not nil), each run by what run returns for it, says where they
// listen, and returns the first error a loop ends with.
func runLoops(addr string, listen, up *unix.SockaddrInet4, run func(*loop) func() error) error {
	n := runtime.GOMAXPROCS(0)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		l, err := newLoop(listen, up)
		if err != nil {
			return err
		}
		r := run(l)
		go func() { errs <- r() }()
	}
	fmt.Fprintln(os.Stdout, "listening on", addr)
	return <-errs
}

// loop429 answers every request without a body, on addr, with the same
// fixed 429 (raw429) from event loops as loopProxy's, one per GOMAXPROCS:
// the floor of what Go and the kernel cost for the 429 path when event
// loops drive the sockets. A request with a body closes its connection.
func loop429(addr string) error {
	listen, err := sockaddr(addr)
	if err != nil || listen.Port == 0 {
		return fmt.Errorf("loop429: addr %q: want a numeric IPv4 host and a port (%v)", addr, err)
	}
	answer := raw429()
	return runLoops(addr, listen, nil, func(l *loop) func() error {
		l.answer = answer
		return l.run
	})
}

// sockaddr resolves a numeric IPv4 host:port.
func sockaddr(hostport string) (*unix.SockaddrInet4, error) {
	ap, err := net.ResolveTCPAddr("tcp4", hostport)
	if err != nil {
		return nil, err
	}
	sa := &unix.SockaddrInet4{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To4())
	return sa, nil
}

type loopConn struct {
	fd     int
	peer   *loopConn
	client bool
	in     []byte
}

type loop struct {
	ep, ln int
	up     *unix.SockaddrInet4
	answer []byte // not nil: every request is answered with it (loop429)
	conns  map[int]*loopConn
	buf    []byte
	out    []byte
}

func newLoop(listen, up *unix.SockaddrInet4) (*loop, error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("loopproxy: socket: %w", err)
	}
	_ = unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	_ = unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	if err := unix.Bind(ln, listen); err != nil {
		unix.Close(ln)
		return nil, fmt.Errorf("loopproxy: bind: %w", err)
	}
	if err := unix.Listen(ln, 1024); err != nil {
		unix.Close(ln)
		return nil, fmt.Errorf("loopproxy: listen: %w", err)
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(ln)
		return nil, fmt.Errorf("loopproxy: epoll: %w", err)
	}
	l := &loop{ep: ep, ln: ln, up: up, conns: map[int]*loopConn{}, buf: make([]byte, 64<<10)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, ln, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(ln)}); err != nil {
		return nil, fmt.Errorf("loopproxy: epoll: %w", err)
	}
	return l, nil
}

func (l *loop) run() error {
	return l.runWith(l.accept, func(fd int) {
		if c := l.conns[fd]; c != nil {
			l.readable(c)
		}
	})
}

// runWith waits for the loop's events on a locked thread: accept is called
// when the listening socket has connections, ready with each other socket
// that has bytes.
func (l *loop) runWith(accept func(), ready func(fd int)) error {
	runtime.LockOSThread()
	evs := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(l.ep, evs, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("loopproxy: epoll_wait: %w", err)
		}
		for _, ev := range evs[:n] {
			if fd := int(ev.Fd); fd == l.ln {
				accept()
			} else {
				ready(fd)
			}
		}
	}
}

func (l *loop) accept() {
	for {
		fd, _, ok := l.acceptOne()
		if !ok {
			return
		}
		l.add(&loopConn{fd: fd, client: true})
	}
}

// acceptOne accepts a connection waiting on the listening socket, without
// Nagle's delay; false when none waits.
func (l *loop) acceptOne() (fd int, sa unix.Sockaddr, ok bool) {
	fd, sa, err := unix.Accept4(l.ln, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err != nil {
		return 0, nil, false
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	return fd, sa, true
}

func (l *loop) add(c *loopConn) {
	l.conns[c.fd] = c
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.fd)}); err != nil {
		l.close(c)
	}
}

func (l *loop) close(c *loopConn) {
	for _, x := range []*loopConn{c, c.peer} {
		if x != nil && l.conns[x.fd] == x {
			delete(l.conns, x.fd)
			unix.Close(x.fd)
		}
	}
}

// dial connects c to the upstream (a blocking connect: the upstream is on
// loopback).
func (l *loop) dial(c *loopConn) bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	if err := unix.Connect(fd, l.up); err != nil {
		unix.Close(fd)
		return false
	}
	_ = unix.SetNonblock(fd, true)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	u := &loopConn{fd: fd, peer: c}
	c.peer = u
	l.add(u)
	return true
}

// readable reads what came on c once, and passes a whole request head or
// a whole answer on.
func (l *loop) readable(c *loopConn) {
	n, err := unix.Read(c.fd, l.buf)
	if n <= 0 || err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		l.close(c)
		return
	}
	c.in = append(c.in, l.buf[:n]...)
	if l.answer != nil {
		var ok bool
		if c.in, l.out, ok = answerHeads(c.in, l.out[:0], l.answer); !ok {
			l.close(c)
			return
		}
		if len(l.out) > 0 {
			if w, err := unix.Write(c.fd, l.out); err != nil || w != len(l.out) {
				l.close(c)
			}
		}
		return
	}
	i := bytes.Index(c.in, headEnd)
	if i < 0 {
		return
	}
	size := i + 4
	if c.client {
		h := bytes.ToLower(c.in[:i])
		if bytes.Contains(h, contentLength) || bytes.Contains(h, transferEncoding) || c.peer == nil && !l.dial(c) {
			l.close(c) // a body: not passed
			return
		}
	} else {
		cl, ok := lengthOf(c.in[:i])
		if !ok {
			l.close(c)
			return
		}
		size += cl
		if len(c.in) < size {
			return
		}
	}
	if w, err := unix.Write(c.peer.fd, c.in[:size]); err != nil || w != size {
		l.close(c)
		return
	}
	c.in = c.in[:copy(c.in, c.in[size:])]
}
