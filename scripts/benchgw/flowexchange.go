package main

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/plainhead"
	"github.com/floodgate/floodgate/limiter"
)

// dateLine is the Date field line of the answers, set once a second.
type dateLine struct{ p atomic.Pointer[[]byte] }

// newDateLine returns a Date line set now and again every second.
func newDateLine() *dateLine {
	d := &dateLine{}
	d.set(time.Now())
	go func() {
		for now := range time.Tick(time.Second) {
			d.set(now)
		}
	}()
	return d
}

func (d *dateLine) set(now time.Time) {
	b := []byte("Date: " + now.UTC().Format(http.TimeFormat) + "\r\n")
	d.p.Store(&b)
}

func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// serveHead runs one request's head (its empty last line included)
// through g's flow unchanged (Preflight, Begin, Run, Finish), as the edge
// engine's front does, with x as its exchange, and reports whether the
// connection goes on (false: it closes after what x wrote). A head that is
// not a plain request (package plainhead, as the front reads it) is not
// served.
func serveHead(g *gateway.Gateway, x *flowExchange, peer netip.Addr, peerText string, head []byte) bool {
	req, ok := plainhead.Read(head, &x.h)
	if !ok {
		return false
	}
	if status, _, _ := gateway.Preflight(http.MethodGet, b2s(req.Target), req.Host, true); status != 0 {
		return false
	}
	f := g.Begin()
	v := f.Request()
	v.Method = http.MethodGet
	v.Host = req.Host
	v.Path, v.RawPath = gateway.TargetPath(b2s(req.Target))
	v.Proto = "HTTP/1.1"
	v.Peer, v.PeerText = peer, peerText
	v.Header = &x.h
	v.NoOverride = !req.Override
	x.head = head
	x.fields, x.status, x.bytes, x.failed = nil, 0, 0, false
	if g.Run(x, f) {
		return false // an answer that goes on later: never, as none is streamed
	}
	g.Finish(x, f)
	return x.status != 0 && !x.failed && !req.Close
}

// flowExchange is a request the gateway's flow serves on a floor of
// benchgw (flowloop, flowconn): the gateway's own answers are appended to
// out as bytes, and a request the flow passes goes to pass (nil: it is
// answered 502 and its connection closes).
type flowExchange struct {
	date   *dateLine
	out    []byte
	h      plainhead.Header
	head   []byte // the request's head, as it came
	fields []fields.Field
	status int
	bytes  int64
	failed bool // the connection closes after this answer
	// pass forwards the request and appends the answer to out; false
	// when it could not.
	pass func(x *flowExchange, f *gateway.Flow) bool
}

func (x *flowExchange) Context() context.Context                                { return context.Background() }
func (x *flowExchange) DelHeader(string)                                        {}
func (x *flowExchange) SetHeader(string, string)                                {}
func (x *flowExchange) RequestBody(int) []byte                                  { return nil }
func (x *flowExchange) SetFields(fs []fields.Field)                             { x.fields = fs }
func (x *flowExchange) Proxies() bool                                           { return true }
func (x *flowExchange) Answered() (int, int64)                                  { return x.status, x.bytes }
func (x *flowExchange) Keep(context.Context, []limiter.Hit) func()              { return nil }
func (x *flowExchange) Wait(context.Context, *gateway.Flow, time.Duration) bool { return true }

// Answer appends the answer: status line, Date, type, the flow's fields,
// length, body.
func (x *flowExchange) Answer(status int, body []byte, challenge bool) {
	o := append(x.out, "HTTP/1.1 "...)
	o = strconv.AppendInt(o, int64(status), 10)
	o = append(o, ' ')
	o = append(o, http.StatusText(status)...)
	o = append(o, "\r\n"...)
	o = append(o, *x.date.p.Load()...)
	o = append(o, "Content-Type: application/json\r\n"...)
	o = x.appendFields(o)
	if challenge {
		o = append(o, "WWW-Authenticate: Bearer\r\n"...)
	}
	o = append(o, "Content-Length: "...)
	o = strconv.AppendInt(o, int64(len(body)), 10)
	o = append(append(o, "\r\n\r\n"...), body...)
	x.out = o
	x.status, x.bytes = status, int64(len(body))
}

// appendFields appends the flow's fields to o, a line each.
func (x *flowExchange) appendFields(o []byte) []byte {
	for _, f := range x.fields {
		o = append(append(append(append(o, f.Name...), ": "...), f.Value...), "\r\n"...)
	}
	return o
}

// Pass forwards the request through pass; without one, or when it fails,
// the answer is a 502 and the connection closes.
func (x *flowExchange) Pass(f *gateway.Flow, _ *gateway.Recorder) bool {
	if x.pass != nil && x.pass(x, f) {
		return false
	}
	x.Answer(http.StatusBadGateway, []byte(`{"message":"not passed by benchgw"}`+"\n"), false)
	x.failed = true
	return false
}
