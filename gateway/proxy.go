package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/bufpool"
	"github.com/floodgate/floodgate/limiter"
)

// DefaultTLSHandshakeTimeout bounds the TLS handshake with an upstream
// on both engines (TransportOptions.TLSHandshakeTimeout).
const DefaultTLSHandshakeTimeout = 5 * time.Second

// TransportOptions tune the reverse proxy's upstream connections. Zero
// fields take the defaults in brackets.
type TransportOptions struct {
	// DialTimeout bounds connecting to an upstream [5s].
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake [5s].
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is sent [30s], and each write of the
	// request: an upstream that takes none of a request's body for that
	// long fails the request as one that does not answer.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes idle upstream connections [90s].
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost keeps this many idle connections per upstream
	// [512, at most MaxConnsPerHost], so that a busy gateway reuses
	// connections instead of opening new ones.
	MaxIdleConnsPerHost int
	// MaxConnsPerHost bounds the connections to one upstream host [0: no
	// bound]; past it requests wait for a connection to come free, so that
	// a flood of slow requests cannot run the process out of file
	// descriptors.
	MaxConnsPerHost int
	// DrainTimeout bounds how long the rest of an upstream's answer is
	// read after its client left, when the answer may still tell the
	// actual cost of a reservation (a usage field at the end of a body or
	// stream) [60s]. Past it the reservation keeps its estimate.
	DrainTimeout time.Duration
	// DrainBytes bounds the bytes so read and discarded [64 MiB].
	DrainBytes int64
	// TLS is the client configuration of https:// upstreams [nil: the
	// system's CAs, no client certificate]; a route's upstream_tls
	// replaces it (UseRoutes).
	TLS *tls.Config
}

// NewTransport returns the HTTP transport the reverse proxy uses: a timeout
// on every phase of an upstream call, many idle connections per host, an
// answer's head bounded at floodgate.UpstreamHeadBytes (as on the edge
// engine), and the upstream asked for the content codings the client asked
// for and no others (the transport's own gzip, which would have the
// upstream compress and the gateway decompress, is off).
func NewTransport(o TransportOptions) *http.Transport {
	def := func(d, v time.Duration) time.Duration {
		if d <= 0 {
			return v
		}
		return d
	}
	idle := o.MaxIdleConnsPerHost
	if idle <= 0 {
		idle = 512
	}
	if o.MaxConnsPerHost > 0 {
		idle = min(idle, o.MaxConnsPerHost)
	}
	dialer := &net.Dialer{Timeout: def(o.DialTimeout, floodgate.DefaultUpstreamDialTimeout), KeepAlive: 30 * time.Second,
		ControlContext: noteCheckDial}
	answer := def(o.ResponseHeaderTimeout, floodgate.DefaultUpstreamTimeout)
	return &http.Transport{
		Proxy: nil, // an upstream is reached directly, never through the environment's proxy
		// A write of a request (its head or its body) waits for the
		// upstream to take it as long as the answer is waited for.
		DialContext:            dialUpstream(dialer, answer),
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           4 * idle,
		MaxIdleConnsPerHost:    idle,
		MaxConnsPerHost:        max(o.MaxConnsPerHost, 0),
		IdleConnTimeout:        def(o.IdleConnTimeout, floodgate.DefaultUpstreamIdleTimeout),
		TLSHandshakeTimeout:    def(o.TLSHandshakeTimeout, DefaultTLSHandshakeTimeout),
		ResponseHeaderTimeout:  answer,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: floodgate.UpstreamHeadBytes,
		DisableCompression:     true,
		TLSClientConfig:        o.TLS,
	}
}

// upstreamProxy forwards one route's requests to its upstream.
type upstreamProxy struct {
	rp    *httputil.ReverseProxy
	route string
}

// errUpstreamStatus is an upstream's answer with a status outside
// 100–999, which HTTP/1 cannot carry and no client can be given: the
// client gets 502, as on the edge engine.
var errUpstreamStatus = errors.New("gateway: the upstream answered a status that is not three digits")

// errUpstreamTrailer is an upstream's answer whose trailers, or whose
// Trailer field, hold a field no trailer may hold (RFC 9110 §6.5.1:
// Set-Cookie, Content-Length, Authorization, ...). The edge engine's
// parser refuses such an answer; the net/http engine passed it on, its
// trailers with it, before 2026-12-06.
var errUpstreamTrailer = errors.New("gateway: an upstream trailer holds a field no trailer may")

// upstreamTrailerCheck is the body of an upstream's answer that may have
// trailers: at its end it fails when they hold a field no trailer may
// hold, so the answer is broken off (its connection closed without the
// answer's end) rather than passed on whole with them, as on the edge
// engine.
type upstreamTrailerCheck struct {
	io.ReadCloser
	resp *http.Response
}

func (b *upstreamTrailerCheck) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		if k := badTrailer(b.resp.Trailer); k != "" {
			return n, fmt.Errorf("%w: %s", errUpstreamTrailer, k)
		}
	}
	return n, err
}

var (
	bodyNotFound   = []byte(`{"message":"Not Found"}` + "\n")
	bodyBadGateway = []byte(`{"message":"Bad Gateway"}` + "\n")
	bodyTimeout    = []byte(`{"message":"Gateway Timeout"}` + "\n")
)

// forward sends the request to its route's upstream.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, st *Flow) {
	u := st.m.Upstream
	if u == nil {
		markFailed(w) // the gateway's answer, not an upstream's
		writeJSON(w, http.StatusNotFound, bodyNotFound)
		return
	}
	if !st.m.PeerTrusted {
		// What the client says of its own address reaches the upstream
		// only from a trusted proxy: the chain is then the peer alone.
		delete(r.Header, "X-Forwarded-For")
		delete(r.Header, "X-Real-Ip")
	}
	if r.Body != nil && r.Body != http.NoBody {
		// The body goes on to the upstream while the answer comes back
		// (an upstream may answer, even stream its answer, before it has
		// read the body): the server must not read the rest of the body
		// itself and close it once the answer's head is written, as it
		// does by default, taking from the upstream what it had not yet
		// read and failing the transport's next read, which then closes
		// the upstream connection and cuts the answer short.
		_ = http.NewResponseController(w).EnableFullDuplex()
		// What fails reading the client's body is told apart from what
		// fails upstream (the ErrorHandler).
		r.Body = &clientBody{ReadCloser: r.Body, f: st, chunked: len(r.TransferEncoding) > 0}
	}
	st.UpstreamBegan()
	defer st.UpstreamEnded()
	iw := &st.nh.iw
	iw.start(w, r.ProtoMajor == 1 && r.ProtoMinor == 0)
	if p := g.PoolOf(st.m.Route, u); p != nil {
		p.proxy.rp.ServeHTTP(iw, r)
		return
	}
	g.proxyOf(u, st.m.Route).rp.ServeHTTP(iw, r)
}

// interimWriter is the writer the reverse proxy answers a client through.
// ReverseProxy relays an upstream's interim answer (a 1xx but 101: 100
// Continue, 102 Processing, 103 Early Hints) by adding its fields to the
// writer's, writing it, and clearing the writer's fields. The fields the
// gateway set before forwarding (the RateLimit fields, Connection: close
// after a chunked body) went out on the interim answer and were gone from
// the final one. interimWriter writes an interim answer with its own
// fields alone and puts the gateway's back for the final answer (or the
// gateway's own, a 502 or 504). An HTTP/1.0 client is sent no interim
// answer (RFC 9110 §15.2: it cannot tell one from the final answer, and
// would take the final answer for the next request's), as on the edge
// engine, which reads past them.
type interimWriter struct {
	http.ResponseWriter
	http10 bool           // the client speaks HTTP/1.0: it is sent no interim answer
	own    []headerField  // the gateway's fields when the request was forwarded
	room   [6]headerField // own's, so that a request allocates none
	// relayed says an interim answer was written: own is put back at the
	// next use of the writer, after ReverseProxy cleared the fields.
	relayed bool
}

// headerField is a field's name and values.
type headerField struct {
	name   string
	values []string
}

// start readies w to answer through rw, holding the fields set on rw so
// far as the gateway's; http10 says its client speaks HTTP/1.0.
func (w *interimWriter) start(rw http.ResponseWriter, http10 bool) {
	w.ResponseWriter, w.http10, w.relayed = rw, http10, false
	w.own = w.room[:0]
	for name, v := range rw.Header() {
		// Capped: a value ReverseProxy appends to the field goes to a
		// slice of its own.
		w.own = append(w.own, headerField{name, v[:len(v):len(v)]})
	}
}

// Header returns the answer's fields, the gateway's put back after an
// interim answer.
func (w *interimWriter) Header() http.Header {
	h := w.ResponseWriter.Header()
	if w.relayed {
		w.relayed = false
		clear(h)
		for _, f := range w.own {
			h[f.name] = f.values
		}
	}
	return h
}

func (w *interimWriter) WriteHeader(code int) {
	if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
		w.Header()
		w.ResponseWriter.WriteHeader(code)
		return
	}
	// The fields hold the gateway's, then the interim answer's, which
	// ReverseProxy added after them: the interim answer goes with its
	// own alone.
	h := w.ResponseWriter.Header()
	for _, f := range w.own {
		if v := h[f.name]; len(v) > len(f.values) {
			h[f.name] = v[len(f.values):]
		} else {
			delete(h, f.name)
		}
	}
	if !w.http10 {
		w.ResponseWriter.WriteHeader(code)
	}
	w.relayed = true
}

func (w *interimWriter) Write(b []byte) (int, error) {
	w.Header()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *interimWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// upstreamFailed passes the upstream's failure on (markFailed).
func (w *interimWriter) upstreamFailed() { markFailed(w.ResponseWriter) }

// upstreamProxies are the proxies of one upstream, one per route that
// sends requests there (routes may share an upstream, as every route does
// with "floodgate serve --demo"), so that each counts the upstream's
// answers under its own name. They share the gateway's transport, and so
// its connections.
type upstreamProxies struct {
	mu     sync.Mutex                                // serialises adding a route
	routes atomic.Pointer[map[string]*upstreamProxy] // copied on write
}

// proxyOf returns the proxy of route to u, making it on first use. The
// routes are the policy's, so there are few.
func (g *Gateway) proxyOf(u *url.URL, route string) *upstreamProxy {
	v, ok := g.proxies.Load(u)
	if !ok {
		v, _ = g.proxies.LoadOrStore(u, new(upstreamProxies))
	}
	ps := v.(*upstreamProxies)
	if m := ps.routes.Load(); m != nil {
		if p := (*m)[route]; p != nil {
			return p
		}
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	next := map[string]*upstreamProxy{}
	if m := ps.routes.Load(); m != nil {
		if p := (*m)[route]; p != nil {
			return p
		}
		maps.Copy(next, *m)
	}
	p := g.newUpstreamProxy(u, route)
	next[route] = p
	ps.routes.Store(&next)
	return p
}

func (g *Gateway) newUpstreamProxy(target *url.URL, route string) *upstreamProxy {
	up := &upstreamProxy{route: route}
	up.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The query as the client sent it, as on the edge engine (the
			// proxy rewrote one with a semicolon: dropped what it could not
			// parse, sorted the rest). The gateway reads no query.
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			// The path as the request was routed and limited: an upstream
			// that does not resolve dot segments (Flask, Express) would
			// serve /admin/../x by its /admin route, and one behind a path
			// prefix would be taken out of it.
			if p, ok := ResolveDotSegments(pr.In.URL.EscapedPath()); ok {
				if d, err := url.PathUnescape(p); err == nil {
					pr.Out.URL.Path, pr.Out.URL.RawPath = d, p
				}
			}
			pr.SetURL(target)
			// Keep the chain of proxies and add this hop, as NGINX's
			// $proxy_add_x_forwarded_for does (forward removed it when the
			// peer is not a trusted proxy).
			if xff := pr.In.Header["X-Forwarded-For"]; len(xff) > 0 {
				pr.Out.Header["X-Forwarded-For"] = xff
			}
			pr.SetXForwarded()
			if pr.In.Host == "" {
				// No host to tell (HTTP/1.0 without Host): no field, as
				// on the edge engine, rather than an empty one.
				pr.Out.Header.Del("X-Forwarded-Host")
			}
			// The gateway answers Expect itself: the server says 100
			// Continue when the body is first read, once the request is
			// admitted (as NGINX and Envoy do). Sent on, an upstream's 100
			// would be relayed with the answer's fields, which
			// ReverseProxy then clears.
			pr.Out.Header.Del("Expect")
			// A kept connection is checked before it carries the request.
			pr.Out = pr.Out.WithContext(withKeptCheck(pr.Out.Context()))
		},
		Transport:  connWaitTransport{tr: g.tr, wait: g.connWait},
		BufferPool: bufpool.Copy,
		// FlushInterval 0: ReverseProxy flushes at once for streamed bodies
		// (unknown length, text/event-stream) and buffers the rest.
		ErrorLog: nil,
		ModifyResponse: func(resp *http.Response) error {
			if k := badTrailer(resp.Trailer); k != "" {
				// An answer whose Trailer field names a field no trailer
				// may hold (the transport holds the names it declares in
				// Trailer until the body ends) is no answer, as the edge
				// engine's parser reads it: 502, and a reservation given
				// back.
				return fmt.Errorf("%w: %s", errUpstreamTrailer, k)
			}
			g.obs.Upstream(route, resp.StatusCode)
			if resp.StatusCode < 100 || resp.StatusCode > 999 {
				// An HTTP/2 upstream's :status is any integer it sends;
				// net/http can write none outside 100–999 (it panics).
				return fmt.Errorf("%w: %d", errUpstreamStatus, resp.StatusCode)
			}
			if resp.StatusCode >= 200 && (resp.ContentLength < 0 || resp.ProtoMajor >= 2) {
				// Its trailers (chunked, or HTTP/2) are looked at when
				// its body ends. (A 101's body is the tunnel, which
				// ReverseProxy writes to: it is left as it is.)
				resp.Body = &upstreamTrailerCheck{ReadCloser: resp.Body, resp: resp}
			}
			g.watchStream(resp) // a client that leaves a silent stream
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			markFailed(w) // a reservation of the request is given back
			var ce *clientBodyError
			if errors.As(err, &ce) {
				// The client's body failed, not the upstream.
				status, body := g.clientBodyFailed(ce.f, route, ce)
				if status == 0 {
					panic(http.ErrAbortHandler) // no answer: the connection is closed
				}
				w.Header()["Connection"] = []string{"close"}
				writeJSON(w, status, body)
				return
			}
			if r.Context().Err() != nil {
				// The client went away (or its connection failed): nobody
				// is left to answer, and the upstream did not fail. The
				// connection is closed without an answer: returning would
				// have the server answer 200 to a client that may still
				// read (one that shut its side down mid-body).
				g.log.Debug("gateway: client gone", "route", route, "path", r.URL.Path)
				panic(http.ErrAbortHandler)
			}
			if errors.Is(err, errUpstreamStatus) {
				// Answered, and counted as answered (ModifyResponse), with
				// a status no client can be given.
				g.log.Warn("gateway: upstream error", "route", route, "upstream", target.Host, "err", err)
				writeJSON(w, http.StatusBadGateway, bodyBadGateway)
				return
			}
			g.obs.Upstream(route, 0)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
				g.log.Warn("gateway: upstream timeout", "route", route, "upstream", target.Host, "err", err)
				writeJSON(w, http.StatusGatewayTimeout, bodyTimeout)
				return
			}
			g.log.Warn("gateway: upstream error", "route", route, "upstream", target.Host, "err", err)
			writeJSON(w, http.StatusBadGateway, bodyBadGateway)
		},
	}
	return up
}

// connWaitTransport carries a request over tr, its wait for a connection
// (past TransportOptions.MaxConnsPerHost) bounded by wait, 0 for none:
// net/http's transport bounds the wait for an answer's head, but waits
// for a free connection until the request's context ends, and a request
// whose client left is not ended before its answer's head (drainer). So
// a client holding the upstream's connections (a stream it never ends,
// an answer it never reads) would hold every request behind them, as
// long as it chose. Past wait the request fails with errConnWait, a
// timeout that sent nothing, as the edge engine's does
// (fasthttp.HostClient.MaxConnWaitTimeout).
type connWaitTransport struct {
	tr   http.RoundTripper
	wait time.Duration
}

func (t connWaitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.wait <= 0 {
		return t.tr.RoundTrip(req)
	}
	// The context lives as long as the request's (which ends with the
	// exchange): the answer's body is read under it.
	ctx, cancel := context.WithCancelCause(req.Context())
	var got atomic.Bool
	timer := time.AfterFunc(t.wait, func() {
		if !got.Load() {
			cancel(errConnWait)
		}
	})
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		got.Store(true)
		timer.Stop()
	}}
	resp, err := t.tr.RoundTrip(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	timer.Stop()
	if err != nil && req.Context().Err() == nil && errors.Is(context.Cause(ctx), errConnWait) {
		return nil, errConnWait
	}
	return resp, err
}

// errConnWait is a request that found no upstream connection free within
// the upstream timeout: a timeout (504), with nothing sent.
var errConnWait error = connWaitError{}

type connWaitError struct{}

func (connWaitError) Error() string {
	return "gateway: no upstream connection came free within the upstream timeout"
}
func (connWaitError) Timeout() bool   { return true }
func (connWaitError) Temporary() bool { return true }

// ForgetUpstreams drops the proxies of upstreams no longer used, after a
// policy reload. Under a PolicyMatcher it also puts the reloaded overload
// blocks in force for the requests waiting under them, and lets go on at
// once those of a route that has none any more.
func (g *Gateway) ForgetUpstreams() {
	g.proxies.Clear()
	g.forgetOverload()
	g.forgetAll()
}

// A request's body is sent upstream as its client sends it, on both
// engines, so a send that fails may be the client's doing: its body
// stalled past server.timeouts.read, its connection ended mid-body (a
// shutdown of its side, a reset), or its chunked framing is broken. Each
// engine reads the client's body through a reader whose errors say so
// (clientBodyError), and such a failure is answered here, once for both:
//
//   - It is not the upstream's: no upstream answer is counted (metrics),
//     no failure of a pool's target, and the adaptive limit learns
//     nothing from it (neither a drop nor a latency: a slow client's is
//     not the upstream's). Its place under overload control comes back.
//   - No upstream answer began: a reservation is given back in full, as
//     for an upstream that could not be reached; leases are given back
//     when the request finishes, as always.
//   - A body that timed out or was cut off gets no answer: the connection
//     is closed (logged 499). NGINX logs 408 or 400 for these and sends
//     nothing either (its connection timed out or failed), and net/http's
//     server closes a connection whose head or body is too slow without
//     an answer. A malformed chunked body is the client's error and gets
//     400 with the reason, as NGINX answers it, and the connection is
//     closed after it.

// clientBodyError is an error reading a client's request body while the
// request is sent upstream. It does not unwrap: a body broken off must
// never read as one that ended (io.EOF), whatever its cause.
type clientBodyError struct {
	err     error
	chunked bool  // the body is chunked: its framing may be at fault
	f       *Flow // the request's, on the net/http engine (nil on the edge's)
}

func (e *clientBodyError) Error() string {
	return "gateway: reading the client's body: " + e.err.Error()
}

// ClientBodyError returns err, an error reading a client's request body
// (chunked: of chunked framing), marked as the client's (nil and io.EOF
// unchanged), for Gateway.ClientBodyFailed.
func ClientBodyError(err error, chunked bool) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &clientBodyError{err: err, chunked: chunked}
}

// Abandoned notes that an attempt on t ended with no outcome of the
// upstream's (its client's body failed): it counts for nothing towards
// t's health.
func (p *Pool) Abandoned(t *Target) { t.inflight.Add(-1) }

// clientBody is a client's request body on its way upstream on the
// net/http engine.
type clientBody struct {
	io.ReadCloser
	f       *Flow
	chunked bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &clientBodyError{err: err, chunked: b.chunked, f: b.f}
	}
	return n, err
}

// ClientBodyFailed reports whether err, from forwarding f, is a failure
// of the client's body (ClientBodyError); if so it ends f's upstream part
// as the client's doing and returns the answer: status 0 for none (the
// engine closes the connection without one), else 400 and its body, after
// which the connection is closed.
func (g *Gateway) ClientBodyFailed(f *Flow, err error) (failed bool, status int, body []byte) {
	var ce *clientBodyError
	if !errors.As(err, &ce) {
		return false, 0, nil
	}
	status, body = g.clientBodyFailed(f, f.m.Route, ce)
	return true, status, body
}

// clientBodyFailed ends the upstream part of f, whose client's body
// failed with ce, and returns its answer (ClientBodyFailed).
func (g *Gateway) clientBodyFailed(f *Flow, route string, ce *clientBodyError) (status int, body []byte) {
	if f != nil {
		if f.reserved {
			f.rec.noAnswer = true // a reservation is given back in full
		}
		if f.ovl.held {
			// Given back now, before any answer is written (the net/http
			// engine would tell it to the adaptive limit as the
			// upstream's status): a request whose client is gone and
			// whose upstream gave no status teaches it nothing.
			g.releaseOverloadAs(f, algo.OutcomeIgnored)
		}
	}
	why := malformedBody(ce)
	if why == "" {
		g.log.Debug("gateway: client body failed", "route", route, "err", ce.err)
		return 0, nil
	}
	g.obs.Rejected(limiter.FrontGateway, "", http.StatusBadRequest)
	g.log.Debug("gateway: 400", "reason", why, "route", route, "err", ce.err)
	return http.StatusBadRequest, badRequestBody(why)
}

// malformedBody returns why a client's body that failed with ce is
// refused (400), or "" when its client timed out or left (no answer).
func malformedBody(ce *clientBodyError) string {
	err := ce.err
	var ne net.Error // timeouts, and every error of the connection itself
	if !ce.chunked || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, http.ErrBodyReadAfterClose) {
		return ""
	}
	// What remains is the chunked framing: a chunk size or line that is
	// not one, a chunk line too long, a trailer no trailer may hold. (A
	// body of known length, or an HTTP/2 stream's, has no framing of the
	// client's to break: what fails it is the client leaving.)
	return "malformed chunked body"
}
