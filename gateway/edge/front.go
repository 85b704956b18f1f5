package edge

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/plainhead"
	"github.com/floodgate/floodgate/limiter"
	"github.com/valyala/fasthttp"
)

// The front serves a plain connection's requests on the connection's own
// goroutine before fasthttp does, for the requests nearly every client
// sends and every flood is made of: a GET of HTTP/1.1 with no body, its
// head whole within frontHeadBytes, CRLF line ends, a target of visible
// ASCII beginning with "/", one plain Host and field lines of tokens and
// visible ASCII, none that the edge engine treats apart (a body's, Expect,
// Upgrade, Cookie, Trailer): package plainhead's plain request. It is read
// by that package, which keeps each field line as offsets into the read
// buffer and copies nothing, and it runs through the gateway's flow as on
// fasthttp (the same checks before it, the same view of the request); an
// answer of the gateway's own (a refusal, 403, 404) is written as bytes,
// as fasthttp writes it, with no request or response object filled. A
// request the flow passes to a plain HTTP upstream is forwarded by the
// front too, from the head it read to the answer's bytes, where the
// answer is plain (frontpass.go). A request the flow goes on with
// otherwise (held in a queue, its leases kept, its header rewritten, its
// answer's body telling a cost, an upstream over TLS or a pool of them),
// or whose answer is not plain, is given fasthttp's request object then,
// parsed from the same head, and goes on exactly as on fasthttp: the edge
// engine's exchange forwards it, or reads its answer on, and its answer is
// written as fasthttp writes one. Any other request, and every request after it, is
// served by fasthttp: the front hands over the connection with what it
// read, unparsed. Between requests the connection waits as on fasthttp
// (its idle time, parking), and a parked connection comes back to the
// front. The front calls the connection's deadlines as fasthttp does, so
// that the engine's bounds (conn.go) hold alike.

// frontHeadBytes bounds the heads the front reads; a longer one goes to
// fasthttp, whose bound is MaxHeaderBytes.
const frontHeadBytes = 4 << 10

// front is a connection being served by the front: its read buffer, the
// answers not yet written, and what serves its requests.
type front struct {
	e   *Engine
	c   *conn
	buf []byte // read, from buf[0]; len is what was read
	out []byte // answers not yet written
	up  []byte // the head of the request going upstream (frontPass)
	x   frontExchange

	// For requests the flow goes on with: fasthttp's request context,
	// set up once a connection, the reader its head is parsed from, and
	// the writer of its answer.
	ctx   *fasthttp.RequestCtx
	hr    bytes.Reader
	br    *bufio.Reader
	bw    *bufio.Writer
	ready bool // ctx is set up for c
}

var fronts = sync.Pool{New: func() any {
	return &front{buf: make([]byte, 0, frontHeadBytes), out: make([]byte, 0, 1024)}
}}

// coarseNow is the time on the parker's clock while its sweeps run (at
// most a sweep behind; no clock read), else the clock's.
func (e *Engine) coarseNow() time.Time {
	if e.parker != nil {
		if m := e.parker.now.Load(); m != 0 {
			return monoBase.Add(time.Duration(m - 1))
		}
	}
	return time.Now()
}

// frontDate is the Date field line of the front's answers, made again
// when the second changes.
var frontDate atomic.Pointer[dateLineOf]

type dateLineOf struct {
	sec  int64
	line []byte
}

// dateLine returns the Date field line for now: on the parker's clock
// (at most a sweep behind, as fasthttp's Date is at most a second behind)
// while its sweeps run, which costs no clock read, else the clock's.
func (e *Engine) dateLine() []byte {
	now := e.coarseNow()
	sec := now.Unix()
	if d := frontDate.Load(); d != nil && d.sec == sec {
		return d.line
	}
	d := &dateLineOf{sec: sec, line: []byte("Date: " + now.UTC().Format(http.TimeFormat) + "\r\n")}
	frontDate.Store(d)
	return d.line
}

// enter hands c, a plain connection whose next request's first bytes may
// already be read (c.pre), to the front, or to fasthttp where the front
// is off.
func (e *Engine) enter(c *conn) {
	if e.noFront || c.tls {
		e.fast.push(c)
		return
	}
	if e.stopping.Load() {
		_ = c.Close() // as fasthttp, which takes no more connections then
		return
	}
	fr := fronts.Get().(*front)
	fr.e, fr.c = e, c
	fr.x.fr = fr
	fr.serve()
	*fr = front{buf: fr.buf[:0], out: fr.out[:0], up: fr.up[:0], br: fr.br, bw: fr.bw, ctx: fr.ctx}
	fronts.Put(fr)
}

// serve serves c's requests until it closes, is parked or goes to
// fasthttp.
func (fr *front) serve() {
	e, c := fr.e, fr.c
	// What was read ahead of the front comes first.
	if len(c.pre) > 0 {
		fr.buf = append(fr.buf[:0], c.pre...)
		c.pre = nil
	}
	c.dropHead()
	for n := 1; ; n++ {
		if n > 1 {
			// fasthttp's idle deadline: the next request may take that
			// long to begin, the connection parked meanwhile (counted on
			// the parker's clock, as dateLine's, at most a sweep early).
			_ = c.SetReadDeadline(e.coarseNow().Add(e.srv.IdleTimeout))
			if len(fr.buf) == 0 {
				// Waiting for a request: Shutdown closes it at once, as
				// fasthttp closes its idle connections.
				c.first.Store(true)
				if e.stopping.Load() {
					_ = c.Close()
					return
				}
			}
		}
		end, ok := fr.readHead(n > 1)
		if !ok {
			return
		}
		head := fr.buf[:end]
		req, plain := plainhead.Read(head, &fr.x.h)
		if !plain {
			fr.handOver()
			return
		}
		if status, _, _ := gateway.Preflight(http.MethodGet, b2s(req.Target), req.Host, true); status != 0 {
			fr.handOver() // answered as fasthttp answers it
			return
		}
		e.closing.Add(1) // Shutdown waits for the answer
		keep := fr.request(req, head)
		fr.buf = fr.buf[:copy(fr.buf, fr.buf[end:])]
		// Answers to pipelined requests go out together, up to
		// frontOutBytes of them (an upstream's answer may be long).
		if keep && (len(fr.out) >= frontOutBytes || !bytes.Contains(fr.buf, crlf2)) {
			keep = fr.flush()
		}
		e.closing.Add(-1)
		if !keep {
			_ = fr.flush()
			_ = c.Close()
			return
		}
	}
}

var crlf2 = []byte("\r\n\r\n")

// frontOutBytes bounds the answers the front holds before it writes them;
// past it, the room they took is not kept (flush).
const frontOutBytes = 16 << 10

// readHead reads until the buffer holds a whole head and returns its
// length, its last CRLF and the empty line included. false: the
// connection was closed, parked or handed over. A head as long as the
// front reads, or as MaxHeaderBytes when that is less, goes to fasthttp,
// which answers one over MaxHeaderBytes 431.
func (fr *front) readHead(next bool) (int, bool) {
	c := fr.c
	first := true
	limit := min(cap(fr.buf), fr.e.srv.ReadBufferSize)
	for {
		if i := bytes.Index(fr.buf, crlf2); i >= 0 {
			if i+4 >= limit {
				fr.handOver()
				return 0, false
			}
			if next && first {
				// As fasthttp, once the next request's first bytes are
				// in: its head is bounded from now (conn.headRead).
				_ = c.SetReadDeadline(time.Time{})
			}
			return i + 4, true
		}
		if len(fr.buf) >= limit {
			fr.handOver() // a head longer than the front reads
			return 0, false
		}
		k, err := c.Read(fr.buf[len(fr.buf):cap(fr.buf)])
		fr.buf = fr.buf[:len(fr.buf)+k]
		if err != nil {
			if len(fr.buf) == 0 || isTimeout(err) {
				// The client left, the idle time or the head's bound
				// ended (a client too slow gets no answer, as on
				// fasthttp), or the parker takes the connection (its
				// Close parks it).
				_ = c.Close()
				return 0, false
			}
			// A head cut short: fasthttp answers it as it does.
			fr.handOver()
			return 0, false
		}
		if k > 0 && next && first {
			first = false
			c.first.Store(false) // a request began: Shutdown lets it be answered
			_ = c.SetReadDeadline(time.Time{})
		}
	}
}

// handOver gives the connection to fasthttp with what the front read of
// it, unanswered: fasthttp takes it as a new connection, its head under
// the bound it is under now.
func (fr *front) handOver() {
	if !fr.flush() {
		_ = fr.c.Close()
		return
	}
	c := fr.c
	if len(fr.buf) > 0 {
		c.pre = append([]byte(nil), fr.buf...)
		fr.buf = fr.buf[:0]
	}
	fr.e.fast.push(c)
}

// flush writes the answers of the gateway's own not yet written; false
// when the client did not take them.
func (fr *front) flush() bool {
	if len(fr.out) == 0 {
		return true
	}
	if fr.e.write > 0 {
		_ = fr.c.SetWriteDeadline(time.Now().Add(fr.e.write))
	}
	fr.c.boundWrite()
	_, err := fr.c.Write(fr.out)
	fr.out = fr.out[:0]
	if cap(fr.out) > frontOutBytes {
		fr.out = make([]byte, 0, 1024) // a long answer's room is not kept
	}
	return err == nil
}

// request serves one plain request whose head is head; it reports
// whether the connection goes on.
func (fr *front) request(req plainhead.Request, head []byte) (keep bool) {
	e, c, x := fr.e, fr.c, &fr.x
	// As serve: a request without a body reads nothing more (no read
	// bound while it is served), and its write bound starts now.
	_ = c.SetReadDeadline(time.Time{})
	e.startWrite(c)
	g := e.g
	f := g.Begin()
	x.f, x.head, x.edge, x.target, x.close = f, head, nil, req.Target, req.Close
	x.fields, x.status, x.bytes = nil, 0, 0
	v := f.Request()
	v.Method = http.MethodGet
	v.Host = req.Host
	v.Path, v.RawPath = gateway.TargetPath(b2s(req.Target))
	v.Proto = "HTTP/1.1"
	v.Peer, v.PeerText = c.peer()
	v.WriteDeadline = c.wEnd
	v.Header = &x.h
	v.NoOverride = !req.Override
	later := fr.run(f)
	c.boundWrite()
	c.handled()
	ex := x.edge
	if ex == nil {
		// Answered by the gateway: the answer is in fr.out.
		g.Finish(x, f)
		if x.status == 0 {
			// No answer at all (never, as the flow answers or passes
			// every request): closed as fasthttp closes a request it
			// did not answer.
			return false
		}
		if req.Close || e.stopping.Load() {
			x.closeAnswer()
			return false
		}
		return true
	}
	// Gone on as on fasthttp: finished as the handler returns (step),
	// then its answer written as fasthttp writes one, after those of the
	// requests before it.
	ctx := ex.ctx
	left := !later && ex.left && ex.status == 0
	if left {
		e.left(ex) // closes the connection, unanswered
	}
	if !later {
		e.finish(ex)
	}
	if left {
		ctx.Response.Reset()
		ctx.Request.Reset()
		return false
	}
	keep = fr.flush()
	closeIt := req.Close || ctx.Response.Header.ConnectionClose() || e.stopping.Load()
	if closeIt {
		ctx.Response.Header.SetConnectionClose()
	}
	if keep {
		if e.write > 0 {
			_ = c.SetWriteDeadline(time.Now().Add(e.write))
		}
		if fr.bw == nil {
			fr.bw = bufio.NewWriterSize(c, 4<<10)
		} else {
			fr.bw.Reset(c)
		}
		err := ctx.Response.Write(fr.bw)
		if err == nil {
			err = fr.bw.Flush()
		}
		keep = err == nil
		fr.bw.Reset(nil)
	}
	// The response first: a streamed body not written is closed by its
	// reset, which finishes its request (its access record reads the
	// request's fields).
	ctx.Response.Reset()
	ctx.Request.Reset()
	return keep && !closeIt
}

// run runs f's flow; a panic is answered 500 as on fasthttp (step).
func (fr *front) run(f *gateway.Flow) (later bool) {
	x := &fr.x
	defer func() {
		if p := recover(); p != nil {
			fr.e.log.Error("gateway: edge: panic", "panic", p)
			ex := x.convert()
			ctx := ex.ctx
			ctx.Response.Reset()
			ctx.SetConnectionClose()
			plainError(ctx, http.StatusInternalServerError)
			later = false
		}
	}()
	return fr.e.g.Run(x, f)
}

// frontExchange is a request the front serves: what the gateway answers
// itself is written as bytes; anything further converts it to the edge
// engine's exchange (convert), which serves the rest.
type frontExchange struct {
	fr     *front
	h      plainhead.Header
	f      *gateway.Flow
	head   []byte
	target []byte // the request's, as sent
	close  bool   // the client asked to close after the answer
	fields []fields.Field
	status int
	bytes  int64
	edge   *exchange // once converted

	// The answer written as bytes: where it begins in fr.out and where
	// its head's last empty line is, and what it was, for a request
	// converted after it (convert).
	at, tail  int
	body      []byte
	challenge bool
}

// closeAnswer says Connection: close in the answer written as bytes, as
// fasthttp says it, after the other fields.
func (x *frontExchange) closeAnswer() {
	fr := x.fr
	rest := append([]byte("Connection: close\r\n"), fr.out[x.tail:]...)
	fr.out = append(fr.out[:x.tail], rest...)
}

// convert gives the request fasthttp's request object, parsed from its
// head, and the edge engine's exchange, which serves it from now on.
func (x *frontExchange) convert() *exchange {
	if x.edge != nil {
		return x.edge
	}
	fr := x.fr
	e := fr.e
	if fr.ctx == nil {
		fr.ctx = new(fasthttp.RequestCtx)
	}
	ctx := fr.ctx
	if !fr.ready {
		ctx.Init2(fr.c, edgeLogger{e}, true)
		fr.ready = true
	}
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Response.Header.SetNoDefaultContentType(true)
	fr.hr.Reset(x.head)
	if fr.br == nil {
		fr.br = bufio.NewReaderSize(&fr.hr, frontHeadBytes)
	} else {
		fr.br.Reset(&fr.hr)
	}
	if err := ctx.Request.Header.Read(fr.br); err != nil {
		// Never for a head the front reads (TestFrontReadsAsFasthttp):
		// answered as a head fasthttp cannot read.
		e.log.Error("gateway: edge: front: a plain head fasthttp cannot read", "err", err)
		plainError(ctx, http.StatusBadRequest)
	}
	fr.br.Reset(nil)
	ex := e.xs.Get().(*exchange)
	*ex = exchange{e: e, ctx: ctx, f: x.f, fields: x.fields}
	x.f.Request().Header = (*edgeHeader)(&ctx.Request.Header)
	x.edge = ex
	if x.status != 0 {
		// Answered already: that answer is fasthttp's to write now.
		fr.out = fr.out[:x.at]
		ex.Answer(x.status, x.body, x.challenge)
	}
	return ex
}

func (x *frontExchange) Context() context.Context { return context.Background() }

func (x *frontExchange) DelHeader(name string) { x.convert().DelHeader(name) }

func (x *frontExchange) SetHeader(name, value string) { x.convert().SetHeader(name, value) }

func (x *frontExchange) RequestBody(max int) []byte { return x.convert().RequestBody(max) }

func (x *frontExchange) SetFields(fs []fields.Field) {
	if x.edge != nil {
		x.edge.SetFields(fs)
		return
	}
	x.fields = fs
}

func (x *frontExchange) Proxies() bool { return true }

func (x *frontExchange) Answered() (int, int64) {
	if x.edge != nil {
		return x.edge.Answered()
	}
	return x.status, x.bytes
}

func (x *frontExchange) Pass(f *gateway.Flow, rec *gateway.Recorder) bool {
	if x.edge == nil && rec == nil {
		// Nothing waits for the answer's body to tell a cost: the front
		// forwards it where it can.
		if done, later := x.frontPass(f, x.close); done {
			return later
		}
	}
	return x.convert().Pass(f, rec)
}

func (x *frontExchange) Wait(ctx context.Context, f *gateway.Flow, delay time.Duration) bool {
	return x.convert().Wait(ctx, f, delay)
}

func (x *frontExchange) WatchClient() (<-chan struct{}, func()) { return x.convert().WatchClient() }

func (x *frontExchange) Keep(ctx context.Context, leases []limiter.Hit) func() {
	return x.convert().Keep(ctx, leases)
}

// Answer writes an answer of the gateway's own as fasthttp writes the edge
// engine's (exchange.Answer): the status line, Date, the type, the length,
// the fields, the challenge.
func (x *frontExchange) Answer(status int, body []byte, challenge bool) {
	if x.edge != nil {
		x.edge.Answer(status, body, challenge)
		return
	}
	ctype, asBytes := frontFields(x.fields)
	if !asBytes {
		// Fields fasthttp writes its own way (a second line of a name,
		// Set-Cookie, Connection, ...): fasthttp writes the answer.
		x.convert().Answer(status, body, challenge)
		return
	}
	fr := x.fr
	if x.status != 0 {
		fr.out = fr.out[:x.at] // answered again: the last answer stands
	}
	x.at, x.body, x.challenge = len(fr.out), body, challenge
	o := append(fr.out, "HTTP/1.1 "...)
	o = strconv.AppendInt(o, int64(status), 10)
	o = append(o, ' ')
	o = append(o, fasthttp.StatusMessage(status)...)
	o = append(o, "\r\n"...)
	o = append(o, fr.e.dateLine()...)
	o = append(o, "Content-Type: "...)
	o = append(o, ctype...)
	o = append(o, "\r\nContent-Length: "...)
	o = strconv.AppendInt(o, int64(len(body)), 10)
	o = append(o, "\r\n"...)
	for _, f := range x.fields {
		if len(f.Name) == len("Content-Type") && strings.EqualFold(f.Name, "Content-Type") {
			continue
		}
		o = append(o, fieldName(f.Name)...)
		o = append(o, ": "...)
		o = append(o, f.Value...)
		o = append(o, "\r\n"...)
	}
	if challenge {
		o = append(o, wwwAuthenticate...)
		o = append(o, ": "...)
		o = append(o, bearerChallengeBytes...)
		o = append(o, "\r\n"...)
	}
	x.tail = len(o)
	o = append(o, "\r\n"...)
	fr.out = append(o, body...)
	x.status, x.bytes = status, int64(len(body))
}

// frontFields returns the type of an answer of the gateway's own with the
// fields fs (application/json, or the last Content-Type among them, as
// fasthttp keeps it), and whether the front writes that answer as fasthttp
// would: not when a name comes twice (fasthttp keeps the last value where
// the first was) or is one fasthttp writes its own way.
func frontFields(fs []fields.Field) (ctype string, ok bool) {
	ctype = "application/json"
	for i, f := range fs {
		// Those names all begin with c, d, s or t.
		if c := f.Name[0] | 0x20; c == 'c' || c == 'd' || c == 's' || c == 't' {
			if strings.EqualFold(f.Name, "Content-Type") {
				ctype = f.Value
				continue
			}
			for _, special := range fasthttpWritesItsWay {
				if strings.EqualFold(f.Name, special) {
					return "", false
				}
			}
		}
		for _, g := range fs[:i] {
			if strings.EqualFold(g.Name, f.Name) {
				return "", false
			}
		}
	}
	return ctype, true
}

// fasthttpWritesItsWay are the fields of an answer that fasthttp does not
// write as a line of their own where they were set.
// They all begin with c, d, s or t.
var fasthttpWritesItsWay = []string{"Content-Length", "Content-Encoding", "Connection", "Server", "Set-Cookie",
	"Transfer-Encoding", "Trailer", "Date"}

var _ gateway.Exchange = (*frontExchange)(nil)
