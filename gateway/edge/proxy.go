package edge

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/bufpool"
	"github.com/floodgate/floodgate/internal/rawconn"
	"github.com/valyala/fasthttp"
)

// edgeBufferBytes is the largest upstream body the edge engine reads whole
// before answering; longer bodies, bodies of unknown length (chunked) and
// event streams are streamed to the client as they come.
const edgeBufferBytes = 64 << 10

// upstream is one upstream of the edge engine: a pool of connections,
// capped, and how to address it.
type upstream struct {
	hc      *fasthttp.HostClient
	host    string        // the Host field of the forwarded requests
	base    string        // the upstream URL's path ("" for none)
	query   string        // the upstream URL's query
	timeout time.Duration // the wait for the response headers
}

// upstreamOf returns the upstream of u, making it on first use. Routes
// that share an upstream share its pool (its answers are counted under
// each request's route).
func (e *Engine) upstreamOf(u *url.URL, pool *gateway.Pool) *upstream {
	if p, ok := e.ups.Load(u); ok {
		return p.(*upstream)
	}
	o := e.g.Upstream()
	def := func(d, v time.Duration) time.Duration {
		if d <= 0 {
			return v
		}
		return d
	}
	addr := u.Host
	tls := u.Scheme == "https"
	if u.Port() == "" {
		if tls {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	dialer := &net.Dialer{Timeout: def(o.DialTimeout, floodgate.DefaultUpstreamDialTimeout), KeepAlive: 30 * time.Second}
	answer := def(o.ResponseHeaderTimeout, floodgate.DefaultUpstreamTimeout)
	handshake := def(o.TLSHandshakeTimeout, gateway.DefaultTLSHandshakeTimeout)
	maxConns := o.MaxConnsPerHost
	if maxConns <= 0 {
		maxConns = 1 << 20 // no cap, as net/http's transport
	}
	up := &upstream{
		hc: &fasthttp.HostClient{
			Addr:  addr,
			IsTLS: tls,
			Dial: func(addr string) (net.Conn, error) {
				c, err := dialer.Dial("tcp", addr)
				if err != nil {
					return nil, err
				}
				uc := &upConn{Conn: rawconn.Wrap(c), fd: fdOf(c), writeBound: answer}
				if tls {
					// fasthttp hands the connection on unshaken (it bounds a
					// handshake only with a write timeout, which the engine
					// does not set): the handshake runs with the request's
					// first write, and its reads are bounded here, as
					// net/http's transport bounds them. The wait for the
					// answer sets the read deadline afresh (readDeadline).
					if err := uc.Conn.SetReadDeadline(time.Now().Add(handshake)); err != nil {
						c.Close()
						return nil, err
					}
				}
				return uc, nil
			},
			TLSConfig:           upstreamTLS(o.TLS, pool),
			MaxConns:            maxConns,
			MaxIdleConnDuration: def(o.IdleConnTimeout, floodgate.DefaultUpstreamIdleTimeout),
			// Past the cap a request waits for a connection to come free,
			// as long as it would wait for an answer.
			MaxConnWaitTimeout: answer,
			// An answer's head that does not fit is read again with a
			// buffer of UpstreamHeadBytes (answerReader).
			ReadBufferSize:   16 << 10,
			WriteBufferSize:  16 << 10,
			ConnPoolStrategy: fasthttp.LIFO,
		},
		host:    u.Host,
		base:    strings.TrimSuffix(u.EscapedPath(), "/"),
		query:   u.RawQuery,
		timeout: answer,
	}
	p, _ := e.ups.LoadOrStore(u, up)
	return p.(*upstream)
}

// forgetUpstreams drops the engine's upstreams, closing their idle
// connections (gateway.Gateway.ForgetUpstreams, after a policy reload).
func (e *Engine) forgetUpstreams() {
	e.ups.Range(func(k, v any) bool {
		e.ups.Delete(k)
		v.(*upstream).hc.CloseIdleConnections()
		return true
	})
}

var (
	xForwardedFor   = []byte("X-Forwarded-For")
	xRealIP         = []byte("X-Real-Ip")
	xForwardedHost  = []byte("X-Forwarded-Host")
	xForwardedProto = []byte("X-Forwarded-Proto")
	schemeHTTP      = []byte("http")
	schemeHTTPS     = []byte("https")
)

// forward sends the request to its route's upstream and sets the answer
// from the upstream's response; it returns true when the body is streamed
// (the request finishes when the stream ends).
func (e *Engine) forward(x *exchange, f *gateway.Flow, rec *gateway.Recorder) bool {
	m, v := f.Match(), f.Request()
	u := m.Upstream
	if u == nil {
		x.Answer(404, gateway.Body(404), false)
		return false
	}
	route := m.Route
	pool := e.g.PoolOf(route, u)
	var target *gateway.Target
	if pool != nil {
		target = pool.Pick(0)
		u = target.URL
	}
	up := e.upstreamOf(u, pool)
	ctx := x.ctx
	req := &ctx.Request
	if e.g.AccessLogged() {
		// The request is rewritten in place below; the log keeps what
		// the client sent.
		v.Host = strings.Clone(v.Host)
		v.Path = strings.Clone(v.Path)
		v.RawPath = strings.Clone(v.RawPath)
	}
	clientClose := req.Header.ConnectionClose() || !req.Header.IsHTTP11() && !bytes.EqualFold(req.Header.Peek("Connection"), []byte("keep-alive"))
	rewriteRequest(ctx, up, v, m.PeerTrusted)

	resp := &ctx.Response
	if x.bodyErr != nil {
		// The body, read for an estimate, could not be read whole: it
		// goes to no upstream.
		e.clientBodyFailed(x, f, x.bodyErr)
		return false
	}
	var err error
	var tried uint64
	f.UpstreamBegan()
	for attempt := 0; ; attempt++ {
		var later, reused bool
		if target != nil {
			tried |= pool.Bit(target)
			pool.Start(target)
		}
		later, reused, err = e.exchangeUpstream(x, f, rec, up, clientClose)
		if err != nil && e.clientBodyFailed(x, f, err) {
			// The client's body failed, not the upstream.
			if target != nil {
				pool.Abandoned(target)
			}
			f.UpstreamEnded()
			return false
		}
		if target != nil {
			pool.Done(target, x.status, err)
		}
		if err == nil {
			if !later {
				f.UpstreamEnded()
			}
			return later
		}
		// An attempt that timed out waiting for its answer is not sent
		// again (gateway.Pool.Retry); one that found no connection free
		// sent nothing.
		answerTimedOut := isTimeout(err) && !errors.Is(err, fasthttp.ErrNoFreeConns)
		if target != nil && pool.Retry(tried, gateway.NotSent(err), gateway.Idempotent(v.Method) && !req.IsBodyStream() && !answerTimedOut) {
			// Another target of the pool, when one is left.
			if next := pool.Pick(tried); next != nil {
				e.log.Warn("gateway: upstream target failed; trying another", "route", route, "target", target.Name(), "err", err)
				target = next
				up = e.upstreamOf(next.URL, pool)
				req.Header.SetHost(up.host)
				continue
			}
		}
		// A request without a body that met a kept-alive connection the
		// upstream had just closed is sent again, on another, when its
		// method may be sent twice: the upstream may have read it and
		// acted on it before it closed (a POST reaches it once, and its
		// client gets a 502, as net/http's transport and NGINX do). A
		// connection found closed before the request went is not this
		// case: it is closed and another taken before anything is sent.
		if !reused || attempt > 0 || req.IsBodyStream() || len(req.Body()) > 0 || !staleConn(err) || !gateway.Idempotent(v.Method) {
			break
		}
		if target != nil {
			tried &^= pool.Bit(target) // the same target, on a fresh connection
		}
	}
	status := e.failedUpstream(f, rec, up, err)
	resp.Reset()
	x.Answer(status, gateway.Body(status), false)
	if req.IsBodyStream() || clientClose {
		ctx.SetConnectionClose() // the body may be half read
	}
	return false
}

// failedUpstream ends the upstream's part of a request that no upstream
// answered, with err: counted, logged, its reservation given back; it
// returns the status its client gets, 504 when the wait for the answer
// timed out, else 502.
func (e *Engine) failedUpstream(f *gateway.Flow, rec *gateway.Recorder, up *upstream, err error) int {
	route := f.Match().Route
	f.UpstreamEnded()
	e.g.UpstreamAnswered(route, 0)
	if rec != nil {
		rec.SetNoAnswer() // a reservation of the request is given back
	}
	if isTimeout(err) {
		f.UpstreamStatus(504)
		e.log.Warn("gateway: upstream timeout", "route", route, "upstream", up.host, "err", err)
		return 504
	}
	f.UpstreamStatus(502)
	e.log.Warn("gateway: upstream error", "route", route, "upstream", up.host, "err", err)
	return 502
}

// clientBodyFailed answers x when err says its client's body failed
// (gateway.ClientBodyFailed), and reports whether it did: no answer (the
// connection is closed at once), or a 400 after which it is closed.
func (e *Engine) clientBodyFailed(x *exchange, f *gateway.Flow, err error) bool {
	failed, status, body := e.g.ClientBodyFailed(f, err)
	if !failed {
		return false
	}
	ctx := x.ctx
	ctx.Response.Reset()
	ctx.SetConnectionClose()
	if status == 0 {
		x.status = statusClientGone
		if c := ctx.Conn(); c != nil {
			_ = c.Close() // as readError for a client too slow: no answer
		}
		return true
	}
	x.Answer(status, body, false)
	return true
}

// clientBodyError marks err, from a read of the client's body stream, as
// the client's, with fasthttp's errors as the gateway reads them: a
// timeout of the connection, and what broke a chunked body off.
// fasthttp.ErrBrokenChunk holds its cause without unwrapping it; it says
// "unexpected EOF" for a body that ended early and starts "cannot read"
// for a read of the connection that failed (both the client's leaving or
// stalling, not its framing). Any other is the framing's fault; a
// message fasthttp might word otherwise one day reads as that, which
// still blames the client and closes its connection, with a 400 that a
// client gone never reads.
func clientBodyError(err error, chunked bool) error {
	if err == nil || err == io.EOF {
		return err
	}
	if errors.Is(err, fasthttp.ErrTimeout) {
		err = os.ErrDeadlineExceeded
	}
	var bc fasthttp.ErrBrokenChunk
	if errors.As(err, &bc) {
		if msg := bc.Error(); msg == io.ErrUnexpectedEOF.Error() || strings.HasPrefix(msg, "cannot read") {
			err = io.ErrUnexpectedEOF
		}
	}
	return gateway.ClientBodyError(err, chunked)
}

// exchangeUpstream sends the request to the upstream and sets the answer
// from its response. It returns true when the body is streamed (the
// request finishes when the stream ends); an error means no answer was
// set, and reused that the request went over a connection kept from an
// earlier one.
func (e *Engine) exchangeUpstream(x *exchange, f *gateway.Flow, rec *gateway.Recorder, up *upstream, clientClose bool) (later, reused bool, err error) {
	route := f.Match().Route
	ctx := x.ctx
	req, resp := &ctx.Request, &ctx.Response
	hc := up.hc
	cc, err := hc.AcquireConn(0, false)
	if err != nil {
		return false, false, err // a dial error: nothing was sent
	}
	withBytes := 0 // kept connections closed for bytes no request asked for
	var (
		c  net.Conn
		uc *upConn
		br answerReader
		// broken says the request's write failed and its answer came
		// before: the connection is closed after the answer.
		broken bool
	)
	// A kept connection that has bytes no request asked for, or has
	// ended, is closed, and the next one taken (a fresh one at the latest:
	// the pool empties).
	for tries := 0; ; tries++ {
		if tries > 0 {
			if cc, err = hc.AcquireConn(0, false); err != nil {
				return false, false, err
			}
		}
		c = cc.Conn()
		uc = connOf(c)
		// A request without a body over a kept plain connection is sent
		// by the first read of its answer, which checks that the socket
		// is quiet first (sending nothing when it is not: Unsent) and then
		// waits for the answer without a read that could only find
		// nothing. The check comes after the read's reset of the socket's
		// readiness, so bytes that come between them are not missed.
		raw := uc.raw(c)
		first := raw != nil && uc.used && headOnly(req)
		if uc != nil && uc.used && !first {
			if what := unasked(uc); what != rawconn.Nothing {
				hc.CloseConn(cc)
				if e.closedKept(what, &withBytes, route, up) {
					return false, true, errUnasked
				}
				continue
			}
		}
		reused = uc != nil && uc.used
		if uc != nil {
			uc.used = true
		}
		// A write deadline is moved only when less than half the upstream
		// timeout is left of it (upConn.Write): the request is mostly
		// written without moving one.
		if first {
			req.Header.Del(fasthttp.HeaderContentLength)
			raw.SendFirst(req.Header.Header())
			err = uc.readDeadline(c, up.timeout)
		} else {
			bw := hc.AcquireWriter(c)
			var waited time.Duration
			err = writeRequest(bw, req, &waited)
			hc.ReleaseWriter(bw)
			f.UpstreamBodyWaited(waited) // the client's pace, not the upstream's
			if err == nil {
				err = uc.readDeadline(c, up.timeout)
			}
		}
		// errors.AsType, not errors.As: As's target would be allocated on
		// every request, the answered ones too.
		if _, ok := errors.AsType[*writeError](err); ok && uc.readDeadline(c, up.timeout) == nil {
			// The upstream stopped taking the request: it may have
			// answered before reading all of it (a failed login or a 413
			// refused before the body, then its connection closed), and
			// that answer is the request's, as net/http's transport reads
			// it. Found none, the request failed as its write did.
			early := answerReader{Reader: hc.AcquireReader(c), hc: hc, c: c, pooled: true}
			resp.Reset()
			resp.Header.SetNoDefaultContentType(true)
			if early.head(&resp.Header) != nil {
				early.release()
				hc.CloseConn(cc)
				return false, reused, err
			}
			br, err, broken = early, nil, true
			clientClose = true // the client's body may be half read
			break
		}
		if err != nil {
			hc.CloseConn(cc)
			return false, reused, err
		}
		br = answerReader{Reader: hc.AcquireReader(c), hc: hc, c: c, pooled: true}
		resp.Reset()
		// An answer without a Content-Type reaches the client without one
		// (Reset brought fasthttp's default back).
		resp.Header.SetNoDefaultContentType(true)
		err = br.head(&resp.Header)
		if !first {
			break
		}
		if what := raw.Unsent(); what != rawconn.Nothing {
			br.release()
			hc.CloseConn(cc)
			if e.closedKept(what, &withBytes, route, up) {
				return false, true, errUnasked
			}
			continue
		}
		break
	}
	return answerUpstream(e, x, f, rec, up, clientClose, hc, cc, c, uc, br, broken, reused, err)
}

// connPool is a pool of upstream connections of type C
// (fasthttp.HostClient's).
type connPool[C any] interface {
	CloseConn(C)
	ReleaseConn(C)
}

// answerUpstream reads the rest of the upstream's answer to x and sets
// x's answer from it, as exchangeUpstream says. Its head was read into
// the response's header, ending with err; it came over c (uc), the
// connection cc of hc, read through br; broken says the request's write
// failed and this answer came before, reused that the connection was kept
// from an earlier request.
func answerUpstream[C any](e *Engine, x *exchange, f *gateway.Flow, rec *gateway.Recorder, up *upstream, clientClose bool,
	hc connPool[C], cc C, c net.Conn, uc *upConn, br answerReader, broken, reused bool, err error) (later, reusedConn bool, _ error) {
	route := f.Match().Route
	ctx := x.ctx
	req, resp := &ctx.Request, &ctx.Response
	// Interim answers (100 Continue, 102 Processing, 103 Early Hints) are
	// read past, as many as come before the upstream's timeout (an upstream
	// may say 102 every second of a slow request, as net/http's transport
	// reads them), up to the bound of one answer's head in all.
	for interim := 0; err == nil && resp.StatusCode() >= 100 && resp.StatusCode() < 200; {
		interim += len(resp.Header.Header())
		if interim > floodgate.UpstreamHeadBytes || resp.StatusCode() == 101 {
			err = errUnexpectedInterim
			break
		}
		err = br.head(&resp.Header) // the next one
	}
	if low, ok := errors.AsType[*lowStatusError](err); ok {
		// Answered, and counted as answered, with a status no client can
		// be given (fasthttp reads 000 as 200): 502, and no answer began,
		// so a reservation is given back, as on net/http.
		br.release()
		hc.CloseConn(cc)
		e.g.UpstreamAnswered(route, low.status)
		f.UpstreamStatus(http.StatusBadGateway)
		e.log.Warn("gateway: upstream error", "route", route, "upstream", up.host, "err", err)
		if rec != nil {
			rec.SetNoAnswer()
		}
		resp.Reset()
		x.Answer(http.StatusBadGateway, gateway.Body(http.StatusBadGateway), false)
		if clientClose {
			resp.SetConnectionClose()
		}
		return false, true, nil
	}
	if err != nil {
		br.release()
		hc.CloseConn(cc)
		return false, reused, err
	}
	status := resp.StatusCode()
	f.UpstreamStatus(status)
	e.g.UpstreamAnswered(route, status)
	upstreamClose := resp.Header.ConnectionClose() || broken
	resp.Header.ResetConnectionClose()
	// The client is answered in the gateway's own version, HTTP/1.1, with
	// the status's own reason phrase, whatever the upstream spoke (an
	// HTTP/1.0 upstream's answer keeps the client's connection), as
	// net/http's proxy and NGINX answer.
	resp.Header.SetProtocol(nil)
	resp.Header.SetStatusMessage(nil)
	stripHopResponse(&resp.Header)
	if clientClose {
		resp.Header.SetConnectionClose()
	}
	x.status = status
	if rec != nil {
		rec.Header(status, (*respHeader)(&resp.Header))
	}
	n := resp.Header.ContentLength()
	head := req.Header.IsHead()
	noBody := head || status == 204 || status == 304
	if noBody || n >= 0 && n <= edgeBufferBytes && !isEventStream(&resp.Header) {
		if !noBody {
			err = readWhole(resp, br.Reader, n, uc, c, up.timeout)
		}
		leftover := br.Buffered() > 0 // more than the answer: the connection is not reused
		br.release()
		if err != nil || upstreamClose || leftover {
			hc.CloseConn(cc)
		} else {
			hc.ReleaseConn(cc)
		}
		if head {
			resp.SkipBody = true
		}
		if noBody && f.Request().Proto == "HTTP/1.0" {
			// An HTTP/1.0 client is sent no transfer coding (RFC 9112
			// §6.1), not even in the head of a HEAD's answer, which says
			// what a GET would get (untilClose).
			resp.Header.Del(fasthttp.HeaderTransferEncoding)
		}
		if err != nil {
			// The upstream's status is known: its answer began, and the
			// reservation is settled by it, and by the cost what came of
			// the body before the cut told, if it told one.
			e.log.Warn("gateway: upstream body", "route", route, "upstream", up.host, "err", err)
			if rec != nil {
				rec.Read(resp.Body())
			}
			resp.Reset()
			x.Answer(502, gateway.Body(502), false)
			// The request is counted by the upstream's status, as its
			// reservation is and as on net/http: a penalty rule's offence
			// (count_on), the access log (so a replay counts it alike)
			// and the pool's health see it, not the 502 its client gets.
			x.status = status
			if clientClose {
				resp.SetConnectionClose()
			}
			return false, true, nil
		}
		x.addFields()
		body := resp.Body()
		x.bytes = int64(len(body))
		if rec != nil {
			rec.Read(body)
			rec.SetComplete()
		}
		return false, true, nil
	}
	// Streamed: the request finishes when the body has been written to
	// the client (edgeBody.CloseWithError). The body may take its time
	// (an event stream): no deadline.
	if err := uc.noDeadline(c); err != nil {
		br.release()
		hc.CloseConn(cc)
		return false, reused, err
	}
	x.addFields()
	bodyCame := br.Buffered() > 0 // the body's first bytes came with the head
	ur := fasthttp.AcquireResponse()
	ur.StreamBody = true
	resp.Header.CopyTo(&ur.Header)
	_ = ur.ReadBody(br.Reader, 0)
	b := &body{e: e, x: x, rec: rec, ur: ur, r: ur.BodyStream(), conn: c, uc: uc}
	rd := br // the stream's own: br stays on this call's stack
	b.release = func(closeIt bool) {
		leftover := rd.Buffered() > 0
		rd.release()
		if closeIt || upstreamClose || leftover {
			hc.CloseConn(cc)
		} else {
			hc.ReleaseConn(cc)
		}
	}
	if n == -2 {
		n = -1 // until the upstream closes: chunked to the client
	}
	if ec, ok := ctx.Conn().(*conn); ok {
		b.client = ec
		// fasthttp writes to the client only as the upstream sends: a
		// client that leaves a stream the upstream keeps silent (an event
		// stream between events, a long poll) is seen by the watch, or
		// the request would hold its leases, its reservation and its
		// upstream connection until the upstream next writes.
		b.watchClient(ec, rec != nil && rec.ReadsBody())
	}
	if n < 0 && f.Request().Proto == "HTTP/1.0" {
		e.untilClose(ctx, b)
		return true, true, nil
	}
	resp.SetBodyStream(b, n)
	// The head of an answer of unknown length or an event stream goes out
	// at once, not with the body's first bytes, when those have not come
	// with it: an event stream's or a long poll's client learns that its
	// answer began (an EventSource opens; a proxy in front sees its first
	// byte) however long the first event takes, as on net/http (whose
	// proxy flushes those two kinds at once) and NGINX. A body that came
	// with its head (a small chunked answer, most often) goes out with it
	// in one write, and so does a long body of known length, as on
	// net/http.
	resp.ImmediateHeaderFlush = (n < 0 || isEventStream(&resp.Header)) && !bodyCame
	return true, true, nil
}

// untilClose answers an HTTP/1.0 client whose answer has a body of
// unknown length (an upstream's chunked answer, an event stream, one that
// runs until the upstream closes) with that body as it comes, ended by
// the connection's close: no chunked coding, which an HTTP/1.0 client
// cannot read (RFC 9112 §7: it would take the chunks' size lines for the
// body), and which fasthttp writes for any body of unknown length. The
// connection is taken from fasthttp (hijacked) once the handler returns,
// its answer written by the engine, and closed after it, as net/http's
// server answers such a client; the request finishes when the body ends
// (body.CloseWithError), as it does when fasthttp writes it.
func (e *Engine) untilClose(ctx *fasthttp.RequestCtx, b *body) {
	h := &ctx.Response.Header
	h.Del(fasthttp.HeaderTransferEncoding)
	h.SetContentLength(-2) // until the close, which it says
	h.SetConnectionClose()
	ec := b.client
	e.closing.Add(1)
	if ec != nil {
		ec.noPark = true // the engine's from now on
		ec.untilClose.Store(b)
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		if ec != nil && ec.untilClose.Swap(nil) == nil {
			return // closed before it came here (conn.Close)
		}
		defer e.closing.Add(-1)
		if ec != nil && !ec.wEnd.IsZero() {
			// fasthttp cleared the deadlines as it let the connection go:
			// the write timeout (server.timeouts.write) holds, as for an
			// answer fasthttp writes. The send bound moves with each part
			// of the body (body.Read).
			_ = ec.SetWriteDeadline(ec.wEnd)
		}
		_, err := c.Write(h.Header())
		if err == nil {
			bp := bufpool.Copy.Get()
			buf := bp[:16<<10]
			for {
				n, rerr := b.Read(buf)
				if n > 0 {
					if _, err = c.Write(buf[:n]); err != nil {
						break
					}
				}
				if rerr != nil {
					if rerr != io.EOF {
						err = rerr
					}
					break
				}
			}
			bufpool.Copy.Put(bp)
		}
		_ = b.CloseWithError(err)
		_ = c.Close()
	})
}

// waitUntilClose waits, until ctx ends, for the answers streamed until
// their connection closes (untilClose) to end, as fasthttp's Shutdown
// waits for the answers it writes.
func (e *Engine) waitUntilClose(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for e.closing.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// readWhole reads an answer's body of n bytes (at most edgeBufferBytes)
// into resp. A body that came with its head, nearly every one, is taken
// at once; one still coming waits at most about d (between d/2 and d)
// for each part of it, from when the part before came: an upstream that
// sends a short body slowly but steadily has answered in time, as on
// net/http (which streams it) and as for a longer body (streamed here),
// and one that stalls is cut by that wait (502).
func readWhole(resp *fasthttp.Response, r *bufio.Reader, n int, uc *upConn, c net.Conn, d time.Duration) error {
	for first := true; n > 0; first = false {
		b, err := bodyPart(r, n, uc, c, d, first)
		if err != nil {
			return err
		}
		resp.AppendBody(b)
		_, _ = r.Discard(len(b))
		n -= len(b)
	}
	return nil
}

// appendWhole is readWhole appending the body to dst.
func appendWhole(dst []byte, r *bufio.Reader, n int, uc *upConn, c net.Conn, d time.Duration) ([]byte, error) {
	for first := true; n > 0; first = false {
		b, err := bodyPart(r, n, uc, c, d, first)
		if err != nil {
			return dst, err
		}
		dst = append(dst, b...)
		_, _ = r.Discard(len(b))
		n -= len(b)
	}
	return dst, nil
}

// bodyPart returns the next part of a body of which n bytes are left to
// read: what r holds of it, else what the connection sends next, waited
// for within d (the first part within the wait for the head). The caller
// takes it from r.
func bodyPart(r *bufio.Reader, n int, uc *upConn, c net.Conn, d time.Duration, first bool) ([]byte, error) {
	if r.Buffered() == 0 {
		if !first {
			if err := uc.readDeadline(c, d); err != nil {
				return nil, err
			}
		}
		if _, err := r.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	b, _ := r.Peek(min(n, r.Buffered()))
	return b, nil
}

// writeRequest sends a request upstream. A body the client is still
// sending passes as it comes: the headers go at once, then each part of
// the body as it is read, so that the upstream sees a slow upload (and the
// request holds its place) while it lasts, as on net/http. It adds to
// waited how long it waited on the client's body (its reads).
func writeRequest(bw *bufio.Writer, req *fasthttp.Request, waited *time.Duration) error {
	if !req.IsBodyStream() {
		if headOnly(req) {
			// No body, none expected, no length sent: the head alone,
			// without the "Content-Length: 0" fasthttp gives every method
			// but GET and HEAD.
			req.Header.Del(fasthttp.HeaderContentLength)
			if err := req.Header.Write(bw); err != nil {
				return err
			}
			return bw.Flush()
		}
		if err := req.Write(bw); err != nil {
			return &writeError{err}
		}
		if err := bw.Flush(); err != nil {
			return &writeError{err}
		}
		return nil
	}
	body := req.BodyStream()
	n := req.Header.ContentLength()
	if n < 0 {
		req.Header.SetContentLength(-1) // chunked
	}
	if err := req.Header.Write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	bp := bufpool.Copy.Get()
	defer bufpool.Copy.Put(bp)
	buf := bp[:16<<10]
	left := int64(n)
	for n < 0 || left > 0 {
		p := buf
		if n >= 0 && int64(len(p)) > left {
			p = p[:left]
		}
		t := time.Now()
		m, err := body.Read(p)
		*waited += time.Since(t)
		if m > 0 {
			if n < 0 {
				fmt.Fprintf(bw, "%x\r\n", m)
			}
			if _, werr := bw.Write(p[:m]); werr != nil {
				return &writeError{werr}
			}
			if n < 0 {
				_, _ = bw.WriteString("\r\n")
			}
			if werr := bw.Flush(); werr != nil {
				return &writeError{werr}
			}
			left -= int64(m)
		}
		if errors.Is(err, io.EOF) {
			if n >= 0 && left > 0 {
				return clientBodyError(io.ErrUnexpectedEOF, false)
			}
			break
		}
		if err != nil {
			return clientBodyError(err, n < 0) // the client's, not the upstream's
		}
	}
	if n < 0 {
		if _, err := bw.WriteString("0\r\n\r\n"); err != nil {
			return &writeError{err}
		}
	}
	if err := bw.Flush(); err != nil {
		return &writeError{err}
	}
	return nil
}

// writeError is a failure to write a request's body upstream, its head
// sent: the upstream may have answered before it stopped taking the body.
type writeError struct{ err error }

func (e *writeError) Error() string {
	return "gateway: upstream: writing the request body: " + e.err.Error()
}

func (e *writeError) Unwrap() error { return e.err }

// headOnly reports whether req goes upstream as its head alone: no body,
// none expected, no length sent.
func headOnly(req *fasthttp.Request) bool {
	return !req.IsBodyStream() && len(req.Body()) == 0 && !bodyMethod(req.Header.Method()) &&
		!hasField(req.Header.RawHeaders(), "content-length")
}

// upConn is an upstream connection; used says whether a request went over
// it before.
type upConn struct {
	net.Conn     // a rawconn.Conn: read and written with raw system calls
	fd       int // its descriptor, for unasked (-1: none)
	used     bool
	deadline time.Time // the read deadline set, zero for none
	// writeBound bounds each write's wait for the upstream to take its
	// bytes (the upstream timeout; 0: none); writeDeadline is the write
	// deadline set, in Unix nanoseconds (0: none).
	writeBound    time.Duration
	writeDeadline atomic.Int64
}

// SetDeadline sets the connection's deadlines, and keeps the write
// deadline for Write.
func (u *upConn) SetDeadline(t time.Time) error {
	u.keepWriteDeadline(t)
	return u.Conn.SetDeadline(t)
}

// SetWriteDeadline sets the write deadline, and keeps it for Write.
func (u *upConn) SetWriteDeadline(t time.Time) error {
	u.keepWriteDeadline(t)
	return u.Conn.SetWriteDeadline(t)
}

func (u *upConn) keepWriteDeadline(t time.Time) {
	if t.IsZero() {
		u.writeDeadline.Store(0)
	} else {
		u.writeDeadline.Store(t.UnixNano())
	}
}

// Write writes b, within the write bound: an upstream that reads nothing
// of a request's body (a process stopped, or one that never reads) fails
// the request instead of holding it, its client and its concurrency slot
// for ever, as the wait for the answer would only begin once the request
// is written. The deadline is moved only when less than half the bound is
// left, so each write may wait between half the bound and the bound.
func (u *upConn) Write(b []byte) (int, error) {
	if u.writeBound > 0 {
		now := time.Now()
		if d := u.writeDeadline.Load(); d == 0 || time.Duration(d-now.UnixNano()) <= u.writeBound/2 {
			t := now.Add(u.writeBound)
			u.writeDeadline.Store(t.UnixNano())
			if err := u.Conn.SetWriteDeadline(t); err != nil {
				return 0, err
			}
		}
	}
	return u.Conn.Write(b)
}

// raw returns the raw reader and writer of u when c, the connection a
// request goes over, is u itself (not TLS over it) and is read with raw
// system calls; nil otherwise.
func (u *upConn) raw(c net.Conn) *rawconn.IO {
	if u == nil || c != net.Conn(u) {
		return nil
	}
	if rc, ok := u.Conn.(*rawconn.Conn); ok {
		return rc.Raw()
	}
	return nil
}

// readDeadline bounds the wait for the response's headers to about d
// (between d/2 and d): the deadline is moved only when less than d/2 of
// it is left, so that a busy connection sets one every d/2, not one per
// request.
func (u *upConn) readDeadline(c net.Conn, d time.Duration) error {
	now := time.Now()
	if u != nil && !u.deadline.IsZero() && u.deadline.Sub(now) > d/2 {
		return nil
	}
	t := now.Add(d)
	if u != nil {
		u.deadline = t
	}
	return c.SetReadDeadline(t)
}

// noDeadline lets a response's body take its time.
func (u *upConn) noDeadline(c net.Conn) error {
	if u != nil {
		u.deadline = time.Time{}
	}
	return c.SetReadDeadline(time.Time{})
}

// errUnexpectedInterim is a 101 to a request that upgrades nothing, or
// interim answers over the bound of an answer's head in all.
var errUnexpectedInterim = errors.New("gateway: upstream: unexpected 1xx answer")

// answerReader reads an upstream's answer: from a reader of the pool, or,
// once a head did not fit in its buffer, from one of UpstreamHeadBytes
// over what it held and the connection.
type answerReader struct {
	*bufio.Reader
	hc     *fasthttp.HostClient
	c      net.Conn // the upstream connection
	pooled bool
}

// head reads an answer's head into h. A head too long for the pooled
// reader's buffer (16 KiB, enough for nearly every answer) is read again
// with a buffer of UpstreamHeadBytes, held only by this answer; one too
// long for that is an error (502).
func (r *answerReader) head(h *fasthttp.ResponseHeader) error {
	if err := r.bareLF(); err != nil {
		return err
	}
	low := r.lowStatus()
	err := h.Read(r.Reader)
	if err == nil || !r.pooled {
		return low.or(err)
	}
	if small := (*fasthttp.ErrSmallBuffer)(nil); !errors.As(err, &small) {
		return err
	}
	r.over(nil, 0) // the head so far, in a larger buffer
	if err := r.bareLF(); err != nil {
		return err
	}
	low = r.lowStatus()
	return low.or(h.Read(r.Reader))
}

// lowStatusError is an answer whose status line has three digits below
// 100 (000 to 099): no status a client can be given, which fasthttp
// passes on (and reads 000 as 200).
type lowStatusError struct{ status int }

func (e *lowStatusError) Error() string {
	return fmt.Sprintf("gateway: upstream: status %03d is below 100", e.status)
}

// or returns err, or e when err is nil and e is not: a head read whole
// whose status is below 100.
func (e *lowStatusError) or(err error) error {
	if err == nil && e != nil {
		return e
	}
	return err
}

// lowStatus returns the status of the answer's head that r holds (its
// first line that is not empty, as fasthttp reads it) when it is three
// digits below 100, else nil.
func (r *answerReader) lowStatus() *lowStatusError {
	b, _ := r.Peek(r.Buffered())
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			b = rest
			continue
		}
		_, code, ok := bytes.Cut(line, []byte(" "))
		code = bytes.TrimLeft(code, " ")
		if !ok || len(code) < 3 || code[0] != '0' || code[1] < '0' || code[1] > '9' || code[2] < '0' || code[2] > '9' ||
			len(code) > 3 && code[3] != ' ' {
			return nil
		}
		return &lowStatusError{status: int(code[1]-'0')*10 + int(code[2]-'0')}
	}
	return nil
}

// over makes r read head, then what its reader holds past skip bytes,
// then the connection, through a reader of UpstreamHeadBytes held by
// this answer alone (the pooled one goes back).
func (r *answerReader) over(head []byte, skip int) {
	_, _ = r.Discard(skip)
	held, _ := r.Peek(r.Buffered())
	rest := io.MultiReader(bytes.NewReader(head), bytes.NewReader(bytes.Clone(held)), r.c)
	if r.pooled {
		r.hc.ReleaseReader(r.Reader)
	}
	r.Reader, r.pooled = bufio.NewReaderSize(rest, floodgate.UpstreamHeadBytes), false
}

// bareLF lets an answer's head whose lines end in a bare LF be read:
// fasthttp reads a head only up to a CRLF CRLF, and would wait for one
// after a head that ends with an empty line of LF alone, until the
// upstream's timeout. RFC 9112 §2.2 lets a recipient take LF alone as a
// line's end, as net/http's transport and NGINX do; such a head is
// rewritten with CRLFs, in a buffer of its own. A head of CRLFs alone,
// nearly every one, is left as it is. A read that finds nothing returns
// its error as fasthttp names it (a timeout, or io.EOF for any other);
// what else cannot be read (a head cut short, or longer than the
// reader's buffer) is left for fasthttp to report.
func (r *answerReader) bareLF() error {
	var s headScan
	for n := 1; ; n = r.Buffered() + 1 {
		if b, err := r.Peek(n); len(b) < n {
			switch {
			case len(b) > 0:
				return nil // cut short, or too long: fasthttp reports it
			case isTimeout(err):
				return fasthttp.ErrTimeout
			}
			return io.EOF
		}
		b, _ := r.Peek(r.Buffered())
		end, crlf := s.end(b)
		if crlf {
			return nil
		}
		if end > 0 {
			r.over(withCRLF(b[:end]), end)
			return nil
		}
	}
}

// headScan finds the end of an answer's head, its first empty line,
// whatever ends its lines, in bytes that grow from one look to the next:
// each look begins where the one before stopped, so a head that comes a
// byte at a time is looked at once in all.
type headScan struct {
	from int  // where the next look begins
	bare bool // a line so far ends in LF alone
}

// end returns the length of the head that b begins with (0 when b holds
// no empty line yet) and whether every line of it ends in CRLF (fasthttp
// reads it then). b is what the look before saw, and more.
func (s *headScan) end(b []byte) (end int, crlf bool) {
	for {
		j := bytes.IndexByte(b[s.from:], '\n')
		if j < 0 {
			s.from = len(b)
			return 0, false
		}
		p := s.from + j
		if p == 0 || b[p-1] != '\r' {
			s.bare = true
		}
		switch {
		case p+1 < len(b) && b[p+1] == '\n':
			return p + 2, false
		case p+2 < len(b) && b[p+1] == '\r' && b[p+2] == '\n':
			return p + 3, !s.bare
		case p+1 == len(b) || p+2 == len(b) && b[p+1] == '\r':
			s.from = p // what follows this LF is yet to come
			return 0, false
		}
		s.from = p + 1
	}
}

// withCRLF returns head with each LF that no CR comes before made a CRLF.
func withCRLF(head []byte) []byte {
	out := make([]byte, 0, len(head)+bytes.Count(head, []byte{'\n'}))
	for i, c := range head {
		if c == '\n' && (i == 0 || head[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, c)
	}
	return out
}

// release gives a pooled reader back.
func (r *answerReader) release() {
	if r.pooled {
		r.hc.ReleaseReader(r.Reader)
	}
}

// closedKept notes a kept connection closed for what it held before a
// request went on it, and reports whether the request gives up. Bytes are
// logged and counted in *withBytes: the request gives up once more than
// maxUnasked connections had them (an upstream, or a client through it,
// may send them again and again). An end is how an upstream closes an
// idle connection (its idle timeout, a restart, which ends every
// connection kept to it): it is not counted, and the pool, which loses the
// connection, is what bounds those.
func (e *Engine) closedKept(what rawconn.Leftover, withBytes *int, route string, up *upstream) bool {
	if what != rawconn.Bytes {
		return false
	}
	if held, ok := e.unaskedLog.Pass(time.Now()); ok {
		e.log.Warn("gateway: upstream sent bytes no request asked for; its connection is closed",
			"route", route, "upstream", up.host, "held_back", held)
	}
	*withBytes++
	return *withBytes > maxUnasked
}

// errUnasked: every kept connection tried had bytes no request asked for.
var errUnasked = errors.New("gateway: upstream: kept connections hold answers no request asked for")

// maxUnasked bounds the kept connections closed for a request before it
// gives up (502): each had bytes no request asked for.
const maxUnasked = 16

// connOf returns the upConn of a connection to an upstream, under its TLS
// when it has one (nil for another kind of connection).
func connOf(c net.Conn) *upConn {
	if t, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = t.NetConn()
	}
	u, _ := c.(*upConn)
	return u
}

// rewriteEdgeRequest turns the client's request into the upstream's, in
// place, as the net/http engine's reverse proxy does: the upstream's host
// and path prefix, hop-by-hop fields removed, X-Forwarded-For set and
// X-Forwarded-Host and -Proto set. The client's own X-Forwarded-For and
// X-Real-IP pass only from a trusted proxy (trusted): from any other peer
// X-Forwarded-For is the peer alone and X-Real-IP is removed.
// X-Forwarded-Host is the host the request was routed and limited by
// (v.Host: an absolute-form target's, else the Host field's).
func rewriteRequest(ctx *fasthttp.RequestCtx, up *upstream, v *gateway.Request, trusted bool) {
	req := &ctx.Request
	h := &req.Header
	seen := stripHopRequest(h)
	xff := seen.xff
	h.ResetConnectionClose()
	h.SetNoDefaultContentType(true) // a body without a type goes on without one
	switch {
	case v.Peer.IsValid():
		// The chain of proxies, and this hop: as NGINX's
		// $proxy_add_x_forwarded_for and net/http's SetXForwarded, from a
		// trusted proxy; from another peer, the peer alone (NGINX's
		// $remote_addr).
		var buf [64]byte
		b := buf[:0]
		if xff && trusted {
			for _, p := range h.PeekAll("X-Forwarded-For") {
				b = append(b, p...)
				b = append(b, ", "...)
			}
		}
		if v.PeerText != "" {
			b = append(b, v.PeerText...) // the connection's, written once
		} else {
			b = v.Peer.AppendTo(b)
		}
		setOnce(h, xForwardedFor, b, xff)
	case xff && !trusted:
		delStable(h, xForwardedFor)
	}
	if seen.realIP && !trusted {
		delStable(h, xRealIP)
	}
	if len(v.Host) > 0 {
		setOnce(h, xForwardedHost, s2b(v.Host), seen.host)
	} else if seen.host {
		delStable(h, xForwardedHost)
	}
	if ec, ok := ctx.Conn().(*conn); ok && ec.tls {
		setOnce(h, xForwardedProto, schemeHTTPS, seen.proto)
	} else {
		setOnce(h, xForwardedProto, schemeHTTP, seen.proto)
	}
	raw := h.RequestURI()
	if len(raw) == 0 || raw[0] != '/' {
		// Of an absolute-form target, its path and query as the client
		// sent them (gateway.OriginPath), as net/http's reverse proxy
		// forwards them: fasthttp's own (req.URI().RequestURI()) has the
		// path decoded and cleaned, so an escaped slash the gateway read
		// inside its segment (server.escaped_slash: segment) would reach
		// the upstream as a slash.
		raw = s2b(gateway.OriginPath(b2s(raw)))
	}
	var buf [256]byte
	req.SetRequestURIBytes(appendUpstreamTarget(buf[:0], raw, up))
	h.SetHost(up.host)
	h.SetProtocol("HTTP/1.1") // what the upstream is spoken to in, whatever the client spoke
}

// setOnce sets the field key to value on one line, as net/http's
// Header.Set does: fasthttp's SetCanonical replaces the first of a
// client's lines and leaves the others, so an upstream that reads the last
// line (or joins them) would read what the client wrote. The client's
// lines are removed first when it sent the field (sent, as
// stripHopRequest saw), and only then: a removal is a look at every field.
func setOnce(h *fasthttp.RequestHeader, key, value []byte, sent bool) {
	if sent {
		delStable(h, key)
	}
	h.SetCanonical(key, value)
}

// appendUpstreamTarget appends the target a request goes upstream with:
// raw, its path and query as the client sent them, the path as the request
// was routed and limited, its dot segments resolved
// (gateway.ResolveDotSegments), joined with the upstream's path and query
// (appendTarget).
func appendUpstreamTarget(dst, raw []byte, up *upstream) []byte {
	path, query, hasQuery := bytes.Cut(raw, []byte("?"))
	if p, ok := gateway.ResolveDotSegments(b2s(path)); ok {
		resolved := append([]byte(p), query...)
		if hasQuery {
			resolved = append(append([]byte(p), '?'), query...)
		}
		raw = resolved
	}
	if up.base != "" || up.query != "" {
		return appendTarget(dst, up.base, up.query, raw)
	}
	return append(dst, raw...)
}

// appendTarget appends target prefixed with the upstream's path and its
// query merged with the upstream's, as net/http's reverse proxy joins them.
func appendTarget(out []byte, base, query string, target []byte) []byte {
	path, q, hasQ := bytes.Cut(target, []byte("?"))
	out = append(out, base...)
	if len(path) == 0 || path[0] != '/' {
		out = append(out, '/')
	}
	out = append(out, path...)
	switch {
	case query != "" && hasQ && len(q) > 0:
		out = append(out, '?')
		out = append(out, query...)
		out = append(out, '&')
		out = append(out, q...)
	case query != "":
		out = append(out, '?')
		out = append(out, query...)
	case hasQ:
		out = append(out, '?')
		out = append(out, q...)
	}
	return out
}

// hopNames are the hop-by-hop fields (RFC 9110 7.6.1), Forwarded, which
// the proxy does not extend, and Expect, which the gateway answers itself
// (100 Continue once a request is admitted, as NGINX and Envoy do), as
// fasthttp names them; hopBit gives each a bit.
var hopNames = [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Upgrade", "Forwarded", "Expect"}

// hopBit returns the bit of a hop-by-hop field name in any case (a
// request's names are read as they came), 0 for another.
func hopBit(k []byte) uint16 {
	switch len(k) {
	case 2, 6, 7, 9, 10, 16, 18, 19:
		for i, n := range hopNames {
			if len(n) == len(k) && bytes.EqualFold(k, s2b(n)) {
				return 1 << i
			}
		}
	}
	return 0
}

// bodyMethod reports whether a request of the method is expected to have
// content (RFC 9110 8.6: its Content-Length is sent even when it is 0, as
// net/http's transport sends it).
func bodyMethod(m []byte) bool {
	return string(m) == http.MethodPost || string(m) == http.MethodPut || string(m) == http.MethodPatch
}

// fieldRemover is the header of a request or a response.
type fieldRemover interface {
	PeekAll(string) [][]byte
	DelBytes([]byte)
	AddBytesKV(key, value []byte)
}

// delStable removes the lines of the field key (in any case) from h and
// keeps the lines of every other name in their order. fasthttp's removal
// moves the header's last line into each place it empties, so two lines
// of one name after a removed one would reach their reader reversed (a
// list whose order means something: Accept, Link, Via, Cache-Control):
// when a name has two lines or more, its lines are removed and added
// again, in their order, after the others. A request's names are read
// from its head as it came (fasthttp's list of them would collect its
// Cookie lines into one), a response's from fasthttp's list; Cookie and
// Set-Cookie lines, which fasthttp keeps apart, are left as they are.
func delStable(h fieldRemover, key []byte) {
	var room [32][]byte
	seen, names := room[:0], [][]byte(nil)
	switch h := h.(type) {
	case *fasthttp.RequestHeader:
		for k := range fieldNames(h.RawHeaders()) {
			seen, names = repeated(seen, names, k, key, cookie)
		}
	case *fasthttp.ResponseHeader:
		for _, k := range h.PeekKeys() { // fasthttp's own room: no allocation
			seen, names = repeated(seen, names, k, key, setCookie)
		}
	}
	if len(names) == 0 {
		h.DelBytes(key)
		return
	}
	type line struct{ k, v []byte }
	var lines []line
	for _, n := range names {
		for _, v := range h.PeekAll(string(n)) {
			lines = append(lines, line{n, bytes.Clone(v)})
		}
	}
	h.DelBytes(key)
	for _, n := range names {
		h.DelBytes(n)
	}
	for _, l := range lines {
		h.AddBytesKV(l.k, l.v)
	}
}

// repeated adds k, a header's next name, to seen (the names so far, once
// each) or, when it is there already, to names (those of two lines or
// more, copied), but for key and skip. A request's names are those it
// came with, whose lines of one name are in their order as long as each
// removal keeps it.
func repeated(seen, names [][]byte, k, key, skip []byte) ([][]byte, [][]byte) {
	switch {
	case bytes.EqualFold(k, key) || bytes.EqualFold(k, skip) || containsFold(names, k):
	case containsFold(seen, k):
		names = append(names, bytes.Clone(k))
	default:
		seen = append(seen, k)
	}
	return seen, names
}

var cookie = []byte("Cookie")

var setCookie = []byte("Set-Cookie")

// containsFold reports whether names holds name, in any case.
func containsFold(names [][]byte, name []byte) bool {
	for _, n := range names {
		if bytes.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// stripHop removes the hop-by-hop fields found (hopBit's bits) of a
// request or a response, and those its Connection fields name (every one
// of them: a message may repeat the field), but for the fields that frame
// the message (framing): a Connection field naming Content-Length would
// otherwise have the body dropped on its way (fasthttp forgets a length
// removed), where net/http keeps a message's length apart from its fields
// and NGINX removes no field a Connection field names.
func stripHop(h fieldRemover, found uint16) {
	if found&1 != 0 {
		var named []string
		for _, v := range h.PeekAll("Connection") {
			for name := range strings.SplitSeq(string(v), ",") {
				name = strings.TrimSpace(name)
				if name != "" && !strings.EqualFold(name, "keep-alive") && !strings.EqualFold(name, "close") && !framing(name) {
					named = append(named, name)
				}
			}
		}
		for _, name := range named {
			delStable(h, s2b(name))
		}
	}
	for i, n := range hopNames {
		if found&(1<<i) != 0 {
			delStable(h, s2b(n))
		}
	}
}

// framing reports whether a field (its name in any case) frames a message
// or names its target, which no Connection field may have removed.
func framing(name string) bool {
	return strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Transfer-Encoding") ||
		strings.EqualFold(name, "Host")
}

// forwardingSeen says which of the fields the gateway sets or removes for
// its upstream a request came with.
type forwardingSeen struct {
	xff, realIP, host, proto bool // X-Forwarded-For, X-Real-IP, X-Forwarded-Host, -Proto
}

// stripHopRequest removes the hop-by-hop fields of a request, and
// Forwarded, after one look at its fields (a field is removed only when
// it is there); it reports which of the forwarding fields the request has.
func stripHopRequest(h *fasthttp.RequestHeader) (seen forwardingSeen) {
	var found uint16
	for k := range fieldNames(h.RawHeaders()) {
		found |= hopBit(k)
		switch len(k) {
		case len(xForwardedFor):
			seen.xff = seen.xff || bytes.EqualFold(k, xForwardedFor)
		case len(xRealIP):
			seen.realIP = seen.realIP || bytes.EqualFold(k, xRealIP)
		case len(xForwardedHost):
			seen.host = seen.host || bytes.EqualFold(k, xForwardedHost)
		case len(xForwardedProto):
			seen.proto = seen.proto || bytes.EqualFold(k, xForwardedProto)
		}
	}
	if found != 0 {
		stripHop(h, found)
	}
	return seen
}

// stripHopResponse removes the hop-by-hop fields of a response, and the
// fields whose name holds a space (RFC 9110 §5.1: a name is a token;
// fasthttp reads "X Bad: v" as a field named "X Bad", which no client
// can read as one, and net/http's server writes no such field). A lone
// "Connection: keep-alive" or "close" costs one removal.
func stripHopResponse(h *fasthttp.ResponseHeader) {
	var found uint16
	plain := true // no Connection field names another field
	spaced := false
	for k, v := range h.All() {
		b := hopBit(k)
		if b == 1 {
			plain = plain && (bytes.EqualFold(v, []byte("keep-alive")) || bytes.EqualFold(v, []byte("close")))
		}
		found |= b
		spaced = spaced || bytes.IndexByte(k, ' ') >= 0
	}
	if spaced {
		var names [][]byte
		for k := range h.All() {
			if bytes.IndexByte(k, ' ') >= 0 {
				names = append(names, bytes.Clone(k))
			}
		}
		for _, k := range names {
			delStable(h, k)
		}
	}
	found &^= 1 << 8 // Forwarded is the request's
	if found == 1 && plain {
		delStable(h, s2b(hopNames[0]))
		return
	}
	if found != 0 {
		stripHop(h, found)
	}
}

// isEventStream reports whether a response is a Server-Sent Events
// stream.
func isEventStream(h *fasthttp.ResponseHeader) bool {
	return bytes.HasPrefix(h.ContentType(), []byte("text/event-stream"))
}

// staleConn reports whether err says an idle connection was closed by the
// upstream before the request reached it.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrNoFreeConns)
}

// body streams an upstream's body to the client, telling the
// request's cost recorder what passes; when fasthttp has written it (or
// failed to), it gives the upstream connection back and finishes the
// request. When the client left first and the rest of the body may tell a
// reservation's cost, the rest is read and discarded, within the drain
// bounds, before that.
type body struct {
	e       *Engine
	x       *exchange
	rec     *gateway.Recorder
	ur      *fasthttp.Response
	r       io.Reader
	conn    net.Conn // the upstream connection
	client  *conn    // the client's, whose writes are bounded (nil: another engine's)
	uc      *upConn
	release func(closeIt bool) // gives the upstream connection back
	eof     bool
	upErr   bool // reading the upstream's body failed
	once    sync.Once
	// stopWatch ends the watch for the client leaving while the body
	// streams (nil: none); drainBy is when reading the upstream's body
	// ends once the client left (Unix nanoseconds, 0 while it is there).
	stopWatch func()
	drainBy   atomic.Int64
	// left says the watch saw the client leave and cut the upstream's
	// body off: the read that fails then is not the upstream's failure.
	left atomic.Bool
}

// watchClient watches the client's connection while the body streams. When
// the client leaves, the rest of the upstream's body is read only until the
// drain time has passed when it may tell a cost (drains), even if the
// upstream sends nothing more; otherwise reading it ends at once, and the
// request with it.
func (b *body) watchClient(ec *conn, drains bool) {
	gone, stop := ec.watch(true)
	quit := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		select {
		case <-gone:
			if drains {
				_ = b.conn.SetReadDeadline(time.Unix(0, b.drainDeadline()))
				return
			}
			b.left.Store(true)
			_ = b.conn.SetReadDeadline(time.Unix(1, 0)) // unblocks the read
		case <-quit:
		}
	}()
	b.stopWatch = func() {
		close(quit)
		<-ended
		stop()
	}
}

// drainDeadline returns when reading the upstream's body ends, now that
// the client left: the drain time from when that was first seen.
func (b *body) drainDeadline() int64 {
	b.drainBy.CompareAndSwap(0, time.Now().Add(b.e.drain.wait).UnixNano())
	return b.drainBy.Load()
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 && b.client != nil {
		// For the write of what this read brought: from now, not from
		// before the upstream's silence.
		b.client.boundWrite()
	}
	if n > 0 {
		b.x.bytes += int64(n)
		if b.rec != nil {
			b.rec.Read(p[:n])
		}
	}
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.upErr = !b.left.Load()
	}
	return n, err
}

// drain reads the rest of the upstream's body after the client left,
// within the drain bounds, for the cost it may tell.
func (b *body) drain() {
	bounds := b.e.drain
	if err := b.conn.SetReadDeadline(time.Unix(0, b.drainDeadline())); err != nil {
		return
	}
	if b.uc != nil {
		b.uc.deadline = time.Time{} // a later request sets its own
	}
	bp := bufpool.Copy.Get()
	defer bufpool.Copy.Put(bp)
	for left := bounds.bytes; left > 0; {
		p := bp[:min(int64(len(bp)), left)]
		n, err := b.r.Read(p)
		b.rec.Read(p[:n])
		left -= int64(n)
		if err == io.EOF {
			b.eof = true
			_ = b.conn.SetReadDeadline(time.Time{})
			return
		}
		if err != nil {
			return
		}
	}
}

// CloseWithError is called by fasthttp once the body is written, with the
// error that stopped it (nil when it was written whole).
func (b *body) CloseWithError(err error) error {
	b.once.Do(func() {
		if b.stopWatch != nil {
			b.stopWatch()
		}
		if b.rec != nil && !b.eof {
			if !b.upErr {
				b.rec.SetGone() // the client left first
				if b.rec.ReadsBody() {
					b.drain()
				}
			}
		}
		_ = b.ur.CloseBodyStream()
		fasthttp.ReleaseResponse(b.ur)
		b.release(!b.eof)
		if b.rec != nil && b.eof {
			b.rec.SetComplete()
		}
		b.x.f.UpstreamEnded()
		b.e.finish(b.x)
	})
	return nil
}

// respHeader reads a fasthttp response's header fields.
type respHeader fasthttp.ResponseHeader

func (h *respHeader) Get(name string) string {
	return b2s((*fasthttp.ResponseHeader)(h).Peek(name))
}
