package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/internal/rawconn"
	"github.com/floodgate/floodgate/limiter"
)

// httpExchange is a request served by net/http: the middleware, and the
// reverse proxy on the net/http engine.
type httpExchange struct {
	g    *Gateway
	w    http.ResponseWriter // the client's writer, counted by aw with an access log
	r    *http.Request
	next http.Handler // the middleware's next handler; nil: forward upstream
	aw   accessWriter
	cw   costWriter
	iw   interimWriter // the reverse proxy's
	// left says a watch saw the client leave while the request waited
	// (Wait, WatchClient); answered that the flow answered or passed the
	// request on.
	left, answered bool
}

// serveHTTP runs the request path for a net/http request: next is the
// middleware's next handler, or nil to forward to the upstream.
func (g *Gateway) serveHTTP(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if next == nil && g.refusedHTTP(w, r) {
		return
	}
	if next == nil {
		dropH2CUpgrade(r)
	}
	st := g.get()
	x := &st.nh
	*x = httpExchange{g: g, w: w, r: r, next: next}
	if g.alog != nil || g.keeper != nil {
		x.aw = accessWriter{ResponseWriter: w}
		x.w = &x.aw
	}
	st.view.from(r)
	st.view.WriteDeadline = writeDeadlineOf(r.Context())
	if next == nil && r.ProtoMajor == 1 && (len(r.TransferEncoding) > 0 || r.ProtoMinor == 0) {
		// A request with a chunked body may have carried a Content-Length
		// too, which net/http drops: a proxy in front that framed it by
		// that length would see what follows as another request. Closing
		// the connection after the answer leaves nothing to smuggle.
		// net/http drops the Transfer-Encoding of an HTTP/1.0 request
		// unseen and frames its body by its Content-Length, or takes it
		// for a request without a body, where RFC 9112 §6.1 has the
		// framing taken as faulty and the connection closed: a proxy in
		// front that read the body as chunked would see what follows the
		// length, or the chunks themselves, as another request. Such a
		// request cannot be told from one without the field, so no
		// HTTP/1.0 connection is kept after its answer.
		w.Header()["Connection"] = []string{"close"}
	}
	// finish runs whatever the handler or the upstream does (errors,
	// panics, timeouts).
	defer func() {
		g.finish(x, st)
		g.put(st)
	}()
	g.handle(x, st)
	if !x.answered && (x.left || r.Context().Err() != nil) {
		// The client left while its request waited (a leaky queue, a
		// place under overload control) or before the engine decided it
		// (a store call ends with its request's context), and the flow
		// answered nothing: close the connection without an answer
		// (logged 499), rather than let net/http write a 200 with no
		// body, which a client that only shut its side down reads as its
		// request served.
		panic(http.ErrAbortHandler)
	}
}

// dropH2CUpgrade serves a request that asks to upgrade its connection to
// HTTP/2 without TLS (Upgrade: h2c) as the HTTP/1.1 request it is, as
// net/http's server does: forwarded as an upgrade, an upstream that speaks
// h2c would take the connection, and every request the client then sent
// on it would reach the upstream as one tunnel, past the limits. An
// Upgrade field that names h2c among other protocols is dropped whole.
func dropH2CUpgrade(r *http.Request) {
	for _, v := range r.Header["Upgrade"] {
		for p := range strings.SplitSeq(v, ",") {
			if p, _, _ = strings.Cut(p, "/"); strings.EqualFold(strings.TrimSpace(p), "h2c") {
				delete(r.Header, "Upgrade")
				delete(r.Header, "Http2-Settings")
				return
			}
		}
	}
}

// refusedHTTP answers, on the reverse proxy, what it answers before the
// request path on both engines (preflight), and a request whose Trailer
// field names a field no trailer may hold, as the edge engine's parser
// refuses it; it reports whether it answered. The trailers of a chunked
// body are checked at its end. An HTTP/1.0 client's Expect field is not
// passed on: it cannot take the upstream's 100 Continue. Nor is its Upgrade
// field (RFC 9110 §7.8 has a server ignore it): the request is served as
// the plain request it is, and opens no tunnel.
func (g *Gateway) refusedHTTP(w http.ResponseWriter, r *http.Request) bool {
	status, text, closeIt := Preflight(r.Method, r.RequestURI, r.Host, r.ProtoMajor == 1 && r.ProtoMinor >= 1)
	if status == 0 && (badTrailer(r.Trailer) != "" || badDeclaredTrailer(r.Header) != "") {
		status, text, closeIt = http.StatusBadRequest, "400 Bad Request: bad trailer key", true
	}
	if status == 0 && len(r.TransferEncoding) > 0 {
		r.Body = &trailerCheck{ReadCloser: r.Body, r: r}
	}
	if r.ProtoMajor == 1 && r.ProtoMinor == 0 {
		delete(r.Header, "Expect")
		delete(r.Header, "Upgrade")
	}
	if status == 0 {
		return false
	}
	start := time.Now()
	if status == http.StatusOK {
		w.Header()["Content-Length"] = []string{"0"} // OPTIONS *, as net/http's server answers it
		w.WriteHeader(status)
		text = ""
	} else {
		h := w.Header()
		h["Content-Type"] = []string{"text/plain; charset=utf-8"}
		if closeIt {
			h["Connection"] = []string{"close"}
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, text)
	}
	g.LogRefused(identity.ParsePeer(r.RemoteAddr), r.Method, r.RequestURI, r.Host, r.Proto, status, int64(len(text)), start)
	return true
}

func (x *httpExchange) Context() context.Context { return x.r.Context() }

func (x *httpExchange) Wait(ctx context.Context, st *Flow, delay time.Duration) bool {
	return x.g.wait(ctx, st, delay, x.WatchClient)
}

// WatchClient watches for the client leaving while its request waits
// for a place under its route's overload control.
// Once the watch ends, x.left says whether it saw the client leave.
//
// The request's context tells that the client left while net/http reads
// the connection in the background, which it stops doing at the first
// byte the client sends past its request (a pipelined request, a body):
// an HTTP/1 request whose context holds its connection (ConnContext) has
// the connection's socket watched too, through a duplicate of its
// descriptor (rawconn.WatchEnd), so that net/http's reads and deadlines
// are left alone. An HTTP/2 request's stream, whose end is not the
// connection's, is watched through its context alone, as is a request
// on a server without ConnContext, or off Linux.
func (x *httpExchange) WatchClient() (<-chan struct{}, func()) {
	ctx := x.r.Context()
	if x.r.ProtoMajor == 1 {
		if c := connOf(ctx); c != nil {
			if gone, stop := x.watchSocket(ctx, c); gone != nil {
				return gone, stop
			}
		}
	}
	gone := ctx.Done()
	return gone, func() {
		select {
		case <-gone:
			x.left = true
		default:
		}
	}
}

// watchSocket watches for the client leaving through ctx and through c's
// socket (WatchClient); gone is nil when c's socket cannot be watched, or
// the gateway's socket watches are at their bound.
func (x *httpExchange) watchSocket(ctx context.Context, c net.Conn) (<-chan struct{}, func()) {
	done := make(chan struct{})
	var once sync.Once
	leave := func() { once.Do(func() { close(done) }) }
	stopSocket := x.g.watchEnd(c, leave)
	if stopSocket == nil {
		return nil, nil
	}
	stopCtx := context.AfterFunc(ctx, leave)
	return done, func() {
		stopCtx()
		stopSocket()
		select {
		case <-done:
			x.left = true
		case <-ctx.Done():
			x.left = true
		default:
		}
	}
}

func (x *httpExchange) Keep(ctx context.Context, leases []limiter.Hit) func() {
	return x.g.renew(ctx, leases)
}

func (x *httpExchange) DelHeader(name string) { delete(x.r.Header, name) }

func (x *httpExchange) SetHeader(name, value string) { x.r.Header[name] = []string{value} }

func (x *httpExchange) Proxies() bool { return x.next == nil }

func (x *httpExchange) SetFields(fs []fields.Field) { setFields(x.w.Header(), fs) }

func (x *httpExchange) Answer(status int, body []byte, challenge bool) {
	x.answered = true
	h := x.w.Header()
	if challenge {
		h["Www-Authenticate"] = bearerChallenge
	}
	if ct, ok := h["Content-Type"]; ok {
		// A refusal's content type, set with its fields, is kept.
		h["Content-Length"] = []string{fields.Itoa(int64(len(body)))}
		h["Content-Type"] = ct
		x.w.WriteHeader(status)
		_, _ = x.w.Write(body)
		return
	}
	writeJSON(x.w, status, body)
}

func (x *httpExchange) Answered() (int, int64) { return x.aw.status, x.aw.bytes }

func (x *httpExchange) Pass(st *Flow, rec *Recorder) bool {
	x.answered = true
	w, r := x.w, x.r
	if x.g.send > 0 {
		// Innermost, so that a write it cuts is, to the writers around
		// it, a client that left.
		sw := &sendWatch{ResponseWriter: w, limit: x.g.send}
		defer sw.end()
		w = sw
	}
	if rec != nil {
		rec.hdr = w.Header()
		x.cw = costWriter{ResponseWriter: w, rec: rec, bounds: x.g.drain}
		if x.next == nil {
			// The upstream's answer is read to its end even when the
			// client leaves first: its request does not end with the
			// client's, only with the drain bounds (a drainer).
			r, x.cw.d = outliveClient(r, x.g.drain.wait)
			defer x.cw.d.end()
		}
		w = &x.cw
	} else if x.next == nil && x.g.keeper != nil && x.g.countsStatuses() {
		// The gatekeeper counts the upstream's status: its request goes
		// on when the client leaves before the status line, and ends as
		// soon as the status is known.
		var d *drainer
		r, d = outliveClient(r, 0)
		defer d.end()
		w = &statusWriter{ResponseWriter: w, d: d}
	}
	if st.ovl.held {
		st.ow = overloadWriter{ResponseWriter: w, f: st}
		w = &st.ow
		if r.Body != nil && r.Body != http.NoBody {
			// Its reads are timed: the client's pace is no latency
			// of the upstream's.
			st.ovl.body = &overloadBody{ReadCloser: r.Body}
			r.Body = st.ovl.body
		}
	}
	switch {
	case x.next != nil:
		x.next.ServeHTTP(w, r)
	default:
		x.g.forward(w, r, st)
	}
	if rec != nil {
		// The handler or the upstream's answer ran to its end (a panic,
		// such as the reverse proxy's on an answer cut short, skips this).
		rec.complete = true
		rec.gone = x.cw.discard || x.cw.d != nil && x.cw.d.left()
	}
	return false
}

// outliveClient returns r with a context that does not end when its
// client leaves, but when the drainer it returns ends it (wait after both
// the client left and the upstream's status is known: see drainer); the
// caller ends the drainer once the request is done.
func outliveClient(r *http.Request, wait time.Duration) (*http.Request, *drainer) {
	d := &drainer{wait: wait}
	uctx, cancel := context.WithCancel(&detached{parent: r.Context(), d: d})
	d.cancel = cancel
	d.unwatch = context.AfterFunc(r.Context(), d.clientLeft)
	return r.WithContext(uctx), d
}

// statusWriter tells a drainer when the upstream's status is known, for
// a request whose upstream goes on after its client left only until then.
type statusWriter struct {
	http.ResponseWriter
	d     *drainer
	known bool // the drainer was told
}

func (s *statusWriter) WriteHeader(code int) {
	if code >= 200 {
		s.told()
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.told()
	return s.ResponseWriter.Write(b)
}

// told tells the drainer, once, that the status is known.
func (s *statusWriter) told() {
	if !s.known {
		s.known = true
		s.d.status(false)
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// requestBody reads the body once (up to max bytes) and puts it back for
// the upstream.
func (x *httpExchange) RequestBody(max int) []byte {
	r := x.r
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	// A new buffer each time: the upstream request may still read it
	// after the handler returned (an upstream that answered early).
	var buf bytes.Buffer
	_, err := buf.ReadFrom(io.LimitReader(r.Body, int64(max)+1))
	read := buf.Bytes()
	// The server closes the request's own body when the handler returns;
	// the upstream request must not (it may do so while the server still
	// uses it).
	if err == nil && len(read) <= max {
		r.Body = io.NopCloser(bytes.NewReader(read))
	} else {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(read), r.Body))
	}
	if err != nil || len(read) > max {
		return nil
	}
	return read
}

// costWriter is the response writer of a request with reservations on
// net/http: it tells its Recorder the response as it passes, holding
// none of it back. Once a write to the client fails, the client has left:
// the rest of the answer is read for its cost and discarded, up to the
// drain bounds (d, when the answer comes from an upstream, ends the
// upstream's request at the time bound).
type costWriter struct {
	http.ResponseWriter
	rec     *Recorder
	bounds  drainBounds
	d       *drainer
	discard bool      // the client left: writes are discarded
	leftAt  time.Time // when it left
	drained int64     // the bytes discarded
}

func (c *costWriter) WriteHeader(code int) {
	c.rec.header(code, c.ResponseWriter.Header())
	if code >= 200 && c.d != nil {
		c.d.status(c.rec.readsBody())
	}
	if !c.discard {
		c.ResponseWriter.WriteHeader(code)
	}
}

func (c *costWriter) Write(b []byte) (int, error) {
	if c.rec.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	rest := b
	switch {
	case !c.discard:
		n, err := c.ResponseWriter.Write(b)
		c.rec.read(b[:n])
		if err == nil {
			return n, nil
		}
		c.leave()
		if c.d == nil && !c.rec.readsBody() {
			// A handler the gateway stands in front of (Middleware):
			// no more of its answer tells a cost, so it learns at
			// once that its client left, as net/http tells it.
			return n, err
		}
		rest = b[n:]
	case c.d == nil && (!c.rec.readsBody() || time.Since(c.leftAt) > c.bounds.wait):
		// A handler that writes on after its client left is told so
		// once its answer can tell no more (its status is not a 2xx
		// one) or at the drain's time bound, as serve ends its
		// upstream's request at those bounds (drainer).
		return 0, errDrained
	}
	c.rec.read(rest)
	c.drained += int64(len(rest))
	if c.drained > c.bounds.bytes {
		if c.d != nil {
			c.d.stop()
		}
		return 0, errDrained
	}
	return len(b), nil // all of b was taken: written, or read and discarded
}

// leave notes that the client left: what comes next is discarded.
func (c *costWriter) leave() {
	c.discard, c.leftAt = true, time.Now()
	if c.d != nil {
		c.d.clientLeft()
	}
}

// Flush passes flushes through for streamed responses.
func (c *costWriter) Flush() {
	if c.rec.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if c.discard {
		return
	}
	if err := http.NewResponseController(c.ResponseWriter).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		c.leave()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (c *costWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// upstreamFailed notes that the gateway answered for an upstream that
// could not be reached, or gave no answer.
func (c *costWriter) upstreamFailed() { c.rec.noAnswer = true }

// markFailed tells w, when it is a costWriter, that the upstream failed.
func markFailed(w http.ResponseWriter) {
	if f, ok := w.(interface{ upstreamFailed() }); ok {
		f.upstreamFailed()
	}
}

// detached is the context of an upstream request that goes on without
// its client's (as context.WithoutCancel makes it): it holds the parent's
// values, and the request's drainer, which a streamed answer's watch
// tells that the client left (watchStream).
type detached struct {
	parent context.Context
	d      *drainer
}

func (c *detached) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *detached) Done() <-chan struct{} { return nil }

func (c *detached) Err() error { return nil }

func (c *detached) Value(key any) any {
	if _, ok := key.(drainerKey); ok {
		return c.d
	}
	return c.parent.Value(key)
}

// drainerKey is the context key of a request's drainer (detached).
type drainerKey struct{}

// watchStream watches, on the net/http engine, for the client of an
// HTTP/1 request whose answer streams (resp, an upstream's answer of
// unknown length, or an event stream) leaving while the upstream sends
// nothing: the request's context tells it while net/http reads the
// connection in the background, which it stops doing at the first byte
// the client sends past its request. When the request's context holds
// its connection (ConnContext), the connection's socket is watched too
// (rawconn.WatchEnd), until the answer's body is closed: when the
// client's end comes, the upstream's request ends as its context's would
// (its body is closed, and reading it says context.Canceled), or, for a
// request whose answer is read on for its cost, its drainer is told, as
// its client's context would. Other answers are left as they are. The
// watch begins once the answer has streamed for streamWatchAfter: most
// answers of unknown length are whole well before (a chunked JSON
// answer), and a duplicate descriptor for each cost them about a sixth
// more CPU; a client that left before the watch begins is seen at its
// first look.
func (g *Gateway) watchStream(resp *http.Response) {
	req := resp.Request
	if req == nil || req.ProtoMajor != 1 || resp.StatusCode < 200 || resp.Body == nil || resp.Body == http.NoBody ||
		resp.ContentLength >= 0 && !isEventStream(resp.Header) {
		return
	}
	ctx := req.Context()
	c := connOf(ctx)
	if c == nil {
		return
	}
	b := &watchedBody{ReadCloser: resp.Body}
	ended := b.leave
	if d, ok := ctx.Value(drainerKey{}).(*drainer); ok && d != nil {
		ended = d.clientLeft
	}
	b.timer = time.AfterFunc(g.streamWatchAfter, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.closed {
			b.stop = g.watchEnd(c, ended)
		}
	})
	resp.Body = b
}

// streamWatchAfter is how long an answer streams before its client's
// socket is watched (watchStream); a variable for the tests, read by New.
var streamWatchAfter = time.Second

// watchEnd is rawconn.WatchEnd within the gateway's bound on socket
// watches (Options.SocketWatches): nil when c has no socket to watch or
// the bound is reached, and the caller watches through the request's
// context alone.
func (g *Gateway) watchEnd(c net.Conn, ended func()) (stop func()) {
	if g.socketWatches.Add(1) > g.maxSocketWatches {
		g.socketWatches.Add(-1)
		return nil
	}
	stopWatch := rawconn.WatchEnd(c, ended)
	if stopWatch == nil {
		g.socketWatches.Add(-1)
		return nil
	}
	return func() {
		stopWatch()
		g.socketWatches.Add(-1)
	}
}

// isEventStream reports whether h's content type is text/event-stream,
// whose answers the reverse proxy streams whatever their length.
func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// watchedBody is a streamed answer's body whose client's socket is
// watched once it has streamed for a while (watchStream): closing it ends
// the watch, or keeps it from beginning.
type watchedBody struct {
	io.ReadCloser
	timer  *time.Timer // begins the watch
	mu     sync.Mutex  // guards stop and closed
	stop   func()      // ends the watch (nil: none began)
	closed bool
	left   atomic.Bool // the client left: the body was closed for it
}

// Read reads the answer; once the client left, an error says
// context.Canceled, as it says for a client whose context ended.
func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.left.Load() {
		err = context.Canceled
	}
	return n, err
}

// leave ends the upstream's answer: its client left.
func (b *watchedBody) leave() {
	b.left.Store(true)
	_ = b.ReadCloser.Close()
}

// Close ends the watch (or keeps it from beginning), then closes the
// body.
func (b *watchedBody) Close() error {
	b.timer.Stop()
	b.mu.Lock()
	stop := b.stop
	b.stop, b.closed = nil, true
	b.mu.Unlock()
	if stop != nil {
		stop()
	}
	return b.ReadCloser.Close()
}

// sendWatch is the client's response writer on the net/http engine,
// bounded in how long one write (or flush) may wait for the client to
// take it (Options.SendTimeout). net/http's server has no such bound:
// an HTTP/2 client that grants no flow-control window, or an HTTP/1
// client that reads nothing, held its request (its concurrency leases,
// its reservation, its upstream connection) for as long as it kept its
// connection open. Past the bound the write's deadline is set in the
// past, as http.ResponseController does it: an HTTP/2 stream is reset,
// an HTTP/1 connection's write fails, and the write says the client
// left. The bound runs only while a write waits: an upstream that keeps
// silent between writes is not cut.
type sendWatch struct {
	http.ResponseWriter
	limit time.Duration
	timer *time.Timer // armed while a write waits

	mu    sync.Mutex // guards ended: no deadline is set once the handler ended
	ended bool
}

// arm starts the bound of a write; the handler's goroutine alone writes.
func (s *sendWatch) arm() {
	if s.timer == nil {
		s.timer = time.AfterFunc(s.limit, s.expire)
		return
	}
	s.timer.Reset(s.limit)
}

func (s *sendWatch) disarm() { s.timer.Stop() }

// expire cuts the write that waited past the bound.
func (s *sendWatch) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		_ = http.NewResponseController(s.ResponseWriter).SetWriteDeadline(time.Now().Add(-time.Second))
	}
}

// end is called when the exchange is over: the writer is no longer the
// handler's to cut.
func (s *sendWatch) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
}

func (s *sendWatch) Write(b []byte) (int, error) {
	s.arm()
	n, err := s.ResponseWriter.Write(b)
	s.disarm()
	return n, err
}

// FlushError flushes within the bound.
func (s *sendWatch) FlushError() error {
	s.arm()
	err := http.NewResponseController(s.ResponseWriter).Flush()
	s.disarm()
	return err
}

// Flush is FlushError for handlers that look for an http.Flusher.
func (s *sendWatch) Flush() { _ = s.FlushError() }

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *sendWatch) Unwrap() http.ResponseWriter { return s.ResponseWriter }
