package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
)

// flowLoop serves the gateway g on addr from event loops as loop429's (one
// per GOMAXPROCS, each on a locked thread with its own epoll set and
// listening socket), reading each request's head with a parser of its own
// (the field lines kept as offsets into the read buffer, nothing copied or
// made canonical), running it through the gateway's flow unchanged
// (Preflight, Begin, Run, Finish) and writing the gateway's own answers
// as bytes. It serves no request the flow passes (it answers 502 and
// closes the connection), no body, no other version than HTTP/1.1: the
// 429 path of an engine of the gateway's own, with no bound on time or
// size, beside the edge engine's and the floors'.
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
	n := runtime.GOMAXPROCS(0)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		l, err := newLoop(listen, nil)
		if err != nil {
			return err
		}
		fl := &flowLoopState{loop: l, g: g, date: d, conns: map[int]*flowConn{}}
		fl.x.fl = fl
		go func() { errs <- fl.run() }()
	}
	fmt.Fprintln(os.Stdout, "listening on", addr)
	return <-errs
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
	runtime.LockOSThread()
	evs := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(l.ep, evs, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("flowloop: epoll_wait: %w", err)
		}
		for _, ev := range evs[:n] {
			fd := int(ev.Fd)
			if fd == l.ln {
				l.accept()
			} else if c := l.conns[fd]; c != nil {
				l.readable(c)
			}
		}
	}
}

func (l *flowLoopState) accept() {
	for {
		fd, sa, err := unix.Accept4(l.ln, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
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
		keep = l.serve(c, data[:i+2])
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

// serve answers one head (its last line's CRLF kept); false: the
// connection closes after what was written.
func (l *flowLoopState) serve(c *flowConn, head []byte) bool {
	method, target, ok := requestLine(head)
	if !ok {
		return false
	}
	x := &l.x
	if !x.h.parse(head) {
		return false
	}
	host := x.h.Get("Host")
	if status, _, _ := gateway.Preflight(b2s(method), b2s(target), host, true); status != 0 {
		return false
	}
	if x.h.Lines("Content-Length") > 0 || x.h.Lines("Transfer-Encoding") > 0 {
		return false // a body: not served
	}
	g := l.g
	f := g.Begin()
	v := f.Request()
	v.Method = methodName(method)
	v.Host = host
	v.Path, v.RawPath = gateway.TargetPath(b2s(target))
	v.Proto = "HTTP/1.1"
	v.Peer, v.PeerText = c.peer, c.peerText
	v.Header = &x.h
	x.fields, x.status, x.bytes, x.passed = nil, 0, 0, false
	if g.Run(x, f) {
		return false // an answer that goes on later: never, as nothing is passed
	}
	g.Finish(x, f)
	return x.status != 0 && !x.passed
}

// requestLine reads an HTTP/1.1 request line.
func requestLine(head []byte) (method, target []byte, ok bool) {
	end := bytes.IndexByte(head, '\r')
	if end < 0 {
		return nil, nil, false
	}
	line := head[:end]
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return nil, nil, false
	}
	rest := line[sp+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 || string(rest[sp2+1:]) != "HTTP/1.1" {
		return nil, nil, false
	}
	return line[:sp], rest[:sp2], true
}

// methodName returns the method as a string, the common ones without
// allocating.
func methodName(b []byte) string {
	switch string(b) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	}
	return string(b)
}

// rawHead is a request head's field lines as offsets into it: name start
// and end, value start and end.
type rawHead struct {
	head  []byte
	lines [][4]int
}

// parse reads the field lines after the request line; false for a line
// without a colon or a name.
func (h *rawHead) parse(head []byte) bool {
	h.head, h.lines = head, h.lines[:0]
	p := bytes.IndexByte(head, '\n') + 1
	for p > 0 && p < len(head) {
		e := bytes.IndexByte(head[p:], '\n')
		if e < 0 {
			return false
		}
		line := bytes.TrimSuffix(head[p:p+e], []byte("\r"))
		col := bytes.IndexByte(line, ':')
		if col <= 0 {
			return false
		}
		vs, ve := col+1, len(line)
		for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
			vs++
		}
		for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
			ve--
		}
		h.lines = append(h.lines, [4]int{p, p + col, p + vs, p + ve})
		p += e + 1
	}
	return true
}

func (h *rawHead) is(ln [4]int, name string) bool {
	return ln[1]-ln[0] == len(name) && strings.EqualFold(b2s(h.head[ln[0]:ln[1]]), name)
}

// Get returns the first value of a field, or "".
func (h *rawHead) Get(name string) string {
	for _, ln := range h.lines {
		if h.is(ln, name) {
			return b2s(h.head[ln[2]:ln[3]])
		}
	}
	return ""
}

// Values returns every value of a field.
func (h *rawHead) Values(name string) []string {
	var out []string
	for _, ln := range h.lines {
		if h.is(ln, name) {
			out = append(out, b2s(h.head[ln[2]:ln[3]]))
		}
	}
	return out
}

// Lines counts the lines of a field (gateway.LineCounter).
func (h *rawHead) Lines(name string) int {
	n := 0
	for _, ln := range h.lines {
		if h.is(ln, name) {
			n++
		}
	}
	return n
}

// FindName returns the first field name m matches, or ""
// (gateway.NameLister).
func (h *rawHead) FindName(m *gateway.NameMatch) string {
	for _, ln := range h.lines {
		if k := b2s(h.head[ln[0]:ln[1]]); m.Matches(k) {
			return k
		}
	}
	return ""
}

var (
	_ gateway.LineCounter = (*rawHead)(nil)
	_ gateway.NameLister  = (*rawHead)(nil)
)

func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// flowExchange is the request a flow loop serves: the gateway's answers
// are appended to the loop's output as bytes.
type flowExchange struct {
	fl     *flowLoopState
	h      rawHead
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
