package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/plainhead"
	"github.com/floodgate/floodgate/limiter"
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
	d := &dateLine{}
	d.set(time.Now())
	go func() {
		for now := range time.Tick(time.Second) {
			d.set(now)
		}
	}()
	return runLoops(addr, listen, nil, func(l *loop) func() error {
		fl := &flowLoopState{loop: l, g: g, date: d, conns: map[int]*flowConn{}}
		fl.x.fl = fl
		return fl.run
	})
}

// dateLine is the Date field line of the answers, set once a second.
type dateLine struct{ p atomic.Pointer[[]byte] }

func (d *dateLine) set(now time.Time) {
	b := []byte("Date: " + now.UTC().Format(http.TimeFormat) + "\r\n")
	d.p.Store(&b)
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
	date  *dateLine
	conns map[int]*flowConn
	x     flowExchange
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
	l.out = l.out[:0]
	keep := true
	for keep {
		i := bytes.Index(data, headEnd)
		if i < 0 {
			break
		}
		keep = l.serve(c, data[:i+4])
		data = data[i+4:]
	}
	c.in = append(c.in[:0], data...)
	if len(l.out) > 0 {
		if w, err := unix.Write(c.fd, l.out); err != nil || w != len(l.out) {
			keep = false
		}
	}
	if !keep {
		l.closeConn(c)
	}
}

// serve answers one head (its empty last line included); false: the
// connection closes after what was written. A head that is not a plain
// request (package plainhead, as the edge engine's front reads it) is not
// served.
func (l *flowLoopState) serve(c *flowConn, head []byte) bool {
	x := &l.x
	req, ok := plainhead.Read(head, &x.h)
	if !ok {
		return false
	}
	if status, _, _ := gateway.Preflight(http.MethodGet, b2s(req.Target), req.Host, true); status != 0 {
		return false
	}
	g := l.g
	f := g.Begin()
	v := f.Request()
	v.Method = http.MethodGet
	v.Host = req.Host
	v.Path, v.RawPath = gateway.TargetPath(b2s(req.Target))
	v.Proto = "HTTP/1.1"
	v.Peer, v.PeerText = c.peer, c.peerText
	v.Header = &x.h
	v.NoOverride = !req.Override
	x.fields, x.status, x.bytes, x.passed = nil, 0, 0, false
	if g.Run(x, f) {
		return false // an answer that goes on later: never, as nothing is passed
	}
	g.Finish(x, f)
	return x.status != 0 && !x.passed && !req.Close
}

func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// flowExchange is the request a flow loop serves: the gateway's answers
// are appended to the loop's output as bytes.
type flowExchange struct {
	fl     *flowLoopState
	h      plainhead.Header
	fields []fields.Field
	status int
	bytes  int64
	passed bool
}

func (x *flowExchange) Context() context.Context                                { return context.Background() }
func (x *flowExchange) DelHeader(string)                                        {}
func (x *flowExchange) SetHeader(string, string)                                {}
func (x *flowExchange) RequestBody(int) []byte                                  { return nil }
func (x *flowExchange) SetFields(fs []fields.Field)                             { x.fields = fs }
func (x *flowExchange) Proxies() bool                                           { return true }
func (x *flowExchange) Answered() (int, int64)                                  { return x.status, x.bytes }
func (x *flowExchange) Keep(context.Context, []limiter.Hit) func()              { return nil }
func (x *flowExchange) Wait(context.Context, *gateway.Flow, time.Duration) bool { return true }

// Answer appends the answer: status line, Date, type, the flow's fields,
// length, body.
func (x *flowExchange) Answer(status int, body []byte, challenge bool) {
	o := append(x.fl.out, "HTTP/1.1 "...)
	o = strconv.AppendInt(o, int64(status), 10)
	o = append(o, ' ')
	o = append(o, http.StatusText(status)...)
	o = append(o, "\r\n"...)
	o = append(o, *x.fl.date.p.Load()...)
	o = append(o, "Content-Type: application/json\r\n"...)
	for _, f := range x.fields {
		o = append(append(append(append(o, f.Name...), ": "...), f.Value...), "\r\n"...)
	}
	if challenge {
		o = append(o, "WWW-Authenticate: Bearer\r\n"...)
	}
	o = append(o, "Content-Length: "...)
	o = strconv.AppendInt(o, int64(len(body)), 10)
	o = append(append(o, "\r\n\r\n"...), body...)
	x.fl.out = o
	x.status, x.bytes = status, int64(len(body))
}

// Pass is not served: a 502, and the connection closes.
func (x *flowExchange) Pass(*gateway.Flow, *gateway.Recorder) bool {
	x.Answer(http.StatusBadGateway, []byte(`{"message":"not passed by benchgw flowloop"}`+"\n"), false)
	x.passed = true
	return false
}
