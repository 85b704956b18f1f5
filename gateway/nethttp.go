package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"github.com/floodgate/floodgate/fields"
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
}

// serveHTTP runs the request path for a net/http request: next is the
// middleware's next handler, or nil to forward to the upstream.
func (g *Gateway) serveHTTP(w http.ResponseWriter, r *http.Request, next http.Handler) {
	st := g.get()
	x := &st.nh
	*x = httpExchange{g: g, w: w, r: r, next: next}
	if g.alog != nil {
		x.aw = accessWriter{ResponseWriter: w}
		x.w = &x.aw
	}
	st.view.from(r)
	if next == nil && len(r.TransferEncoding) > 0 && r.ProtoMajor == 1 {
		// A request with a chunked body may have carried a Content-Length
		// too, which net/http drops: a proxy in front that framed it by
		// that length would see what follows as another request. Closing
		// the connection after the answer leaves nothing to smuggle.
		w.Header()["Connection"] = []string{"close"}
	}
	// finish runs whatever the handler or the upstream does (errors,
	// panics, timeouts).
	defer func() {
		g.finish(x, st)
		g.put(st)
	}()
	g.handle(x, st)
}

func (x *httpExchange) context() context.Context { return x.r.Context() }

func (x *httpExchange) watch() (<-chan struct{}, func()) { return x.r.Context().Done(), func() {} }

func (x *httpExchange) delHeader(name string) { delete(x.r.Header, name) }

func (x *httpExchange) proxies() bool { return x.next == nil }

func (x *httpExchange) setFields(fs []fields.Field) { setFields(x.w.Header(), fs) }

func (x *httpExchange) answer(status int, body []byte, challenge bool) {
	if challenge {
		x.w.Header()["Www-Authenticate"] = bearerChallenge
	}
	writeJSON(x.w, status, body)
}

func (x *httpExchange) answered() (int, int64) { return x.aw.status, x.aw.bytes }

func (x *httpExchange) pass(st *reqState, rec *costRecorder) bool {
	w := x.w
	if rec != nil {
		rec.hdr = w.Header()
		x.cw = costWriter{ResponseWriter: w, rec: rec}
		w = &x.cw
	}
	switch {
	case x.next != nil:
		x.next.ServeHTTP(w, x.r)
	default:
		x.g.forward(w, x.r, st)
	}
	return false
}

// requestBody reads the body once (up to max bytes) and puts it back for
// the upstream.
func (x *httpExchange) requestBody(max int) []byte {
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
// net/http: it tells its costRecorder the response as it passes, holding
// none of it back.
type costWriter struct {
	http.ResponseWriter
	rec *costRecorder
}

func (c *costWriter) WriteHeader(code int) {
	c.rec.header(code, c.ResponseWriter.Header())
	c.ResponseWriter.WriteHeader(code)
}

func (c *costWriter) Write(b []byte) (int, error) {
	c.rec.header(http.StatusOK, c.ResponseWriter.Header())
	n, err := c.ResponseWriter.Write(b)
	c.rec.read(b[:n])
	return n, err
}

// Flush passes flushes through for streamed responses.
func (c *costWriter) Flush() {
	c.rec.header(http.StatusOK, c.ResponseWriter.Header())
	_ = http.NewResponseController(c.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (c *costWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// upstreamFailed notes that the gateway answered for an upstream that
// could not be reached (or a client that left first).
func (c *costWriter) upstreamFailed() { c.rec.failed = true }

// markFailed tells w, when it is a costWriter, that the upstream failed.
func markFailed(w http.ResponseWriter) {
	if f, ok := w.(interface{ upstreamFailed() }); ok {
		f.upstreamFailed()
	}
}
