package edge

import (
	"bytes"
	"strconv"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/plainhead"
	"github.com/floodgate/floodgate/internal/rawconn"
	"github.com/valyala/fasthttp"
)

// A plain request the flow passes is forwarded by the front itself where
// its upstream is plain HTTP, one URL, and nothing waits for the answer's
// body to tell a cost: the upstream's request head is written from the
// client's as it came (its field lines copied, those the edge engine
// rewrites left out and set again, as rewriteRequest sets them), sent over
// a connection of the upstream's pool as the edge engine's exchange sends
// one, and an answer that is plain (frontAnswer) is answered to the client
// as bytes: its status line in the gateway's own words, the front's Date,
// the upstream's field lines as they came but for the hop-by-hop ones and
// its Date, the flow's fields, and its body, read whole. Field names keep
// the case they came in, where fasthttp writes them in its own; nothing
// else tells the two apart (TestFrontForwardsAsFasthttp). An answer that
// is not plain is read on by the exchange, as the edge engine reads any,
// from where the front stopped (answerUpstream).

// frontPass forwards x's request, if the front forwards it (above), and
// reports whether it did: false, having done nothing, for one the
// exchange forwards instead. later says the answer's body is streamed
// (by the exchange).
func (x *frontExchange) frontPass(f *gateway.Flow, clientClose bool) (done, later bool) {
	fr := x.fr
	e := fr.e
	m := f.Match()
	u := m.Upstream
	if u == nil {
		x.Answer(404, gateway.Body(404), false)
		return true, false
	}
	if u.Scheme != "http" || e.g.PoolOf(m.Route, u) != nil {
		return false, false
	}
	if _, ok := frontFields(x.fields); !ok {
		return false, false // fields fasthttp adds its own way
	}
	up := e.upstreamOf(u, nil)
	fr.up = appendUpstreamHead(fr.up[:0], &x.h, x.target, up, f.Request(), m.PeerTrusted)
	f.UpstreamBegan()
	var err error
	for attempt := 0; ; attempt++ {
		var stale bool
		later, stale, err = x.exchangeUpstream(f, up, clientClose)
		if err == nil {
			if !later {
				f.UpstreamEnded()
			}
			return true, later
		}
		// A kept connection the upstream had just closed: sent again
		// once, on another, as the exchange sends a GET again (forward).
		if !stale || attempt > 0 {
			break
		}
	}
	status := e.failedUpstream(f, nil, up, err)
	if x.edge != nil {
		x.edge.ctx.Response.Reset()
	}
	x.Answer(status, gateway.Body(status), false)
	return true, false
}

// exchangeUpstream sends the upstream head (fr.up) over a connection of
// up's pool, as the exchange sends a request without a body
// (Engine.exchangeUpstream), and answers x from what comes back. An error
// means no answer was set; stale that it was the end of a kept connection
// the upstream had just closed, found as the request went on it.
func (x *frontExchange) exchangeUpstream(f *gateway.Flow, up *upstream, clientClose bool) (later, stale bool, err error) {
	fr := x.fr
	e := fr.e
	route := f.Match().Route
	hc := up.hc
	cc, err := hc.AcquireConn(0, false)
	if err != nil {
		return false, false, err // a dial error: nothing was sent
	}
	withBytes := 0
	var br answerReader
	for tries := 0; ; tries++ {
		if tries > 0 {
			if cc, err = hc.AcquireConn(0, false); err != nil {
				return false, false, err
			}
		}
		c := cc.Conn()
		uc := connOf(c)
		// As the exchange: a kept plain connection is checked and sent the
		// request by the first read of the answer; another is checked,
		// then written to.
		raw := uc.raw(c)
		first := raw != nil && uc.used
		if uc != nil && uc.used && !first {
			if what := unasked(uc); what != rawconn.Nothing {
				hc.CloseConn(cc)
				if e.closedKept(what, &withBytes, route, up) {
					return false, false, errUnasked
				}
				continue
			}
		}
		reused := uc != nil && uc.used
		if uc != nil {
			uc.used = true
		}
		if first {
			raw.SendFirst(fr.up)
		} else if _, err = c.Write(fr.up); err != nil {
			hc.CloseConn(cc)
			return false, false, err
		}
		if err = uc.readDeadline(c, up.timeout); err != nil {
			hc.CloseConn(cc)
			return false, false, err
		}
		br = answerReader{Reader: hc.AcquireReader(c), hc: hc, c: c, pooled: true}
		if _, err = br.Peek(1); err != nil {
			br.release()
			hc.CloseConn(cc)
			if first {
				if what := raw.Unsent(); what != rawconn.Nothing {
					if e.closedKept(what, &withBytes, route, up) {
						return false, false, errUnasked
					}
					continue
				}
			}
			return false, reused && staleConn(err), err
		}
		if a := x.frontAnswer(&br, f, up); a.plain {
			leftover := br.Buffered() > 0 // more than the answer: the connection is not reused
			br.release()
			if a.closeConn || leftover {
				hc.CloseConn(cc)
			} else {
				hc.ReleaseConn(cc)
			}
			return false, false, nil
		}
		// Not plain: the exchange reads it on, from its head.
		ex := x.convert()
		resp := &ex.ctx.Response
		resp.Reset()
		resp.Header.SetNoDefaultContentType(true)
		err = br.head(&resp.Header)
		later, _, err = answerUpstream(e, ex, f, nil, up, clientClose, hc, cc, c, uc, br, false, reused, err)
		return later, false, err
	}
}

// plainAnswer is what frontAnswer made of an upstream's answer.
type plainAnswer struct {
	plain     bool // answered to the client (in fr.out)
	closeConn bool // the upstream closes its connection after it
}

// frontAnswer reads the head of the upstream's answer that br holds the
// first bytes of and, when it is plain, answers x with it and its body,
// read whole. Plain is: all of it within br's buffer, lines of CRLF, HTTP/1.1
// or 1.0, a final status (200 to 599), field lines of a token, a colon and
// visible ASCII, a Content-Length of at most edgeBufferBytes (none for 204
// and none needed for 304), and none of the fields the edge engine reads
// its own way (Transfer-Encoding, Set-Cookie, a Connection naming a field,
// a second Content-Type, Content-Encoding or Server, an event stream, one
// named as a field of the flow's). Anything else is left as it was in br
// (a.plain false). A body cut short or stalled is answered 502, as the
// exchange answers it.
func (x *frontExchange) frontAnswer(br *answerReader, f *gateway.Flow, up *upstream) (a plainAnswer) {
	fr := x.fr
	e := fr.e
	var s headScan
	var head []byte
	for {
		b, _ := br.Peek(br.Buffered())
		end, crlf := s.end(b)
		if end > 0 {
			if !crlf {
				return a
			}
			head = b[:end]
			break
		}
		if br.Buffered() >= br.Size() {
			return a // a long head: the exchange reads it
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil && br.Buffered() == len(b) {
			return a // cut short or stalled: the exchange tells which
		}
	}
	// The status line.
	if len(head) < 14 || string(head[:7]) != "HTTP/1." || head[7] != '1' && head[7] != '0' || head[8] != ' ' {
		return a
	}
	http10 := head[7] == '0'
	status := 0
	for _, d := range head[9:12] {
		if d < '0' || d > '9' {
			return a
		}
		status = status*10 + int(d-'0')
	}
	if status < 200 || status > 599 {
		return a
	}
	p := bytes.IndexByte(head, '\n') + 1
	if p != 14 && head[12] != ' ' {
		return a
	}
	at := len(fr.out)
	o := append(fr.out, "HTTP/1.1 "...)
	o = strconv.AppendInt(o, int64(status), 10)
	o = append(o, ' ')
	o = append(o, fasthttp.StatusMessage(status)...)
	o = append(o, "\r\n"...)
	o = append(o, e.dateLine()...)
	n := -1
	var seen uint8 // Content-Type, Content-Encoding, Server
	keepAlive := false
	for p < len(head)-2 {
		line, name, value, ok := fieldLine(head[p:])
		if !ok {
			return a
		}
		p += len(line)
		if bit := hopBit(name); bit != 0 && bit != 1<<8 { // Forwarded is a request's
			if bit == 1 {
				switch {
				case bytes.EqualFold(value, []byte("close")):
					a.closeConn = true
				case bytes.EqualFold(value, []byte("keep-alive")):
					keepAlive = true
				default:
					return a // it names fields to remove
				}
			}
			continue
		}
		switch len(name) {
		case 4:
			if bytes.EqualFold(name, []byte("date")) {
				continue // the front's own
			}
		case 6:
			if bytes.EqualFold(name, []byte("server")) {
				if once(&seen, 1) {
					return a
				}
				if len(value) == 0 {
					continue // as fasthttp, which writes none empty
				}
			}
		case 10:
			if bytes.EqualFold(name, []byte("set-cookie")) {
				return a
			}
		case 12:
			if bytes.EqualFold(name, []byte("content-type")) {
				if once(&seen, 2) || bytes.HasPrefix(value, []byte("text/event-stream")) {
					return a
				}
				if len(value) == 0 {
					continue
				}
			}
		case 14:
			if bytes.EqualFold(name, []byte("content-length")) {
				if n >= 0 || len(value) == 0 || len(value) > 6 || value[0] == '0' && len(value) > 1 {
					return a
				}
				n = 0
				for _, d := range value {
					if d < '0' || d > '9' {
						return a
					}
					n = n*10 + int(d-'0')
				}
			}
		case 16:
			if bytes.EqualFold(name, []byte("content-encoding")) {
				if once(&seen, 4) {
					return a
				}
				if len(value) == 0 {
					continue
				}
			}
		case 17:
			if bytes.EqualFold(name, []byte("transfer-encoding")) {
				return a
			}
		}
		for _, fl := range x.fields {
			if len(fl.Name) == len(name) && bytes.EqualFold(s2b(fl.Name), name) {
				return a // the flow's, which come first (addFields)
			}
		}
		o = append(o, line...)
	}
	noBody := status == 204 || status == 304
	switch {
	case status == 204 && n >= 0, !noBody && (n < 0 || n > edgeBufferBytes):
		return a
	case noBody:
		n = 0
	}
	for _, fl := range x.fields {
		o = append(o, fieldName(fl.Name)...)
		o = append(o, ": "...)
		o = append(o, fl.Value...)
		o = append(o, "\r\n"...)
	}
	x.at, x.tail, x.body, x.challenge = at, len(o), nil, false
	o = append(o, "\r\n"...)
	a.closeConn = a.closeConn || http10 && !keepAlive
	route := f.Match().Route
	f.UpstreamStatus(status)
	e.g.UpstreamAnswered(route, status)
	_, _ = br.Discard(len(head))
	var err error
	fr.out, err = appendWhole(o, br.Reader, n, connOf(br.c), br.c, up.timeout)
	if err != nil {
		// Its status is known, its body cut: 502 to the client, the
		// request counted by the upstream's status (as the exchange
		// counts it).
		e.log.Warn("gateway: upstream body", "route", route, "upstream", up.host, "err", err)
		fr.out = fr.out[:at]
		x.Answer(502, gateway.Body(502), false)
		x.status = status
		a.plain, a.closeConn = true, true
		return a
	}
	x.status, x.bytes = status, int64(n)
	a.plain = true
	return a
}

// once reports whether bit was set in seen already, and sets it.
func once(seen *uint8, bit uint8) bool {
	was := *seen&bit != 0
	*seen |= bit
	return was
}

// fieldLine reads the field line that b begins with
// (plainhead.FieldLine): line is all of it, CRLF included.
func fieldLine(b []byte) (line, name, value []byte, ok bool) {
	n, ne, vs, ve, ok := plainhead.FieldLine(b)
	if !ok {
		return nil, nil, nil, false
	}
	return b[:n], b[:ne], b[vs:ve], true
}

// appendUpstreamHead appends the head of the request that goes upstream
// for a plain request with the fields h and the target target, as
// rewriteRequest makes it of fasthttp's request: the path with its dot
// segments resolved, joined with the upstream's; Host the upstream's;
// the client's field lines as they came but for Host, the hop-by-hop ones
// and the forwarding fields, which are set after them (X-Forwarded-For
// with the client's own chain from a trusted proxy, X-Real-IP passed from
// one only, X-Forwarded-Host and -Proto).
func appendUpstreamHead(dst []byte, h *plainhead.Header, target []byte, up *upstream, v *gateway.Request, trusted bool) []byte {
	dst = append(dst, "GET "...)
	dst = appendUpstreamTarget(dst, target, up)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, up.host...)
	dst = append(dst, "\r\n"...)
	xff := false
	for i := range h.Len() {
		name, _, line := h.Field(i)
		switch len(name) {
		case 4:
			if bytes.EqualFold(name, []byte("host")) {
				continue
			}
		case len(xForwardedFor):
			if bytes.EqualFold(name, xForwardedFor) {
				xff = true
				continue
			}
		case len(xRealIP):
			if !trusted && bytes.EqualFold(name, xRealIP) {
				continue
			}
		case len(xForwardedHost):
			if bytes.EqualFold(name, xForwardedHost) {
				continue
			}
		case len(xForwardedProto):
			if bytes.EqualFold(name, xForwardedProto) {
				continue
			}
		}
		if hopBit(name) != 0 {
			continue
		}
		dst = append(dst, line...)
	}
	if v.Peer.IsValid() || xff && trusted {
		dst = append(dst, "X-Forwarded-For: "...)
		sep := false
		if xff && trusted {
			for i := range h.Len() {
				if name, value, _ := h.Field(i); len(name) == len(xForwardedFor) && bytes.EqualFold(name, xForwardedFor) {
					if sep {
						dst = append(dst, ", "...)
					}
					dst = append(dst, value...)
					sep = true
				}
			}
		}
		if v.Peer.IsValid() {
			if sep {
				dst = append(dst, ", "...)
			}
			if v.PeerText != "" {
				dst = append(dst, v.PeerText...)
			} else {
				dst = v.Peer.AppendTo(dst)
			}
		}
		dst = append(dst, "\r\n"...)
	}
	if len(v.Host) > 0 {
		dst = append(dst, "X-Forwarded-Host: "...)
		dst = append(dst, v.Host...)
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "X-Forwarded-Proto: http\r\n\r\n"...)
	return dst
}
