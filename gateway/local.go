package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// Requests decided in process (Handle) go through the admission flow that
// the HTTP engines use: explain (a look that charges nothing), replay (a
// log's requests at the log's own times, on a store whose clock is the
// log's) and tests. They differ from an HTTP request only in how the
// request arrives (a Request, with its identity Known when a log gives it)
// and where the answer goes (a Handled): nothing waits in a queue and no
// lease is renewed, since their time is not the wall clock's.

// HandleOptions say how a request decided in process goes.
type HandleOptions struct {
	// Peek charges nothing: the limits are looked at as they are, as an
	// explanation does.
	Peek bool
	// Trace, when set, is filled with the policy's reasons, limit by limit
	// (for a gateway whose Matcher is a PolicyMatcher).
	Trace *policy.Explanation
	// Hold keeps a forwarded request that holds something (concurrency
	// leases, a reservation) in flight once it is decided, until
	// Handled.Done ends it with the upstream's status: a replay holds each
	// request until its logged end, whether or not its route names an
	// upstream (the log says what answered). Without Hold such a request
	// ends at once, as if the upstream had answered Status, and a request
	// whose route has no upstream is answered 404 as the reverse proxy
	// answers it.
	Hold bool
	// Status is the upstream's answer to a forwarded request that is not
	// held (default 200).
	Status int
	// Left, when positive, is how long after its arrival the client went
	// away unanswered (an access log's 499 and its duration): a request
	// that a leaky queue would hold longer than that left the queue before
	// its place came, and gives its place back, as the HTTP engines give it
	// back; it is not forwarded. A look (Peek) ignores it.
	Left time.Duration
	// Shed is why its route's overload control shed the request, as an
	// access log says (ShedFull, ShedClientGone ...), for a request decided
	// in process, which takes no place under the cap: once its limits let
	// it through, it is shed so, its reservation and its plain charges
	// given back, as the gateway gave them back. A look (Peek) ignores it.
	Shed string
}

// Handled is a request decided in process: the answer the gateway gave
// and the decisions behind it. It is valid until Done.
type Handled struct {
	// Status is the gateway's own answer (429, 403, 401, 400, 404 ...), or
	// 0 when the request went on to the upstream.
	Status int
	// Refused reports that the limits refused the request: Status is then
	// the refusal's (429, or the 503 of a refusal that says so), or 429
	// for a cost no limit could ever take (Err).
	Refused bool
	// Body is the body of the gateway's own answer.
	Body []byte
	// Fields are the response fields the answer carries (RateLimit ...).
	Fields []fields.Field
	// Forwarded reports that the request went on to the upstream, after
	// Delay in a leaky queue.
	Forwarded bool
	Delay     time.Duration
	// Match holds the request's route and limits, and Result their
	// decisions (Result.Binding indexes Match.Hits; no decision was asked
	// when Match.Hits is empty).
	Match  *Match
	Result *limiter.Result
	// Err is the engine's error when it could not decide (a cost over a
	// limit's capacity: the answer is 429).
	Err error
	// Held reports that the request is in flight until Done.
	Held bool

	g  *Gateway
	st *Flow
}

// Handle decides r in process, through the admission flow of every HTTP
// request, and returns the outcome; the caller ends it with Done. r is
// copied; its strings must stay valid until Done.
func (g *Gateway) Handle(ctx context.Context, r *Request, o HandleOptions) *Handled {
	st := g.get()
	x := &st.lx
	*x = localExchange{g: g, ctx: ctx, hold: o.Hold, upstream: o.Status, left: o.Left, shed: o.Shed}
	if x.upstream == 0 {
		x.upstream = 200
	}
	st.view = *r
	st.peek = o.Peek
	st.m.Trace = o.Trace
	later := g.handle(x, st)
	if !later {
		g.finish(x, st)
	}
	h := &st.handled
	*h = Handled{Status: x.code, Refused: st.refused || errors.Is(st.err, floodgate.ErrNeverFits), Body: x.body, Fields: x.fields, Forwarded: x.forwarded, Delay: x.delay,
		Match: &st.m, Result: &st.res, Err: st.err, Held: later, g: g, st: st}
	if len(st.m.Hits) == 0 {
		st.res.Decisions, st.res.Flags = st.res.Decisions[:0], st.res.Flags[:0]
		st.res.Allowed, st.res.Binding = true, -1
	}
	return h
}

// Renew extends the concurrency leases of a held request, as the gateway
// does every third of their lifetime while a request is in flight; a
// caller that keeps its own clock (a replay, whose requests are held for
// the durations a log gives) calls it as that clock goes on. A lease the
// store let expire is taken again when its limit has room.
func (h *Handled) Renew(ctx context.Context) error {
	if h.g == nil || !h.Held || len(h.st.leases) == 0 {
		return nil
	}
	if err := h.g.engine.Renew(ctx, h.st.leases); err != nil {
		return fmt.Errorf("gateway: renew: %w", err)
	}
	return nil
}

// Done ends the request: a held one settles its reservation with the
// upstream's status (0: no answer came, and the reservation is given back)
// and gives its concurrency leases back, at the store's clock now. The
// Handled is not used after Done.
func (h *Handled) Done(status int) {
	g, st := h.g, h.st
	if g == nil {
		return
	}
	h.g, h.st = nil, nil
	if h.Held {
		x := &st.lx
		if rec := x.rec; rec != nil {
			if status == 0 {
				rec.noAnswer = true
			} else {
				rec.header(status, noHeader{})
				rec.complete = true
			}
		}
		g.finish(x, st)
	}
	st.handled = Handled{}
	g.put(st)
}

// localExchange is the exchange of a request decided in process.
type localExchange struct {
	g         *Gateway
	ctx       context.Context
	hold      bool
	upstream  int // the upstream's answer to a request not held
	code      int // the gateway's own answer
	body      []byte
	fields    []fields.Field
	forwarded bool
	delay     time.Duration
	rec       *Recorder // a held request's reservation
	left      time.Duration
	shed      string // why the log shows it shed
}

func (x *localExchange) Context() context.Context { return x.ctx }

func (x *localExchange) DelHeader(string) {} // nothing is forwarded

func (x *localExchange) SetHeader(string, string) {}

func (x *localExchange) RequestBody(int) []byte { return nil } // estimates take their defaults

func (x *localExchange) SetFields(fs []fields.Field) { x.fields = fs }

func (x *localExchange) Answer(status int, body []byte, challenge bool) {
	x.code, x.body = status, body
	if challenge {
		x.fields = append(x.fields, fields.Field{Name: "WWW-Authenticate", Value: bearerChallenge[0]})
	}
}

func (x *localExchange) Pass(st *Flow, rec *Recorder) bool {
	if st.m.Upstream == nil && !x.hold {
		// As the reverse proxy: nowhere to send it. (A held request is
		// ended by its caller with the status its upstream gave.)
		if rec != nil {
			rec.noAnswer = true
		}
		x.Answer(404, bodyNotFound, false)
		return false
	}
	x.forwarded = true
	if x.hold && (rec != nil || len(st.leases) > 0) {
		x.rec = rec
		return true
	}
	if rec != nil {
		rec.header(x.upstream, noHeader{})
		rec.complete = true
	}
	return false
}

func (x *localExchange) Proxies() bool { return false }

func (x *localExchange) Answered() (int, int64) { return x.code, int64(len(x.body)) }

func (x *localExchange) Wait(ctx context.Context, st *Flow, delay time.Duration) bool {
	x.delay = delay // the request's time is not the wall clock's: it goes on at once
	if x.left > 0 && x.left < delay && !st.peek {
		// Its client left before its place came.
		x.g.leftLeakyQueue(ctx, st)
		return false
	}
	return true
}

func (x *localExchange) Keep(context.Context, []limiter.Hit) func() { return nil }

// noHeader is a response without header fields.
type noHeader struct{}

func (noHeader) Get(string) string { return "" }
