package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/lograte"
	"github.com/floodgate/floodgate/internal/plainhead"
	"github.com/floodgate/floodgate/internal/rawconn"
	"github.com/floodgate/floodgate/limiter"
	"github.com/valyala/fasthttp"
)

// The edge engine serves HTTP/1.1 on github.com/valyala/fasthttp: the
// gateway's admission flow (gateway.Gateway.Run) as net/http does, read through a Request whose
// strings are views of fasthttp's buffers, answered from precomputed
// bodies, and forwarded upstream over pooled connections that are capped
// per host. What it cannot serve it hands to a net/http server: a
// connection that opens with HTTP/2's preface (h2c), and a request that
// upgrades its connection (WebSocket).

// Options configure the edge engine (New). Zero fields take the defaults
// in brackets.
type Options struct {
	// ReadHeaderTimeout bounds reading a request's headers, from their
	// first byte, and the first bytes of a new connection [10s].
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a request's body, from the end of its
	// headers [60s]. A request without a body has no read bound while it
	// is served: the engine reads nothing of it then but to see its
	// client leave.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response [0: none, so that long
	// downloads and event streams work].
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection idle for this long
	// [120s].
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and header fields; past it
	// the answer is 431 [64 KiB].
	MaxHeaderBytes int
	// Fallback serves what the edge engine hands over: connections that
	// speak HTTP/2 with prior knowledge, or over TLS chose it by ALPN, and
	// requests that upgrade their connection. Its Handler is usually the
	// gateway itself. Nil: such connections are closed and such requests
	// answered 501. New sets its ConnState to one that calls the one it
	// had: the engine learns from it when an HTTP/2 connection's preface
	// was read.
	Fallback *http.Server
	// Logger receives the engine's errors (default: the gateway's).
	Logger *slog.Logger
	// ParkIdleAfter parks a kept-alive connection that has waited this
	// long (up to twice this long) for its next request: it then holds
	// no read buffer, no request context and only a small goroutine stack
	// until its next request's first bytes come [1s; negative: never].
	ParkIdleAfter time.Duration
	// ReturnMemory lets the engine return what parked connections gave
	// back to the system: once at least 1,024 connections were parked
	// and none for 25 s, it runs a collection and debug.FreeOSMemory, at
	// most once a minute. Meant for a process that is the gateway
	// (floodgate serve turns it on); off, the Go runtime returns the
	// memory at its own pace.
	ReturnMemory bool
	// NoFront serves every request on fasthttp's loop. By default a
	// plain connection's plain requests (a GET of HTTP/1.1 without a
	// body; front.go) are read and answered by the engine's own loop
	// first, which hands the connection to fasthttp at the first other.
	NoFront bool
}

// Engine is the gateway's edge engine: an HTTP/1.1 reverse proxy on
// fasthttp that enforces the same policy as gateway.Gateway.ServeHTTP,
// through the same admission flow.
type Engine struct {
	g        *gateway.Gateway
	srv      *fasthttp.Server
	ups      sync.Map // *url.URL → *upstream
	xs       sync.Pool
	drain    drainBounds
	fallback *http.Server
	log      *slog.Logger
	header   time.Duration
	send     int64         // the gateway's SendTimeout, in nanoseconds (0: none)
	write    time.Duration // Options.WriteTimeout (0: none)
	parker   *parker       // nil: idle connections are not parked
	noFront  bool          // Options.NoFront
	// stopping says Shutdown began: the front answers with Connection:
	// close and closes its idle connections.
	stopping atomic.Bool
	// closing counts the answers streamed to HTTP/1.0 clients until
	// their connection closes (untilClose), which fasthttp no longer
	// counts as open, and the requests the front is serving (front.go):
	// Shutdown waits for them too.
	closing atomic.Int64

	// unaskedLog holds back the lines about kept upstream connections
	// closed for bytes no request asked for (which a client may cause):
	// one a second.
	unaskedLog lograte.Gate

	// live holds the client connections from their accept until they
	// close or go to net/http, each with the socket under it, so that
	// Close closes them whatever they are doing (fasthttp leaves those
	// whose answers stream, and those the engine took over to write an
	// answer itself, untilClose; the engine reads a new connection's
	// first bytes, or makes its TLS handshake, before fasthttp has it);
	// liveClosed says Close did, firstClosed that Shutdown closed those
	// whose first request had not come (Engine.closeFirst).
	liveMu      sync.Mutex
	live        map[*conn]net.Conn
	liveClosed  bool
	firstClosed bool
	// awaiting holds the connections over TLS handed to net/http as
	// HTTP/2 (chosen by ALPN) whose preface net/http has not read, each
	// with the socket under its TLS: net/http's HTTP/2 server tells the
	// fallback's ConnState of a connection once it has read its preface
	// (prefaceCame), and net/http when it closed one. Shutdown closes
	// those left (closeFirst). nAwaiting is its length, read without
	// liveMu.
	awaiting  map[*tls.Conn]net.Conn
	nAwaiting atomic.Int64

	mu     sync.Mutex // guards ln, fast, slow and closed
	ln     net.Listener
	fast   *chanListener
	slow   *chanListener
	closed bool
}

// New returns the edge engine of g.
func New(g *gateway.Gateway, o Options) *Engine {
	def := func(d, v time.Duration) time.Duration {
		if d <= 0 {
			return v
		}
		return d
	}
	e := &Engine{g: g, fallback: o.Fallback, log: o.Logger, header: def(o.ReadHeaderTimeout, 10*time.Second),
		send: int64(g.SendTimeout()), write: o.WriteTimeout, noFront: o.NoFront}
	if e.log == nil {
		e.log = g.Logger()
	}
	up := g.Upstream()
	e.drain = drainBounds{wait: up.DrainTimeout, bytes: up.DrainBytes}
	if e.fallback != nil {
		next := e.fallback.ConnState
		e.fallback.ConnState = func(c net.Conn, st http.ConnState) {
			if st != http.StateNew && e.nAwaiting.Load() > 0 {
				e.prefaceCame(c)
			}
			if next != nil {
				next(c, st)
			}
		}
	}
	e.xs.New = func() any { return new(exchange) }
	if o.ParkIdleAfter >= 0 {
		e.parker = newParker(e, def(o.ParkIdleAfter, time.Second))
		e.parker.returnMemory = o.ReturnMemory
	}
	g.OnForgetUpstreams(e.forgetUpstreams)
	maxHeader := o.MaxHeaderBytes
	if maxHeader <= 0 {
		maxHeader = 64 << 10
	}
	read := def(o.ReadTimeout, 60*time.Second)
	e.srv = &fasthttp.Server{
		Handler:       e.serve,
		ErrorHandler:  e.readError,
		ExpectHandler: e.expect,
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			// The headers are in: a body has ReadTimeout, from now (its
			// first byte is read before the handler). A request without
			// one reads nothing more: serve drops its deadline.
			if noBody(h) {
				return fasthttp.RequestConfig{}
			}
			return fasthttp.RequestConfig{ReadTimeout: read}
		},
		Name: "",
		// No ReadTimeout: the engine's connection bounds each request's
		// head itself (conn.headRead), reading the clock only for a head
		// that did not come whole; only the idle deadline is fasthttp's,
		// which marks the wait for the next request. Each deadline
		// fasthttp sets costs it a clock read.
		WriteTimeout:    o.WriteTimeout,
		IdleTimeout:     def(o.IdleTimeout, 120*time.Second),
		ReadBufferSize:  maxHeader,
		WriteBufferSize: 4 << 10,
		// Bodies stream to the upstream as they come (as net/http's do),
		// so a large one costs no memory and a slow one holds its
		// request, lease included, until ReadTimeout cuts it. The handler
		// is called with at most one byte of the body read.
		StreamRequestBody:            true,
		MaxRequestBodySize:           1,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		KeepHijackedConns:            true,
		// Idle keep-alive connections hold no buffers.
		ReduceMemoryUsage: true,
		// Read errors by kind (an unsupported transfer coding is 501),
		// not by their text.
		SecureErrorLogMessage: true,
		CloseOnShutdown:       true,
		// The handler never asks for the request's time (RequestCtx.Time):
		// no clock read per request for it.
		LazyRequestTime: true,
		Logger:          edgeLogger{e},
	}
	return e
}

// Serve accepts connections on ln and serves them until Shutdown or Close:
// HTTP/1 on the edge engine, HTTP/2 with prior knowledge on the fallback
// server.
func (e *Engine) Serve(ln net.Listener) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return net.ErrClosed
	}
	e.ln = ln
	e.fast = newChanListener(ln.Addr())
	e.slow = newChanListener(ln.Addr())
	e.mu.Unlock()
	errc := make(chan error, 2)
	go func() { errc <- e.srv.Serve(e.fast) }()
	if e.parker != nil {
		done := e.fast.done
		go e.parker.sweep(done)
	}
	if e.fallback != nil {
		go func() {
			if err := e.fallback.Serve(e.slow); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				errc <- err
			}
		}()
	}
	var pause time.Duration // after a failed accept that passes
	for {
		c, err := ln.Accept()
		if err != nil {
			if acceptPasses(err) {
				// Out of descriptors or memory for a moment (other
				// connections hold them), or a client that left before its
				// accept: the engine goes on serving those it has and
				// accepts again after a pause that grows to a second, as
				// net/http's server does. Ending here would end the process
				// for whoever could hold enough connections open.
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				if pause == 5*time.Millisecond {
					e.log.Warn("gateway: accept failed; accepting again after a pause", "err", err)
				}
				time.Sleep(pause)
				continue
			}
			e.fast.Close()
			e.slow.Close()
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("gateway: edge: accept: %w", err)
		}
		pause = 0
		go e.route(c)
	}
}

// acceptPasses reports whether a failed accept is a passing condition:
// the process or the system out of descriptors or buffers, or a
// connection aborted before it was accepted.
func acceptPasses(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

// route reads the first bytes of a new connection and hands it to the
// engine that speaks its protocol: HTTP/2 with prior knowledge, and
// requests whose lines end in a bare LF, go to net/http; the others to the
// front (front.go), which hands to fasthttp what it does not serve. The
// connection is among the live ones from its accept on, so that Close ends
// its handshake or its first read too.
func (e *Engine) route(c net.Conn) {
	ec := &conn{Conn: c}
	ec.first.Store(true)
	if !e.track(ec) {
		c.Close() // the engine was shut down
		return
	}
	if tc, ok := c.(*tls.Conn); ok {
		if !e.routeTLS(ec, tc) {
			return
		}
	}
	h2, bareLF, err := ec.sniff(time.Now().Add(e.header))
	switch {
	case err != nil:
		ec.Close() // nothing came in time, or the client left
	case (h2 || bareLF) && e.fallback != nil:
		ec.first.Store(false)
		e.untrack(ec) // net/http's from now on
		e.slow.push(ec)
	case h2:
		ec.Close()
	default:
		if !ec.tls {
			// A plain TCP connection served by fasthttp is read and
			// written with raw system calls (rawconn).
			ec.Conn = rawconn.Wrap(ec.Conn)
		}
		ec.send = e.send
		ec.first.Store(false)
		_ = ec.SetReadDeadline(time.Now().Add(e.header)) // the first request's head
		if e.parker != nil {
			e.parker.add(ec)
		}
		e.enter(ec)
	}
}

// Shutdown stops accepting, lets the requests in flight finish (until ctx
// ends) and closes the connections, the clients' and the idle ones to the
// upstreams; a client connection whose first request has not come (in its
// TLS handshake too) is closed at once, as it could not be served. So is
// one handed to the fallback server as HTTP/2 over TLS (chosen by ALPN)
// whose preface net/http's HTTP/2 server has not read: that server reads a
// connection's preface before anything else, the GOAWAY of its Shutdown
// included, and would hold the connection, and Shutdown, until the
// preface came or its own bound of 10 s passed. A client whose first
// request or preface comes just as Shutdown begins is closed unanswered
// too. The fallback server is shut down at once, beside the engine's own
// requests: its HTTP/2 connections (h2c, or by ALPN over TLS) are told to
// go away and closed once they serve no request, as net/http's Shutdown
// does.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.stopping.Store(true)
	e.mu.Lock()
	e.closed = true
	if e.ln != nil {
		_ = e.ln.Close() // Serve's accept loop ends
	}
	fast := e.fast
	e.mu.Unlock()
	if fast != nil {
		// fasthttp takes no more connections: those whose first request
		// has not come could not be served.
		_ = fast.Close()
	}
	e.closeFirst()
	var fallback chan error
	if e.fallback != nil {
		// The connections handed to net/http (HTTP/2 ones, by ALPN over
		// TLS too) are told to go away, and those serving no request
		// closed, now, not once the engine's own requests have finished.
		fallback = make(chan error, 1)
		go func() { fallback <- e.fallback.Shutdown(ctx) }()
	}
	err := e.srv.ShutdownWithContext(ctx)
	if err == nil {
		err = e.waitUntilClose(ctx)
	}
	if e.parker != nil {
		e.parker.closeParked()
	}
	if fallback != nil {
		if ferr := <-fallback; err == nil {
			err = ferr
		}
	}
	e.forgetUpstreams()
	return err
}

// Parked returns how many client connections are parked now: kept alive
// and idle long enough (Options.ParkIdleAfter) to hold no buffers and, on
// Linux, no goroutine.
func (e *Engine) Parked() int {
	if e.parker == nil {
		return 0
	}
	return int(e.parker.parked.Load())
}

// Close closes the engine's listeners and connections at once, those
// whose answers are being written too (their requests end as for a client
// that left) and those whose first request has not come yet (in their TLS
// handshake too), as net/http's Server.Close does; those handed to the
// fallback server (HTTP/2, upgraded ones) are closed by its Close.
//
// A Shutdown under way ends with it: the connections are closed before
// Close shuts the engine down (fasthttp lets one shutdown at a time wait
// for its connections).
func (e *Engine) Close() error {
	if e.parker != nil {
		e.parker.closeParked() // through the parker, which holds their sockets
	}
	e.closeLive()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.Shutdown(ctx)
	if e.fallback != nil {
		_ = e.fallback.Close()
	}
	return err
}

// track notes c, a connection just accepted, among the live ones; false
// when the engine was closed (c is to be closed).
func (e *Engine) track(c *conn) bool {
	sock := c.Conn
	if tc, ok := sock.(*tls.Conn); ok {
		// Closed under its TLS layer, which would wait to write its close
		// alert to a client that may read nothing.
		sock = tc.NetConn()
	}
	e.liveMu.Lock()
	defer e.liveMu.Unlock()
	if e.liveClosed || e.firstClosed {
		return false
	}
	if e.live == nil {
		e.live = make(map[*conn]net.Conn)
	}
	c.eng = e
	e.live[c] = sock
	return true
}

// untrack forgets c, which is closed or handed over to net/http.
func (e *Engine) untrack(c *conn) {
	e.liveMu.Lock()
	delete(e.live, c)
	e.liveMu.Unlock()
}

// closeFirst closes the live connections whose first request has not come
// (in their TLS handshake too), and those accepted from now on, once
// fasthttp takes no more connections (Shutdown): none of them could be
// served any more, and the engine would otherwise wait for their first
// bytes until ReadHeaderTimeout, also after Shutdown returned. So it does
// with the HTTP/2 connections over TLS handed to net/http whose preface
// it has not read (awaiting): net/http's HTTP/2 server reads a
// connection's preface before anything else, the GOAWAY of a Shutdown
// included, and waits 10 s for it.
func (e *Engine) closeFirst() {
	e.liveMu.Lock()
	e.firstClosed = true
	var first []net.Conn
	for c, sock := range e.live {
		if c.first.Load() {
			first = append(first, sock)
		}
	}
	for _, sock := range e.awaiting {
		first = append(first, sock)
	}
	e.liveMu.Unlock()
	for _, sock := range first {
		_ = sock.Close()
	}
}

// handOver hands tc, a TLS connection of ec whose client chose HTTP/2, to
// the fallback server, among those awaiting their preface; once Shutdown
// began (closeFirst) it closes tc instead, whose preface could not be read
// any more.
func (e *Engine) handOver(ec *conn, tc *tls.Conn) {
	sock := tc.NetConn() // closed under its TLS, as track's
	e.liveMu.Lock()
	ec.first.Store(false)
	delete(e.live, ec) // net/http's from now on
	closing := e.firstClosed
	if !closing {
		if e.awaiting == nil {
			e.awaiting = make(map[*tls.Conn]net.Conn)
		}
		e.awaiting[tc] = sock
		e.nAwaiting.Store(int64(len(e.awaiting)))
	}
	e.liveMu.Unlock()
	if closing {
		_ = sock.Close()
		return
	}
	e.slow.push(tc)
}

// prefaceCame takes c out of the connections awaiting their preface: the
// fallback server told a state of it past new (its HTTP/2 server read its
// preface, or it closed). c is the *tls.Conn handed over, or one that
// stands for it where a TLSNextProto wrapper served it as one
// without TLS whose preface was read (as net/http's own h2c does), whose
// connection it gives (UnencryptedNetConn, NetConn).
func (e *Engine) prefaceCame(c net.Conn) {
	e.liveMu.Lock()
	defer e.liveMu.Unlock()
	for range 4 {
		if tc, ok := c.(*tls.Conn); ok {
			if _, ok := e.awaiting[tc]; ok {
				delete(e.awaiting, tc)
				e.nAwaiting.Store(int64(len(e.awaiting)))
				return
			}
		}
		switch u := c.(type) {
		case interface{ UnencryptedNetConn() net.Conn }:
			c = u.UnencryptedNetConn()
		case interface{ NetConn() net.Conn }:
			c = u.NetConn()
		default:
			return
		}
		if c == nil {
			return
		}
	}
}

// closeLive closes the live connections' sockets under whatever reads or
// writes them (a TLS handshake, the engine's first read, fasthttp, or the
// engine writing an answer itself), which then fail and close the
// connections as a client that left does.
func (e *Engine) closeLive() {
	e.liveMu.Lock()
	e.liveClosed = true
	live := make([]net.Conn, 0, len(e.live))
	for _, sock := range e.live {
		live = append(live, sock)
	}
	e.liveMu.Unlock()
	for _, sock := range live {
		_ = sock.Close()
	}
}

// readError answers a request fasthttp could not read as net/http would:
// 431 for headers over the limit, nothing for a client too slow (the
// connection is closed), 400 for the rest.
func (e *Engine) readError(ctx *fasthttp.RequestCtx, err error) {
	e.answerError(ctx, err)
	if c, ok := ctx.Conn().(*conn); ok {
		if x := c.resume.Load(); x != nil && ctx.Response.StatusCode() >= 400 {
			// The body of a request admitted before it could not be read:
			// it is finished when the connection closes, logged with this
			// answer (unless the connection closed already: then it was
			// finished as its client gone).
			x.status = ctx.Response.StatusCode()
		}
	}
}

// answerError sets readError's answer to err, or closes the connection.
func (e *Engine) answerError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		plainError(ctx, http.StatusRequestHeaderFieldsTooLarge)
	case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding):
		plainErrorText(ctx, http.StatusNotImplemented, "Unsupported transfer encoding")
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, fasthttp.ErrTimeout):
		// As net/http: a client that sends nothing (or too slowly) gets
		// no answer.
		if c := ctx.Conn(); c != nil {
			_ = c.Close()
		}
	default:
		plainError(ctx, http.StatusBadRequest)
	}
}

// plainError is net/http's answer to a request it could not read.
func plainError(ctx *fasthttp.RequestCtx, status int) {
	plainErrorText(ctx, status, fmt.Sprintf("%d %s", status, http.StatusText(status)))
}

// plainErrorText is plainError with the body msg; the connection closes.
func plainErrorText(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.Response.Header.SetContentType("text/plain; charset=utf-8")
	ctx.SetConnectionClose()
	ctx.SetBodyString(msg)
}

// edgeLogger sends fasthttp's log lines to the engine's logger.
type edgeLogger struct{ e *Engine }

func (l edgeLogger) Printf(format string, args ...any) {
	l.e.log.Debug("gateway: edge: " + fmt.Sprintf(format, args...))
}

// serve is the edge engine's handler.
func (e *Engine) serve(ctx *fasthttp.RequestCtx) {
	c, ok := ctx.Conn().(*conn)
	if !ok {
		e.serveHTTP(ctx)
		return
	}
	if x := c.resume.Load(); x != nil && c.resume.CompareAndSwap(x, nil) {
		e.step(x, x.f, true) // admitted before its body (expect), which is here now
	} else {
		if noBody(&ctx.Request.Header) {
			// Nothing more to read for it (HeaderReceived set no body
			// deadline): no bound on a watch of the client while it waits.
			_ = c.SetReadDeadline(time.Time{})
		}
		e.startWrite(c)
		e.serveHTTP(ctx)
	}
	// fasthttp writes the answer now: its write is bounded from here, not
	// from when the request came (an upstream may take its time).
	c.boundWrite()
	c.handled()
}

// startWrite starts the write timeout of the request c's handler is about
// to serve (server.timeouts.write counts from the end of its headers, as
// on net/http, not from the end of any wait in a queue or for the
// upstream).
func (e *Engine) startWrite(c *conn) {
	if e.write > 0 {
		c.wEnd = time.Now().Add(e.write)
	}
}

// expect decides a request that asks for 100 Continue before its body
// comes (fasthttp's ExpectHandler), as NGINX and net/http's server decide
// it: the checks and the flow run now, and a request they answer (a
// refusal, a 403, a 400) is answered without the client sending its body,
// the connection then closed (the client may have begun to send it
// anyway). One admitted is told 100 Continue, its body is read, and the
// handler forwards it (serve). A request is decided after its body where
// a limit reads its cost from the body, or where the engine cannot hold
// it: fasthttp then says 100 Continue first, and the handler decides.
func (e *Engine) expect(ctx *fasthttp.RequestCtx) int {
	c, ok := ctx.Conn().(*conn)
	if !ok || ctx.Request.Header.ConnectionUpgrade() || !e.g.DecidesWithoutBody() {
		return fasthttp.StatusContinue
	}
	e.startWrite(c)
	c.expecting = true
	e.serveHTTP(ctx)
	c.expecting = false
	c.boundWrite() // for the 100 Continue, or the answer, written next
	if c.resume.Load() != nil {
		return fasthttp.StatusContinue
	}
	c.handled()
	return ctx.Response.StatusCode()
}

// abandon finishes a request admitted before its body whose body never
// came (its connection closed without the handler): it went to no
// upstream, so its reservation is given back, and its leases are. fasthttp
// may have handed the request's buffers on by then: the flow's views of
// them were copied when it was admitted, and its header fields are no
// longer read.
func (e *Engine) abandon(x *exchange) {
	x.f.Request().Header = nil
	if x.rec != nil {
		x.rec.SetNoAnswer()
	}
	if x.status == 0 {
		x.status = statusClientGone
	}
	e.finish(x)
}

// statusClientGone is the status a request whose client left before it
// was answered is logged with (as NGINX logs it).
const statusClientGone = 499

// serveHTTP answers a request.
func (e *Engine) serveHTTP(ctx *fasthttp.RequestCtx) {
	h := &ctx.Request.Header
	if p := h.Protocol(); string(p) != "HTTP/1.1" && string(p) != "HTTP/1.0" {
		plainErrorText(ctx, http.StatusHTTPVersionNotSupported, "505 HTTP Version Not Supported: unsupported protocol version")
		return
	}
	why, f := badFields(h)
	if why != "" {
		// As net/http: what no upstream should be sent.
		plainErrorText(ctx, http.StatusBadRequest, "400 Bad Request: "+why)
		return
	}
	if !e.admit(ctx, f.expect) {
		return
	}
	// The Upgrade of an HTTP/1.0 request is ignored (RFC 9110 §7.8): it is
	// served as a plain request, its Upgrade field dropped as hop-by-hop.
	if f.upgrade && h.IsHTTP11() && ctx.Request.Header.ConnectionUpgrade() && len(ctx.Request.Header.Peek("Upgrade")) > 0 {
		e.upgrade(ctx)
		return
	}
	e.serveRequest(ctx, !f.override)
}

// admit reports whether a request goes on to its request path. Otherwise
// it answered it: what the reverse proxy answers before the request path
// on both engines (preflight), and what net/http's server answers before
// any handler and fasthttp would let through: a target with a broken
// escape (400), an expectation other than 100-continue (417), and a
// transfer coding other than chunked, which fasthttp takes as none (501).
// After a request with a chunked body the connection is closed, as on
// net/http (whose server cannot tell whether it also had a
// Content-Length). expect says whether the request has an Expect field.
func (e *Engine) admit(ctx *fasthttp.RequestCtx, expect bool) bool {
	h := &ctx.Request.Header
	target := h.RequestURI()
	if status, text, closeIt := gateway.Preflight(b2s(h.Method()), b2s(target), b2s(h.Host()), h.IsHTTP11()); status != 0 {
		if status == http.StatusOK {
			ctx.Response.Reset()
			ctx.SetStatusCode(status) // OPTIONS *: no body, the connection kept
			e.logRefused(ctx)
			return false
		}
		plainErrorText(ctx, status, text)
		if !closeIt {
			ctx.Response.Header.ResetConnectionClose()
		}
		e.logRefused(ctx)
		return false
	}
	if expect && expectationFails(h.Peek("Expect")) {
		ctx.Response.Reset()
		ctx.SetStatusCode(http.StatusExpectationFailed)
		ctx.SetConnectionClose()
		e.logRefused(ctx)
		return false
	}
	if h.ContentLength() == -1 {
		h.SetConnectionClose() // forwardEdge closes after the answer
		ctx.SetConnectionClose()
	} else if hasField(h.RawHeaders(), "transfer-encoding") {
		plainErrorText(ctx, http.StatusNotImplemented, "Unsupported transfer encoding")
		e.logRefused(ctx)
		return false
	}
	return true
}

// noBody reports whether a request has no body: a Content-Length of 0, or
// neither Content-Length nor chunked coding (fasthttp reads those as -2,
// then 0 once it looked for the body).
func noBody(h *fasthttp.RequestHeader) bool {
	n := h.ContentLength()
	return n == 0 || n == -2
}

// logRefused writes the access record of a request admit answered.
func (e *Engine) logRefused(ctx *fasthttp.RequestCtx) {
	if !e.g.AccessLogged() {
		return
	}
	h := &ctx.Request.Header
	e.g.LogRefused(peerOf(ctx.RemoteAddr()), b2s(h.Method()), b2s(h.RequestURI()), b2s(h.Host()), b2s(h.Protocol()),
		ctx.Response.StatusCode(), int64(len(ctx.Response.Body())), ctx.Time())
}

// upgrade hands a request that upgrades its connection (a WebSocket) to
// the fallback server, with the connection.
func (e *Engine) upgrade(ctx *fasthttp.RequestCtx) {
	if e.fallback == nil || ctx.Request.Header.ContentLength() != 0 && ctx.Request.Header.ContentLength() != -2 {
		plainError(ctx, http.StatusNotImplemented)
		e.logRefused(ctx)
		return
	}
	head := append([]byte(nil), ctx.Request.Header.Header()...)
	if c, ok := ctx.Conn().(*conn); ok {
		c.noPark = true  // net/http serves it from now on
		c.unboundWrite() // with its own bounds
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		e.slow.push(&conn{Conn: c, pre: head})
	})
}

// serveRequest runs a request through the admission flow.
func (e *Engine) serveRequest(ctx *fasthttp.RequestCtx, noOverride bool) {
	g := e.g
	f := g.Begin()
	x := e.xs.Get().(*exchange)
	*x = exchange{e: e, ctx: ctx, f: f}
	v := f.Request()
	h := &ctx.Request.Header
	v.Method = methodOf(h.Method())
	v.Host = b2s(hostOf(ctx))
	// The path as the net/http engine reads it (gateway.TargetPath), not
	// fasthttp's, which merges slashes and resolves dot segments: read so,
	// /a%00/../b would be served as /b here and refused on net/http.
	v.Path, v.RawPath = gateway.TargetPath(b2s(h.RequestURI()))
	v.Proto = "HTTP/1.1"
	if !h.IsHTTP11() {
		v.Proto = "HTTP/1.0"
	}
	if c, ok := ctx.Conn().(*conn); ok {
		v.Peer, v.PeerText = c.peer()
		v.WriteDeadline = c.wEnd // the flow holds no request in a queue past it
	} else {
		v.Peer = peerOf(ctx.RemoteAddr())
	}
	v.Header = (*edgeHeader)(h)
	v.NoOverride = noOverride
	e.step(x, f, false)
}

// step runs x's flow (resumed: forwards x, which the flow admitted before
// its body) and finishes x unless its answer goes on later; a panic is
// answered 500.
func (e *Engine) step(x *exchange, f *gateway.Flow, resumed bool) {
	later := false
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("gateway: edge: panic", "panic", p)
			ctx := x.ctx
			ctx.Response.Reset()
			ctx.SetConnectionClose()
			plainError(ctx, http.StatusInternalServerError)
			later = false
		}
		if !later {
			e.finish(x)
		}
	}()
	if resumed {
		later = e.forward(x, f, x.rec)
	} else {
		later = e.g.Run(x, f)
	}
	if !later && x.left && x.status == 0 {
		e.left(x)
	}
}

// left ends a request whose client left while it waited (in a leaky
// queue, or for a place under overload control), which the flow then
// answered nothing: the connection is closed without an answer (logged
// 499), as for a body cut off. fasthttp would otherwise write its default
// answer, a 200 with no body, which a client that only shut its side down
// reads as its request served.
func (e *Engine) left(x *exchange) {
	ctx := x.ctx
	ctx.Response.Reset()
	ctx.SetConnectionClose()
	x.status = statusClientGone
	if c := ctx.Conn(); c != nil {
		_ = c.Close()
	}
}

// finish ends a request once its answer is written.
func (e *Engine) finish(x *exchange) {
	e.g.Finish(x, x.f)
	*x = exchange{}
	e.xs.Put(x)
}

// exchange is a request served by the edge engine.
type exchange struct {
	e      *Engine
	ctx    *fasthttp.RequestCtx
	f      *gateway.Flow
	fields []fields.Field // the fields of the coming answer
	status int
	bytes  int64
	// rec is the flow's recorder of a request admitted before its body,
	// kept for its forwarding (serve).
	rec *gateway.Recorder
	// bodyErr is the client's failure to send the body read for an
	// estimate (RequestBody): the request goes to no upstream.
	bodyErr error
	// left says a watch saw the client leave while the request waited
	// (Wait, WatchClient).
	left bool
}

// context is the request's context. fasthttp cannot tell when a client
// leaves while its request is served, so it never ends; a request that
// waits in a queue watches its connection instead (watch).
func (x *exchange) Context() context.Context { return context.Background() }

func (x *exchange) DelHeader(name string) { delStable(&x.ctx.Request.Header, s2b(name)) }

func (x *exchange) SetHeader(name, value string) { x.ctx.Request.Header.Set(name, value) }

func (x *exchange) Proxies() bool { return true }

func (x *exchange) SetFields(fs []fields.Field) { x.fields = fs }

func (x *exchange) Answered() (int, int64) { return x.status, x.bytes }

// wait holds the request in its queue, watching its connection for the
// client leaving meanwhile.
func (x *exchange) Wait(ctx context.Context, f *gateway.Flow, delay time.Duration) bool {
	return x.e.g.WaitInQueue(ctx, f, delay, x.WatchClient)
}

// WatchClient watches the client's connection while its request waits
// (for a place under its route's overload control, or in a leaky queue);
// once the watch ends, x.left says whether it saw the client leave.
func (x *exchange) WatchClient() (<-chan struct{}, func()) {
	c, ok := x.ctx.Conn().(*conn)
	if !ok {
		return nil, func() {}
	}
	gone, stop := c.watch(false)
	return gone, func() {
		stop()
		select {
		case <-gone:
			x.left = true
		default:
		}
	}
}

func (x *exchange) Keep(ctx context.Context, leases []limiter.Hit) func() {
	return x.e.g.Renew(ctx, leases)
}

func (x *exchange) Answer(status int, body []byte, challenge bool) {
	resp := &x.ctx.Response
	resp.SetStatusCode(status)
	resp.Header.SetContentTypeBytes(jsonTypeBytes)
	for _, f := range x.fields {
		resp.Header.SetCanonical(fieldName(f.Name), s2b(f.Value))
	}
	if challenge {
		resp.Header.SetCanonical(wwwAuthenticate, bearerChallengeBytes)
	}
	resp.SetBodyRaw(body)
	x.status, x.bytes = status, int64(len(body))
}

// addFields adds the pending fields to an upstream's response, before the
// upstream's own lines of the same names, as the net/http engine writes
// them (its reverse proxy adds the upstream's after the gateway's): a
// client reading the first line of RateLimit reads the gateway's, its
// binding limit first.
func (x *exchange) addFields() {
	h := &x.ctx.Response.Header
	// The upstream's lines of those names, in order: seldom any.
	var theirs []fields.Field
	if x.upstreamSent(h) {
		for i, f := range x.fields {
			if seenName(x.fields[:i], f.Name) {
				continue
			}
			name := b2s(fieldName(f.Name))
			lines := h.PeekAll(name)
			for _, v := range lines {
				theirs = append(theirs, fields.Field{Name: f.Name, Value: string(v)})
			}
			if len(lines) > 0 {
				delStable(h, s2b(name))
			}
		}
	}
	for _, f := range x.fields {
		h.AddBytesKV(fieldName(f.Name), s2b(f.Value))
	}
	for _, f := range theirs {
		h.AddBytesKV(fieldName(f.Name), s2b(f.Value))
	}
}

// upstreamSent reports whether the upstream's answer h has a line named
// as one of the pending fields (in any case), in one look at its lines;
// with no field pending (the RateLimit fields off) it looks at none.
func (x *exchange) upstreamSent(h *fasthttp.ResponseHeader) bool {
	if len(x.fields) == 0 {
		return false
	}
	for k := range h.All() {
		for _, f := range x.fields {
			if len(k) == len(f.Name) && strings.EqualFold(b2s(k), f.Name) {
				return true
			}
		}
	}
	return false
}

// seenName reports whether fs holds a field named name.
func seenName(fs []fields.Field, name string) bool {
	for _, f := range fs {
		if f.Name == name {
			return true
		}
	}
	return false
}

func (x *exchange) Pass(f *gateway.Flow, rec *gateway.Recorder) bool {
	if c, ok := x.ctx.Conn().(*conn); ok && c.expecting {
		// Admitted before its body: the client is told to send it, and
		// the handler forwards it then (serve). fasthttp may hand this
		// request's buffers on before that if the body never comes
		// (abandon): the flow's views of them are copied.
		v, m := f.Request(), f.Match()
		v.Host, v.Path, m.User = strings.Clone(v.Host), strings.Clone(v.Path), strings.Clone(m.User)
		v.RawPath = strings.Clone(v.RawPath)
		x.rec = rec
		c.resume.Store(x)
		return true
	}
	return x.e.forward(x, f, rec)
}

// requestBody reads a body of known length up to max bytes; the body is
// then held in memory and forwarded from there. A body of unknown length
// (chunked) or over max is not read: its estimate is the default.
func (x *exchange) RequestBody(max int) []byte {
	req := &x.ctx.Request
	n := req.Header.ContentLength()
	if n <= 0 || n > max {
		return nil
	}
	if !req.IsBodyStream() {
		if b := req.Body(); len(b) == n {
			return b
		}
		x.bodyErr = gateway.ClientBodyError(io.ErrUnexpectedEOF, false)
		return nil
	}
	// The stream is read here and not through Body, which takes the text
	// of a read's error for the body: a client that stalls or leaves
	// mid-body, with a Content-Length the length of that text (which it
	// can work out from the two addresses), would have it sent upstream
	// as a body it never sent.
	b := make([]byte, n)
	if _, err := io.ReadFull(req.BodyStream(), b); err != nil {
		// The client's body stalled or was cut off: a body of known
		// length has no framing to break.
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		x.bodyErr = clientBodyError(err, false)
		return nil
	}
	req.SetBodyRaw(b) // forwarded from here
	return b
}

var (
	jsonTypeBytes        = []byte("application/json")
	wwwAuthenticate      = []byte("WWW-Authenticate")
	bearerChallengeBytes = []byte(gateway.BearerChallenge)
)

var (
	namePolicy          = []byte("Ratelimit-Policy")
	nameRateLimit       = []byte("Ratelimit")
	nameRetryAfter      = []byte("Retry-After")
	nameLegacyLimit     = []byte("X-Ratelimit-Limit")
	nameLegacyRemaining = []byte("X-Ratelimit-Remaining")
	nameLegacyReset     = []byte("X-Ratelimit-Reset")
)

// otherNames are the other field names (a binding limit's field), as
// fasthttp writes them.
var otherNames sync.Map // string → []byte

// fieldName returns the canonical bytes of a field name.
func fieldName(name string) []byte {
	switch name {
	case fields.NamePolicy:
		return namePolicy
	case fields.NameRateLimit:
		return nameRateLimit
	case fields.NameRetryAfter:
		return nameRetryAfter
	case fields.NameLegacyLimit:
		return nameLegacyLimit
	case fields.NameLegacyRemaining:
		return nameLegacyRemaining
	case fields.NameLegacyReset:
		return nameLegacyReset
	}
	if b, ok := otherNames.Load(name); ok {
		return b.([]byte)
	}
	b := []byte(http.CanonicalHeaderKey(name))
	otherNames.Store(name, b)
	return b
}

// edgeHeader reads a fasthttp request's header fields as identity.Header.
type edgeHeader fasthttp.RequestHeader

func (h *edgeHeader) Get(name string) string {
	return b2s((*fasthttp.RequestHeader)(h).Peek(name))
}

var _ gateway.LineCounter = (*edgeHeader)(nil)

var _ gateway.NameLister = (*edgeHeader)(nil)

// FindName returns the first name of a field line, as it came, that m
// matches, or "".
func (h *edgeHeader) FindName(m *gateway.NameMatch) string {
	for k := range fieldNames((*fasthttp.RequestHeader)(h).RawHeaders()) {
		if m.Matches(b2s(k)) {
			return b2s(k)
		}
	}
	return ""
}

// Lines counts the lines of a field without gathering them. fasthttp
// keeps one line of some fields (User-Agent, Content-Type, Content-Length,
// Trailer: the last one sent), so those are counted in the head as it
// came, where a request that repeats one is seen doing so, as net/http
// sees it.
func (h *edgeHeader) Lines(name string) int {
	rh := (*fasthttp.RequestHeader)(h)
	n := len(rh.PeekAll(name))
	if keptOnce(name) {
		raw := 0
		for k := range fieldNames(rh.RawHeaders()) {
			if bytes.EqualFold(k, s2b(name)) {
				raw++
			}
		}
		n = max(n, raw)
	}
	return n
}

// keptOnce reports whether fasthttp keeps a single line of the request
// field name, whatever the number of lines sent.
func keptOnce(name string) bool {
	switch len(name) {
	case 7:
		return strings.EqualFold(name, fasthttp.HeaderTrailer)
	case 10:
		return strings.EqualFold(name, fasthttp.HeaderUserAgent)
	case 12:
		return strings.EqualFold(name, fasthttp.HeaderContentType)
	case 14:
		return strings.EqualFold(name, fasthttp.HeaderContentLength)
	}
	return false
}

func (h *edgeHeader) Values(name string) []string {
	all := (*fasthttp.RequestHeader)(h).PeekAll(name)
	if len(all) == 0 {
		return nil
	}
	out := make([]string, len(all))
	for i, v := range all {
		out[i] = b2s(v)
	}
	return out
}

// hostOf returns the host a request is routed by as fasthttp's
// ctx.Host() reads it (an absolute-form target's host, else the Host
// field's, lowercased and unescaped), without fasthttp's parse of the
// whole target, path and all, when the target is a path and the field is
// plain: lowercase letters, digits, dots and hyphens, and a port, as
// nearly every request sends it, which that parse returns unchanged. The
// bytes are the header's: valid until the header is rewritten.
func hostOf(ctx *fasthttp.RequestCtx) []byte {
	h := &ctx.Request.Header
	uri, host := h.RequestURI(), h.Host()
	if len(uri) > 0 && uri[0] == '/' && (len(uri) == 1 || uri[1] != '/') && plainhead.PlainHost(host) {
		return host
	}
	return ctx.Host()
}

// methodOf returns a method as a string, without allocating for the
// common ones.
func methodOf(b []byte) string {
	switch string(b) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodPost:
		return http.MethodPost
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	}
	return strings.Clone(b2s(b))
}

// peerOf returns the address of a connection's other end.
func peerOf(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort().Addr().Unmap().WithZone("")
	}
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// b2s views b as a string, without copying: valid while b is not changed.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// s2b views s as bytes, without copying: they must not be changed.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// fieldsSeen is what badFields saw among a request's field names.
type fieldsSeen struct {
	override bool // a method override header
	upgrade  bool // an Upgrade field
	expect   bool // an Expect field
}

// badFields returns why a request's header fields are refused, or "": a
// field name that is not a token (RFC 9110 5.1), which net/http refuses
// too (fasthttp itself refuses values with control characters). It says
// which fields that the engine looks at further are there.
func badFields(h *fasthttp.RequestHeader) (why string, f fieldsSeen) {
	for k := range fieldNames(h.RawHeaders()) {
		if len(k) == 0 {
			return "invalid header name", fieldsSeen{}
		}
		for _, c := range k {
			if !plainhead.Token(c) {
				return "invalid header name", fieldsSeen{}
			}
		}
		switch len(k) {
		case 6:
			f.expect = f.expect || bytes.EqualFold(k, []byte("Expect"))
		case 7:
			f.upgrade = f.upgrade || bytes.EqualFold(k, []byte("Upgrade"))
		}
		if plainhead.IsOverride(k) {
			f.override = true
		}
	}
	return "", f
}

// drainBounds bound reading an answer after its client left (the
// gateway's TransportOptions.DrainTimeout and DrainBytes).
type drainBounds struct {
	wait  time.Duration
	bytes int64
}

// expectationFails reports whether a request's Expect field asks for
// something other than 100-continue, which net/http's server answers 417.
func expectationFails(expect []byte) bool {
	if len(expect) == 0 {
		return false
	}
	for part := range bytes.SplitSeq(expect, []byte(",")) {
		if bytes.EqualFold(bytes.TrimSpace(part), []byte("100-continue")) {
			return false
		}
	}
	return true
}

// fieldNames yields the name of each field of a request's head as it came
// (RawHeaders), skipping the continuation lines of folded fields. The
// names are read there and not through fasthttp's All, which gathers the
// Cookie fields into cookies it parses: once gathered, they are written
// to the upstream joined into one field, unquoted, their empty pairs
// dropped, no longer what the client sent.
func fieldNames(raw []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for len(raw) > 0 {
			line := raw
			if i := bytes.IndexByte(raw, '\n'); i >= 0 {
				line, raw = raw[:i], raw[i+1:]
			} else {
				raw = nil
			}
			if len(line) == 0 || line[0] == ' ' || line[0] == '\t' || line[0] == '\r' {
				continue // a folded field's continuation, or the head's end
			}
			if i := bytes.IndexByte(line, ':'); i >= 0 && !yield(line[:i]) {
				return
			}
		}
	}
}

// hasField reports whether raw, a request's header fields as sent, has a
// field line named name (in any case): for fields the edge engine's parser
// takes and does not keep (Transfer-Encoding: identity).
func hasField(raw []byte, name string) bool {
	for k := range fieldNames(raw) {
		if bytes.EqualFold(k, s2b(name)) {
			return true
		}
	}
	return false
}
