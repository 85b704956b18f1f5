package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/limiter"
	"github.com/valyala/fasthttp"
)

// The edge engine serves HTTP/1.1 on github.com/valyala/fasthttp: the
// same request path (handle) as net/http, read through a Request whose
// strings are views of fasthttp's buffers, answered from precomputed
// bodies, and forwarded upstream over pooled connections that are capped
// per host. What it cannot serve it hands to a net/http server: a
// connection that opens with HTTP/2's preface (h2c), and a request that
// upgrades its connection (WebSocket).

// EdgeOptions configure the edge engine (Gateway.NewEdge). Zero fields take
// the defaults in brackets.
type EdgeOptions struct {
	// ReadHeaderTimeout bounds reading a request's headers, and the first
	// bytes of a new connection [10s].
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a request's body, from the end of its
	// headers [60s].
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
	// speak HTTP/2 with prior knowledge, and requests that upgrade their
	// connection. Its Handler is usually the Gateway itself. Nil: such
	// connections are closed and such requests answered 501.
	Fallback *http.Server
	// Logger receives the engine's errors (default: the Gateway's).
	Logger *slog.Logger
}

// Edge is the gateway's edge engine: an HTTP/1.1 reverse proxy on
// fasthttp that enforces the same policy as Gateway.ServeHTTP.
type Edge struct {
	g        *Gateway
	srv      *fasthttp.Server
	fallback *http.Server
	log      *slog.Logger
	header   time.Duration

	mu     sync.Mutex // guards ln, fast, slow and closed
	ln     net.Listener
	fast   *chanListener
	slow   *chanListener
	closed bool
}

// NewEdge returns the edge engine of g.
func (g *Gateway) NewEdge(o EdgeOptions) *Edge {
	def := func(d, v time.Duration) time.Duration {
		if d <= 0 {
			return v
		}
		return d
	}
	e := &Edge{g: g, fallback: o.Fallback, log: o.Logger, header: def(o.ReadHeaderTimeout, 10*time.Second)}
	if e.log == nil {
		e.log = g.log
	}
	maxHeader := o.MaxHeaderBytes
	if maxHeader <= 0 {
		maxHeader = 64 << 10
	}
	read := def(o.ReadTimeout, 60*time.Second)
	e.srv = &fasthttp.Server{
		Handler:      e.serve,
		ErrorHandler: e.readError,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			// The headers are in: the body has ReadTimeout.
			return fasthttp.RequestConfig{ReadTimeout: read}
		},
		Name:            "",
		ReadTimeout:     e.header,
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
func (e *Edge) Serve(ln net.Listener) error {
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
	if e.fallback != nil {
		go func() {
			if err := e.fallback.Serve(e.slow); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				errc <- err
			}
		}()
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			e.fast.Close()
			e.slow.Close()
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("gateway: edge: accept: %w", err)
		}
		go e.route(c)
	}
}

// route reads the first bytes of a new connection and hands it to the
// engine that speaks its protocol: HTTP/2 with prior knowledge, and
// requests whose lines end in a bare LF, go to net/http.
func (e *Edge) route(c net.Conn) {
	ec := &edgeConn{Conn: c}
	h2, bareLF, err := ec.sniff(time.Now().Add(e.header))
	switch {
	case err != nil:
		c.Close() // nothing came in time, or the client left
	case (h2 || bareLF) && e.fallback != nil:
		e.slow.push(ec)
	case h2:
		c.Close()
	default:
		e.fast.push(ec)
	}
}

// Shutdown stops accepting, lets the requests in flight finish (until ctx
// ends) and closes the connections.
func (e *Edge) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	if e.ln != nil {
		_ = e.ln.Close() // Serve's accept loop ends
	}
	e.mu.Unlock()
	err := e.srv.ShutdownWithContext(ctx)
	if e.fallback != nil {
		if ferr := e.fallback.Shutdown(ctx); err == nil {
			err = ferr
		}
	}
	return err
}

// Close closes the engine's listeners and connections at once.
func (e *Edge) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.Shutdown(ctx)
	if e.fallback != nil {
		_ = e.fallback.Close()
	}
	return err
}

// readError answers a request fasthttp could not read as net/http would:
// 431 for headers over the limit, nothing for a client too slow (the
// connection is closed), 400 for the rest.
func (e *Edge) readError(ctx *fasthttp.RequestCtx, err error) {
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
type edgeLogger struct{ e *Edge }

func (l edgeLogger) Printf(format string, args ...any) {
	l.e.log.Debug("gateway: edge: " + fmt.Sprintf(format, args...))
}

// serve is the edge engine's handler.
func (e *Edge) serve(ctx *fasthttp.RequestCtx) {
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
	if f.upgrade && ctx.Request.Header.ConnectionUpgrade() && len(ctx.Request.Header.Peek("Upgrade")) > 0 {
		e.upgrade(ctx)
		return
	}
	e.g.serveEdge(ctx, !f.override)
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
func (e *Edge) admit(ctx *fasthttp.RequestCtx, expect bool) bool {
	h := &ctx.Request.Header
	target := h.RequestURI()
	if status, text, closeIt := preflight(b2s(h.Method()), b2s(target), b2s(h.Host()), h.IsHTTP11()); status != 0 {
		if status == http.StatusOK {
			ctx.Response.Reset()
			ctx.SetStatusCode(status) // OPTIONS *: no body, the connection kept
			return false
		}
		plainErrorText(ctx, status, text)
		if !closeIt {
			ctx.Response.Header.ResetConnectionClose()
		}
		return false
	}
	if !validEscapes(target) {
		plainError(ctx, http.StatusBadRequest)
		return false
	}
	if expect && expectationFails(h.Peek("Expect")) {
		ctx.Response.Reset()
		ctx.SetStatusCode(http.StatusExpectationFailed)
		ctx.SetConnectionClose()
		return false
	}
	if h.ContentLength() == -1 {
		h.SetConnectionClose() // forwardEdge closes after the answer
		ctx.SetConnectionClose()
	} else if hasField(h.RawHeaders(), "transfer-encoding") {
		plainErrorText(ctx, http.StatusNotImplemented, "Unsupported transfer encoding")
		return false
	}
	return true
}

// upgrade hands a request that upgrades its connection (a WebSocket) to
// the fallback server, with the connection.
func (e *Edge) upgrade(ctx *fasthttp.RequestCtx) {
	if e.fallback == nil || ctx.Request.Header.ContentLength() != 0 && ctx.Request.Header.ContentLength() != -2 {
		plainError(ctx, http.StatusNotImplemented)
		return
	}
	head := append([]byte(nil), ctx.Request.Header.Header()...)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		e.slow.push(&edgeConn{Conn: c, pre: head})
	})
}

// serveEdge runs the request path for a request of the edge engine.
func (g *Gateway) serveEdge(ctx *fasthttp.RequestCtx, noOverride bool) {
	st := g.get()
	x := &st.eh
	x.g, x.ctx, x.st = g, ctx, st
	v := &st.view
	h := &ctx.Request.Header
	v.Method = methodOf(h.Method())
	v.Host = b2s(ctx.Host())
	v.Path = b2s(ctx.Path())
	v.Proto = "HTTP/1.1"
	if !h.IsHTTP11() {
		v.Proto = "HTTP/1.0"
	}
	if c, ok := ctx.Conn().(*edgeConn); ok {
		v.Peer, v.peerText = c.peer()
	} else {
		v.Peer = peerOf(ctx.RemoteAddr())
	}
	v.Header = (*edgeHeader)(h)
	v.noOverride = noOverride
	later := false
	defer func() {
		if p := recover(); p != nil {
			g.log.Error("gateway: edge: panic", "panic", p)
			ctx.Response.Reset()
			ctx.SetConnectionClose()
			plainError(ctx, http.StatusInternalServerError)
			later = false
		}
		if !later {
			g.finish(x, st)
			g.put(st)
		}
	}()
	later = g.handle(x, st)
}

// edgeExchange is a request served by the edge engine.
type edgeExchange struct {
	g      *Gateway
	ctx    *fasthttp.RequestCtx
	st     *reqState
	fields []fields.Field // the fields of the coming answer
	status int
	bytes  int64
}

func (x *edgeExchange) reset() { *x = edgeExchange{} }

// context is the request's context. fasthttp cannot tell when a client
// leaves while its request is served, so it never ends; a request that
// waits in a queue watches its connection instead (watch).
func (x *edgeExchange) context() context.Context { return context.Background() }

func (x *edgeExchange) delHeader(name string) { x.ctx.Request.Header.Del(name) }

func (x *edgeExchange) proxies() bool { return true }

func (x *edgeExchange) setFields(fs []fields.Field) { x.fields = fs }

func (x *edgeExchange) answered() (int, int64) { return x.status, x.bytes }

// wait holds the request in its queue, watching its connection for the
// client leaving meanwhile.
func (x *edgeExchange) wait(ctx context.Context, st *reqState, delay time.Duration) bool {
	return x.g.wait(ctx, st, delay, func() (<-chan struct{}, func()) {
		if c, ok := x.ctx.Conn().(*edgeConn); ok {
			return c.watch(false)
		}
		return nil, func() {}
	})
}

func (x *edgeExchange) keep(ctx context.Context, leases []limiter.Hit) func() {
	return x.g.renew(ctx, leases)
}

func (x *edgeExchange) answer(status int, body []byte, challenge bool) {
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

// addFields adds the pending fields to an upstream's response.
func (x *edgeExchange) addFields() {
	for _, f := range x.fields {
		x.ctx.Response.Header.AddBytesKV(fieldName(f.Name), s2b(f.Value))
	}
}

func (x *edgeExchange) pass(st *reqState, rec *costRecorder) bool {
	return x.g.forwardEdge(x, st, rec)
}

// requestBody reads a body of known length up to max bytes; the body is
// then held in memory and forwarded from there. A body of unknown length
// (chunked) or over max is not read: its estimate is the default.
func (x *edgeExchange) requestBody(max int) []byte {
	req := &x.ctx.Request
	n := req.Header.ContentLength()
	if n <= 0 || n > max {
		return nil
	}
	b := req.Body()
	if len(b) != n {
		return nil
	}
	return b
}

var (
	jsonTypeBytes        = []byte("application/json")
	wwwAuthenticate      = []byte("WWW-Authenticate")
	bearerChallengeBytes = []byte(bearerChallenge[0])
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
	for k := range h.All() {
		if len(k) == 0 {
			return "invalid header name", fieldsSeen{}
		}
		for _, c := range k {
			if !tokenChar[c] {
				return "invalid header name", fieldsSeen{}
			}
		}
		switch len(k) {
		case 6:
			f.expect = f.expect || string(k) == "Expect"
		case 7:
			f.upgrade = f.upgrade || string(k) == "Upgrade"
		}
		if len(k) >= 13 && (k[0] == 'X' || k[0] == 'x') && (bytes.HasPrefix(k[1:], []byte("-Http-Method")) ||
			bytes.HasPrefix(k[1:], []byte("-Method-Override"))) {
			f.override = true
		}
	}
	return "", f
}

// tokenChar says which bytes a token (a field name) may hold.
var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
