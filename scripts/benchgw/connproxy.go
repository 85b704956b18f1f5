package main

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"
)

// connProxy passes requests without a body, on addr, to target as
// loopProxy does, but with a goroutine per client connection over
// net.Conn, each with an upstream connection of its own: the floor of what
// Go and the kernel cost for the pass-through with Go's netpoller and no
// HTTP library, between the event loops (loopproxy) and the bare fasthttp
// proxy (fastproxy). With deadlines above 0 it also sets, for every
// request, a read and a write deadline that far ahead on both of its
// connections, as a server bounding each wait would without sparing the
// calls: what those four calls a request cost.
func connProxy(addr, target string, deadlines time.Duration) error {
	host, err := targetHost("connproxy", target)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, "listening on", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go passConn(c, host, deadlines)
	}
}

// passConn serves one client connection until it or its upstream ends,
// with deadlines (if above 0) on every read and write.
func passConn(c net.Conn, upstream string, deadlines time.Duration) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", upstream, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	buf := make([]byte, 16<<10)
	var in, answer []byte
	bound := func(set func(time.Time) error) bool {
		return deadlines <= 0 || set(time.Now().Add(deadlines)) == nil
	}
	for {
		if !bound(c.SetReadDeadline) {
			return
		}
		i := -1
		for i < 0 {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			in = append(in, buf[:n]...)
			i = bytes.Index(in, headEnd)
		}
		h := bytes.ToLower(in[:i])
		if bytes.Contains(h, contentLength) || bytes.Contains(h, transferEncoding) {
			return // a body: not passed
		}
		if !bound(up.SetWriteDeadline) {
			return
		}
		if _, err := up.Write(in[:i+4]); err != nil {
			return
		}
		in = in[:copy(in, in[i+4:])]
		if !bound(up.SetReadDeadline) {
			return
		}
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			answer = append(answer, buf[:n]...)
			j := bytes.Index(answer, headEnd)
			if j < 0 {
				continue
			}
			cl, ok := lengthOf(answer[:j])
			if !ok {
				return
			}
			if size := j + 4 + cl; len(answer) >= size {
				if !bound(c.SetWriteDeadline) {
					return
				}
				if _, err := c.Write(answer[:size]); err != nil {
					return
				}
				answer = answer[:copy(answer, answer[size:])]
				break
			}
		}
	}
}

// conn429 answers every request without a body, on addr, with the same
// fixed 429 (raw429), from a goroutine per client connection over
// net.Conn and no HTTP library: the floor of what Go and the kernel cost
// for the 429 path with Go's netpoller, beside the bare fasthttp 429
// (fixed429) and the event loops (loop429). A request with a body closes
// its connection.
func conn429(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, "listening on", ln.Addr())
	answer := raw429()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go answerConn(c, answer)
	}
}

// answerConn answers every request head that comes on c with answer,
// those read together with one write.
func answerConn(c net.Conn, answer []byte) {
	defer c.Close()
	buf := make([]byte, 16<<10)
	var in, out []byte
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		in = append(in, buf[:n]...)
		var ok bool
		if in, out, ok = answerHeads(in, out[:0], answer); !ok {
			return
		}
		if len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}
}

// answerHeads appends answer to out for each whole request head in in and
// returns what is left of in; ok is false for a request with a body.
func answerHeads(in, out, answer []byte) (rest, answers []byte, ok bool) {
	for {
		i := bytes.Index(in, headEnd)
		if i < 0 {
			return in, out, true
		}
		h := bytes.ToLower(in[:i])
		if bytes.Contains(h, contentLength) || bytes.Contains(h, transferEncoding) {
			return in, out, false
		}
		out = append(out, answer...)
		in = in[:copy(in, in[i+4:])]
	}
}

// The bytes the floors look for in a head (lowercased).
var (
	headEnd          = []byte("\r\n\r\n")
	contentLength    = []byte("\r\ncontent-length:")
	transferEncoding = []byte("\r\ntransfer-encoding:")
)

// lengthOf finds the Content-Length of an answer's head (its lines ended
// by CRLF), with no allocation.
func lengthOf(head []byte) (int, bool) {
	name := contentLength[2:] // "content-length:"
	for len(head) > 0 {
		line := head
		if k := bytes.Index(head, headEnd[:2]); k >= 0 {
			line, head = head[:k], head[k+2:]
		} else {
			head = nil
		}
		if len(line) <= len(name) || !asciiFoldPrefix(line, name) {
			continue
		}
		v := bytes.TrimSpace(line[len(name):])
		n := 0
		for _, c := range v {
			if c < '0' || c > '9' || n > 1<<40 {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, len(v) > 0
	}
	return 0, false
}

// asciiFoldPrefix reports whether b begins with prefix, a lower-case
// name, in any case.
func asciiFoldPrefix(b, prefix []byte) bool {
	for i, c := range prefix {
		d := b[i]
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if d != c {
			return false
		}
	}
	return true
}

// targetHost is the host:port of a floor's target, an http:// URL.
func targetHost(mode, target string) (string, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%s: target %q: want http://host:port", mode, target)
	}
	return u.Host, nil
}
