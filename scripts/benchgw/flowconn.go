package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/floodgate/floodgate/gateway"
)

// flowConns serves the gateway g on addr from a goroutine per client
// connection over net.Conn, as the edge engine's front does, reading each
// request's head with package plainhead and running it through the
// gateway's flow unchanged (serveHead), its own answers written as bytes.
// Unlike flowloop it forwards a request the flow passes, over an upstream
// connection of the client connection's own (to the route's upstream): the
// head as it came with its Host line the upstream's and X-Forwarded-For
// added, and the answer (a Content-Length body) copied back with the
// flow's fields added to its head. That is the least a forwarding path of
// the front's own would do, with no HTTP library: no pool of upstream
// connections, no bound on time or size, no hop-by-hop field removed, no
// other kind of answer. The 429 path and the pass-through of such a path,
// beside the edge engine's and the floors'.
func flowConns(addr string, g *gateway.Gateway) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, "listening on", ln.Addr())
	d := newDateLine()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serveFlowConn(c, g, d)
	}
}

// connFlow is a client connection of flowConns and its upstream
// connection, dialed when its first request is passed.
type connFlow struct {
	g      *gateway.Gateway
	up     net.Conn
	upHost string
	req    []byte // the request sent upstream
	answer []byte // what the upstream sent, read so far
	buf    []byte
	peer   string // the client's address, for X-Forwarded-For
}

// serveFlowConn serves c's requests until it ends or one is not served:
// each read's whole heads in order, their answers in one write.
func serveFlowConn(c net.Conn, g *gateway.Gateway, d *dateLine) {
	defer c.Close()
	cf := &connFlow{g: g, buf: make([]byte, 16<<10)}
	defer func() {
		if cf.up != nil {
			cf.up.Close()
		}
	}()
	var peer netip.Addr
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		peer = a.AddrPort().Addr().Unmap()
	}
	cf.peer = peer.String()
	x := &flowExchange{date: d, pass: cf.forward}
	in := make([]byte, 0, 4<<10)
	for {
		n, err := c.Read(cf.buf)
		if err != nil {
			return
		}
		data := append(in, cf.buf[:n]...) // the heads stay put while the upstream's answer is read
		x.out = x.out[:0]
		keep := true
		for keep {
			i := bytes.Index(data, headEnd)
			if i < 0 {
				break
			}
			keep = serveHead(g, x, peer, cf.peer, data[:i+4])
			data = data[i+4:]
		}
		in = append(in[:0], data...)
		if len(x.out) > 0 {
			if _, err := c.Write(x.out); err != nil {
				return
			}
		}
		if !keep {
			return
		}
	}
}

// forward sends x's request to its route's upstream and appends the
// answer to x.out; false when it could not.
func (cf *connFlow) forward(x *flowExchange, f *gateway.Flow) bool {
	m := f.Match()
	u := m.Upstream
	if u == nil {
		return false
	}
	if cf.up == nil || cf.upHost != u.Host {
		if cf.up != nil {
			cf.up.Close()
		}
		up, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			cf.up = nil
			return false
		}
		cf.up, cf.upHost = up, u.Host
	}
	f.UpstreamBegan()
	defer f.UpstreamEnded()
	// The request line, the upstream's Host, the client's other lines,
	// X-Forwarded-For.
	head := x.head[:len(x.head)-2]
	end := bytes.Index(head, headEnd[:2]) + 2
	r := append(cf.req[:0], head[:end]...)
	r = append(append(append(r, "Host: "...), u.Host...), "\r\n"...)
	for rest := head[end:]; len(rest) > 0; {
		k := bytes.Index(rest, headEnd[:2]) + 2
		if line := rest[:k]; len(line) < 5 || !asciiFoldPrefix(line, []byte("host:")) {
			r = append(r, line...)
		}
		rest = rest[k:]
	}
	r = append(append(append(r, "X-Forwarded-For: "...), cf.peer...), "\r\n\r\n"...)
	cf.req = r
	if _, err := cf.up.Write(r); err != nil {
		cf.up.Close()
		cf.up = nil
		return false
	}
	a := cf.answer[:0]
	for {
		n, err := cf.up.Read(cf.buf)
		if err != nil {
			cf.up.Close()
			cf.up = nil
			return false
		}
		a = append(a, cf.buf[:n]...)
		j := bytes.Index(a, headEnd)
		if j < 0 {
			continue
		}
		cl, ok := lengthOf(a[:j+2])
		if !ok || len(a) < 12 {
			return false
		}
		if len(a) < j+4+cl {
			continue
		}
		status := 0
		for _, c := range a[9:12] {
			if c < '0' || c > '9' {
				return false
			}
			status = status*10 + int(c-'0')
		}
		f.UpstreamStatus(status)
		cf.g.UpstreamAnswered(m.Route, status)
		// The answer's head without its empty line, the flow's fields,
		// the empty line and the body.
		o := append(x.out, a[:j+2]...)
		o = x.appendFields(o)
		x.out = append(append(o, "\r\n"...), a[j+4:j+4+cl]...)
		x.status, x.bytes = status, int64(cl)
		cf.answer = a[:0]
		return true
	}
}
