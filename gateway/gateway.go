package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// Matcher finds the route and the limits of a request. The policy package
// provides one (PolicyMatcher); it must be safe for concurrent use. It
// reads the request through its engine-neutral view; r.HTTP is the
// *http.Request when net/http serves it.
type Matcher interface {
	// Match fills m (already reset) for r.
	Match(r *Request, m *Match) error
}

// BodyReader is a Matcher that tells whether a limit may read a request's
// body to estimate its cost. A request is decided before its body is read
// (Gateway.DecidesWithoutBody) only under a matcher that says none does.
type BodyReader interface {
	ReadsBodies() bool
}

// MatcherFunc is a Matcher written as a function.
type MatcherFunc func(r *Request, m *Match) error

// Match calls f.
func (f MatcherFunc) Match(r *Request, m *Match) error { return f(r, m) }

// UserMatcher is a Matcher that can put off verifying a request's user:
// its Match leaves out the limits that count per user and sets
// Match.UserPending when the request presents a token it has not verified
// yet. The gateway then checks the other limits first and calls MatchUser,
// which verifies the token and fills m again, user limits included; a
// token that does not verify either makes the request anonymous or sets
// Match.Reject to 401, as the matcher's policy says.
type UserMatcher interface {
	MatchUser(r *Request, m *Match) error
}

// Match is what a Matcher found for one request. The gateway owns it and
// reuses it for later requests; a Matcher appends to its slices.
type Match struct {
	// Reject, when not 0, is the answer the request gets once the limits
	// that apply to it have been charged: 403 for a missing or unknown API
	// key on a route that requires one, 401 for a token that does not
	// verify. Hits then holds the limits that apply without the missing
	// identity (per address, global), so that guessing keys or tokens is
	// throttled like anything else.
	Reject int
	// Route names the request's route ("" when none matched).
	Route string
	// Upstream is the route's upstream for the reverse proxy (nil in
	// middleware use, or when no route matched).
	Upstream *url.URL
	// Overload is the route's overload control (nil for none): the
	// request needs a place under its cap before it is passed on.
	Overload *policy.Overload
	// PlanTier is the criticality tier of the API key's plan on a route
	// the plan covers, or "".
	PlanTier string
	// Hits are the limits that apply with their keys, most specific first.
	Hits []limiter.Hit
	// Fields is parallel to Hits: each limit's response fields, computed
	// once per limit (policy.Limit.Fields). A missing entry is computed
	// once per rule and kept in a small table of the Gateway's.
	Fields []*fields.Limit
	// CountOn is parallel to Hits: a non-empty list of statuses makes the
	// hit's limit count only answers with one of them (its cost is
	// reserved before forwarding and kept only for those statuses). Nil or
	// shorter than Hits means every hit is charged before forwarding.
	CountOn [][]int
	// Costs is parallel to Hits: where the request tells a hit's cost (an
	// estimate) and where the response tells its real cost, which makes
	// the hit a reservation settled after the response (see cost.go). Nil
	// or shorter than Hits means fixed costs.
	Costs []*policy.Cost
	// Options, when set, replaces the gateway's field switches for this
	// request (they follow a reloaded policy file).
	Options *fields.Options
	// UserPending is set by a UserMatcher that left out the limits that
	// count per user (see UserMatcher).
	UserPending bool
	// TokenPending is set by a UserMatcher when the request presents a
	// token it has not verified, whether or not a limit needs its user:
	// a gatekeeper that screens users (UserScreener) needs it verified.
	TokenPending bool
	// ClientIP, KeyID and User are who sent the request, for the access
	// log: the address as resolved, the API key as policy.Match.KeyID
	// gives it (a name, never the key) and the user.
	ClientIP netip.Addr
	KeyID    string
	User     string

	// What a PolicyMatcher tells besides, for explanations and replays:
	// the client's counter key, the API key's plan, the stage, why a
	// presented token gave no user (identity.Reason), and the policy's
	// limits, parallel to Hits.
	ClientKey string
	Plan      string
	Stage     string
	UserError string
	Limits    []*policy.Limit
	// Trace, when set before matching, asks a PolicyMatcher to explain
	// the match into it: limit by limit, whether it applies and why.
	Trace *policy.Explanation
	// PeerTrusted reports that the peer is a trusted proxy: the reverse
	// proxy then keeps the X-Forwarded-For chain and X-Real-IP it sent
	// (adding the peer to the chain); from any other peer the chain is the
	// peer alone and X-Real-IP is removed.
	PeerTrusted bool
	// UntrustedUser, when set, is the user header (canonical) a request
	// whose peer is not a trusted proxy carries a copy of that the gateway
	// did not believe: it is removed before the request is passed on, so
	// that the upstream is never told a user the client chose while the
	// gateway charged another (or none).
	UntrustedUser string
	// Refusal, when set, is how the request's 429 looks when its binding
	// limit has none of its own (the route's or the server's refusal).
	Refusal *policy.Refusal
	// Forward, when set, says what the upstream is told of the request:
	// identity headers, removed credentials (upstreamid.go).
	Forward *policy.Forward
	// RefusedBy is set by the gateway when it refuses the request on a
	// limit: the identities the refusing (binding) limit's key holds
	// (policy.Limit.Identities; none when Limits has no entry for it). A
	// Gatekeeper counts the refusal as an offence of these identities
	// alone, so that a limit many clients share (global, per route, per
	// plan) bans none of them.
	RefusedBy policy.Identities

	// policy is a PolicyMatcher's match of the policy, kept with the
	// Match (and its storage) from one request to the next; the policy
	// empties it before it matches.
	policy policy.Match
}

// Reset empties m, keeping its storage.
func (m *Match) Reset() {
	clear(m.Hits)
	clear(m.Fields)
	clear(m.CountOn)
	clear(m.Costs)
	clear(m.Limits)
	*m = Match{Hits: m.Hits[:0], Fields: m.Fields[:0], CountOn: m.CountOn[:0], Costs: m.Costs[:0], Limits: m.Limits[:0],
		policy: m.policy}
}

// countOn returns the statuses of hit i (nil: charge before forwarding).
func (m *Match) countOn(i int) []int {
	if i < len(m.CountOn) {
		return m.CountOn[i]
	}
	return nil
}

// Observer receives the events only the gateway sees, for metrics; the
// engine counts the decisions themselves. Methods are called on the
// request path: they must be fast and safe for concurrent use.
// *metrics.Metrics is one.
type Observer interface {
	// Rejected reports an answer of the gateway itself: 429 with the
	// binding limit, 401 or 403 (limit "").
	Rejected(front limiter.FrontEnd, limit string, status int)
	// Queued reports a request starting (+1) or ending (-1) its wait in a
	// leaky queue.
	Queued(limit string, delta int)
	// Upstream reports the status of an upstream response (0 when the
	// upstream could not be reached).
	Upstream(route string, status int)
}

// RefusalObserver is told every answer the gateway gives a request before
// any limit refused it, with the request's route ("" when none matched):
// 401 for a token that does not verify, 403 for a missing or unknown API
// key or a denied address, and the penalty box's 429. Looks (explain) are
// not told. Its method is called on the request path: it must be fast and
// safe for concurrent use. The dashboard's recorder is one.
type RefusalObserver interface {
	RefusedBeforeLimit(route string, status int)
}

// Options configure a Gateway. Matcher and Engine are required.
type Options struct {
	// Matcher finds the limits of requests.
	Matcher Matcher
	// Engine checks and charges them (a *limiter.Limiter).
	Engine limiter.Engine
	// Fields switches the optional response fields; a Match's Options
	// replace them for its request.
	Fields fields.Options
	// Observer receives metrics events (default: none).
	Observer Observer
	// Logger receives errors of the engine and the upstream (default:
	// discard).
	Logger *slog.Logger
	// ReleaseTimeout bounds giving back concurrency leases, refunds and
	// charges after the request (default 2s).
	ReleaseTimeout time.Duration
	// Upstream tunes the upstream connections of both engines: the
	// net/http engine's default Transport is NewTransport(Upstream), and
	// the edge engine's connection pools follow it too.
	Upstream TransportOptions
	// Transport carries the net/http engine's upstream requests (default:
	// NewTransport(Upstream)).
	Transport http.RoundTripper
	// MethodOverride says what to do with method override headers
	// (default: strip them).
	MethodOverride MethodOverride
	// AccessLog, when set, is given one record per request (an
	// *accesslog.Logger).
	AccessLog AccessLogger
	// Gatekeeper, when set, screens every matched request before its
	// limits (deny lists, the penalty box) and is told how it ended.
	Gatekeeper Gatekeeper
	// Refusals, when set, is told the answers refused before any limit.
	Refusals RefusalObserver
	// SocketWatches bounds the net/http engine's socket watches at once
	// (ConnContext): each holds a duplicate of its connection's
	// descriptor while a request waits or an answer streams. Past it a
	// request is watched through its context alone, so that a flood of
	// streams cannot take the descriptors upstream connections need.
	// Default DefaultSocketWatches.
	SocketWatches int
	// SendTimeout bounds, on both engines (the edge engine's writes wait
	// from about half of it to it), how long one write of an answer may
	// wait for its client to take it: an HTTP/2 client that
	// grants no flow-control window, or an HTTP/1 client that reads
	// nothing while its socket's buffers are full. Past it the client is
	// taken to have left (its stream is reset, or its connection closed)
	// and its request ends as for a client that leaves: leases come back,
	// and a reservation is settled from the rest of the answer, read
	// within the drain bounds. A client that takes its answer slowly, but
	// takes some of it within each bound, is not cut. It bounds each
	// write, not the whole answer (that is http.Server's WriteTimeout),
	// and no time the upstream keeps silent. Default
	// floodgate.DefaultSendTimeout; negative: none. An HTTP/2 stream's
	// reset is written on its connection: serving HTTP/2 from an
	// http.Server of your own, set its HTTP2.WriteByteTimeout to the same
	// bound, or a client that stops reading its socket holds its requests
	// until it closes (floodgate serve does).
	SendTimeout time.Duration
	// Now is the clock of overload control (default time.Now): the
	// instants its adaptive limits learn latencies from, and how long a
	// request waited in a route's queue, which the RateLimit fields of
	// its answer count from once it is admitted. A clock of your own
	// belongs with the store's (memstore.Options.Now), for tests that move
	// time by hand; the waits themselves (max_wait) follow the runtime's
	// timers.
	Now func() time.Time
}

// DefaultSocketWatches is Options.SocketWatches' default.
const DefaultSocketWatches = 1024

// Gateway enforces a policy on HTTP requests, as middleware or as a
// reverse proxy. It is safe for concurrent use.
type Gateway struct {
	matcher  Matcher
	user     UserMatcher // matcher, when it can put off users
	engine   limiter.Engine
	fields   fields.Options
	renderer fields.Renderer
	obs      Observer
	log      *slog.Logger
	relTO    time.Duration
	drain    drainBounds
	tr       http.RoundTripper
	override MethodOverride
	alog     AccessLogger
	keeper   Gatekeeper
	lat      LatencyObserver // obs, when it takes latencies
	refusals RefusalObserver

	upstream  TransportOptions
	connWait  time.Duration               // the bound of a wait for an upstream connection (connWaitTransport)
	proxies   sync.Map                    // *url.URL → *upstreamProxies
	upstreams atomic.Pointer[upstreamSet] // the routes' pools (pool.go)
	forgetters
	pool    sync.Pool
	rfields *fieldCache // for Matches without Fields
	ovl     overloadSet
	oobs    OverloadObserver // obs, when it is one

	socketWatches    atomic.Int64 // the net/http engine's socket watches now
	maxSocketWatches int64
	streamWatchAfter time.Duration    // see watchStream
	send             time.Duration    // Options.SendTimeout (0: none)
	now              func() time.Time // Options.Now

	// waitHook, when set (by the tests, before the Gateway serves), is
	// called with the channel that tells its client left once a request
	// has taken its place in an overload queue, before it waits there.
	waitHook func(gone <-chan struct{})
	// leakyWaitHook, when set (by the tests, before the Gateway serves),
	// is called with the channel that tells its client left once a
	// request's wait in a leaky queue has begun, before it waits.
	leakyWaitHook func(gone <-chan struct{})
}

// New returns a Gateway.
func New(opts Options) (*Gateway, error) {
	if opts.Matcher == nil {
		return nil, errors.New("gateway: a Matcher is required")
	}
	if opts.Engine == nil {
		return nil, errors.New("gateway: an Engine is required")
	}
	g := &Gateway{
		matcher:  opts.Matcher,
		engine:   opts.Engine,
		fields:   opts.Fields,
		obs:      opts.Observer,
		log:      opts.Logger,
		relTO:    opts.ReleaseTimeout,
		tr:       opts.Transport,
		override: opts.MethodOverride,
		alog:     opts.AccessLog,
		keeper:   opts.Gatekeeper,
		refusals: opts.Refusals,
		upstream: opts.Upstream,
		rfields:  newFieldCache(),

		maxSocketWatches: int64(opts.SocketWatches),
		streamWatchAfter: streamWatchAfter,
		now:              opts.Now,
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.maxSocketWatches <= 0 {
		g.maxSocketWatches = DefaultSocketWatches
	}
	switch g.send = opts.SendTimeout; {
	case g.send == 0:
		g.send = floodgate.DefaultSendTimeout
	case g.send < 0:
		g.send = 0
	}
	g.user, _ = opts.Matcher.(UserMatcher)
	g.oobs, _ = opts.Observer.(OverloadObserver)
	if w, ok := opts.Observer.(OverloadWatcher); ok {
		w.WatchOverload(func(each func(route string, limit, inflight, queued int, latency, noLoad time.Duration)) {
			g.OverloadStats(func(s OverloadStat) { each(s.Route, s.Limit, s.Inflight, s.Queued, s.Latency, s.NoLoad) })
		})
	}
	if g.obs == nil {
		g.obs = nopObserver{}
	}
	g.lat, _ = g.obs.(LatencyObserver)
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.relTO <= 0 {
		g.relTO = 2 * time.Second
	}
	if g.tr == nil {
		g.tr = NewTransport(opts.Upstream)
		if opts.Upstream.MaxConnsPerHost > 0 {
			// Past the cap a request waits for a connection as long as
			// it would wait for an answer, as on the edge engine.
			g.connWait = opts.Upstream.ResponseHeaderTimeout
			if g.connWait <= 0 {
				g.connWait = floodgate.DefaultUpstreamTimeout
			}
		}
	}
	g.drain = drainBounds{wait: opts.Upstream.DrainTimeout, bytes: opts.Upstream.DrainBytes}
	if g.drain.wait <= 0 {
		g.drain.wait = floodgate.DefaultDrainTimeout
	}
	if g.drain.bytes <= 0 {
		g.drain.bytes = floodgate.DefaultDrainBytes
	}
	g.pool.New = func() any { return new(Flow) }
	return g, nil
}

// Exchange is one request as an HTTP engine hands it to the admission flow,
// and the way to answer it. The flow reads the request through its
// Flow's Request and never sees the engine; each engine implements these
// methods: net/http's here, the edge engine's in package gateway/edge,
// requests decided in process in local.go.
type Exchange interface {
	// Context ends when the request does: when the client goes away, as
	// far as the engine can tell.
	Context() context.Context
	// DelHeader removes a request header field before the request is
	// matched and forwarded.
	DelHeader(name string)
	// SetHeader sets a request header field (its name canonical) before
	// the request is passed on, replacing any value it had.
	SetHeader(name, value string)
	// RequestBody returns the request body when it is at most max bytes,
	// and puts what it read back for the upstream; nil for no body, or one
	// too large or that could not be read.
	RequestBody(max int) []byte
	// SetFields adds fields to the coming answer, whoever writes it.
	SetFields(fs []fields.Field)
	// Answer writes an answer of the gateway's own, with a JSON body;
	// challenge adds the bearer challenge of a 401.
	Answer(status int, body []byte, challenge bool)
	// Pass hands the request on: to the next handler (middleware) or to
	// its route's upstream. rec, when not nil, is told the response as it
	// passes (the actual costs of a reservation) and how it ended: no
	// answer from the upstream, or its answer read to the end. The
	// upstream's answer is read to its end even when the client leaves
	// first, within TransportOptions.DrainTimeout and DrainBytes, so that
	// the cost it tells is known. later reports that the response goes on
	// after Pass returns (a streamed body): the engine then calls
	// Gateway.Finish when it ends.
	Pass(f *Flow, rec *Recorder) (later bool)
	// Proxies reports whether Pass forwards to an upstream (not to a next
	// handler).
	Proxies() bool
	// Wait holds the request for its place in a leaky queue, delay long
	// (Gateway.WaitInQueue); it returns false when the client went away
	// first (the charge is then given back). Requests decided in process
	// do not wait.
	Wait(ctx context.Context, f *Flow, delay time.Duration) bool
	// Keep keeps the concurrency leases of a request in flight alive
	// (Gateway.Renew) and returns the function that stops it, or nil.
	Keep(ctx context.Context, leases []limiter.Hit) (stop func())
	// Answered returns the status and the body bytes of the answer so far
	// (0 before one is written), for the access log.
	Answered() (status int, bytes int64)
}

// Middleware returns next wrapped by the gateway: requests over a limit are
// answered by the gateway, the others reach next (after their wait, for a
// leaky queue) with the RateLimit fields already set on the response.
func (g *Gateway) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.serveHTTP(w, r, next)
	})
}

// ServeHTTP is the reverse proxy: it enforces the policy and forwards each
// request to its route's upstream (404 when no route matched).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.serveHTTP(w, r, nil)
}

// Flow is the per-request scratch space, pooled.
type Flow struct {
	view     Request
	m        Match
	req      limiter.Request
	res      limiter.Result
	items    []fields.Item
	out      []fields.Field
	actual   []int64
	leases   []limiter.Hit
	settled  limiter.Result
	look     limiter.Result // a shed request's limits looked at after its wait
	rec      Recorder
	peek     bool   // the request is only looked at: nothing is charged
	err      error  // the engine's, when it could not decide
	reserved bool   // rec holds a reservation to settle in finish
	stop     func() // stops the renewal of the leases
	body     []byte // the request body read for estimates
	bodyRead bool
	access   accessState
	nh       httpExchange  // the net/http engine's exchange
	lx       localExchange // a request decided in process
	handled  Handled
	ovl      overloadSlot   // its place under its route's overload control
	ow       overloadWriter // the net/http engine's writer under overload control
	screened bool           // the gatekeeper answered the request
	refused  bool           // the request was refused on a limit
	lat      bool           // timing is kept for a LatencyObserver
	timing   timing
	// refundDone reports that refund gave its charges back (or tried): a
	// second refund would take other requests' charges from a window.
	refundDone bool
}

// get returns an empty Flow (put empties one before pooling it).
func (g *Gateway) get() *Flow {
	return g.pool.Get().(*Flow)
}

func (g *Gateway) put(st *Flow) {
	st.m.Reset()
	clear(st.items)
	clear(st.leases)
	st.items, st.leases = st.items[:0], st.leases[:0]
	clear(st.out)
	st.out = st.out[:0] // a request whose limits were not rendered (none, or an error) starts with no fields
	st.req = limiter.Request{}
	st.rec.release()
	st.reserved, st.stop, st.peek, st.err = false, nil, false, nil
	st.screened, st.refused, st.refundDone = false, false, false
	st.body, st.bodyRead = nil, false
	st.lat, st.timing = false, timing{}
	st.view = Request{}
	st.nh = httpExchange{}
	st.lx = localExchange{}
	st.ovl, st.ow = overloadSlot{}, overloadWriter{}
	g.pool.Put(st)
}

// options returns the field switches of a request.
func (g *Gateway) options(m *Match) *fields.Options {
	if m.Options != nil {
		return m.Options
	}
	return &g.fields
}

// decide asks the engine about st.m's hits, with the costs the request
// tells (see estimate); peek charges nothing.
func (g *Gateway) decide(ctx context.Context, x Exchange, st *Flow, peek bool) error {
	st.req = limiter.Request{Front: limiter.FrontGateway, Peek: peek, Hits: st.m.Hits}
	g.estimate(x, st)
	return g.engine.Decide(ctx, &st.req, &st.res)
}

// handle is the admission flow, the one request path that every way of
// deciding a request shares: both HTTP engines, and the requests decided
// in process (explain, replay; Gateway.Handle). It turns the request
// (st.view) into hits (the matcher), asks the engine, and turns the
// engine's Result into the answer: one of the gateway's own, or the
// request passed on. It returns true when the answer goes on after it
// returns (a streamed response, a request held in flight), and the caller
// calls finish at its end; otherwise the caller calls finish once handle
// returns (or panics). With st.peek, nothing is charged: no leases, no
// reservations, no queue.
func (g *Gateway) handle(x Exchange, st *Flow) (later bool) {
	r, m := &st.view, &st.m
	if g.alog != nil {
		st.access.start = time.Now()
	}
	g.startTiming(st)
	ctx := x.Context()
	if why := badTarget(r.Path); why != "" {
		g.badRequest(x, st, why)
		return false
	}
	if why := g.methodOverride(x, r); why != "" {
		g.badRequest(x, st, why)
		return false
	}
	if err := g.matcher.Match(r, m); err != nil {
		g.matchFailed(x, st, err)
		return false
	}
	if g.keeper != nil && g.screen(x, st) {
		return false
	}
	if g.user != nil && (m.UserPending || m.TokenPending && (g.keeper != nil && g.screensUsers() || m.Overload.NeedsUser())) {
		// perUser: a limit of the request counts per user. Otherwise the
		// token is verified only for the gatekeeper or for the route's
		// overload control, whose tenants are users, and one that does not
		// verify leaves the request without a user, as before.
		perUser := m.UserPending
		// The limits that need no user come first: a request over them is
		// refused before its token costs any CPU.
		if len(m.Hits) > 0 {
			if err := g.decide(ctx, x, st, true); err != nil {
				return g.failed(err, x, st)
			}
			if !st.res.Allowed {
				g.deny(x, st)
				return false
			}
		}
		trace := m.Trace
		m.Reset()
		m.Trace = trace
		if err := g.user.MatchUser(r, m); err != nil {
			g.matchFailed(x, st, err)
			return false
		}
		if !perUser && m.Reject == http.StatusUnauthorized {
			m.Reject = 0
		}
		if g.keeper != nil && g.screen(x, st) { // the user's ban
			return false
		}
	}
	if len(m.Hits) == 0 {
		if m.Reject != 0 {
			g.reject(x, st)
			return false
		}
		return g.pass(x, st, nil, false)
	}
	if err := g.decide(ctx, x, st, st.peek); err != nil {
		return g.failed(err, x, st)
	}
	res := &st.res
	if !res.Allowed {
		g.deny(x, st)
		return false
	}

	// Allowed: the concurrency leases are given back whatever happens next
	// (finish), and renewed while the request is in flight.
	reserved := !st.peek && st.req.HasReserved()
	if !st.peek {
		for i := range m.Hits {
			h := m.Hits[i]
			switch {
			case h.Lease == 0:
			case !h.Reserve:
				st.leases = append(st.leases, h)
			case h.Rule.Algorithm().Kind() == floodgate.KindConcurrency:
				// A slot counted by outcome (count_on, actual) is held
				// under its reservation's ID: it is renewed as any
				// lease while the request runs (else it would expire
				// at lease_ttl and let another request in), and given
				// back by the settle; the release after it changes
				// nothing, or frees what a renewal racing the settle
				// took again.
				h.Reserve = false
				st.leases = append(st.leases, h)
			}
		}
		if len(st.leases) > 0 {
			st.stop = x.Keep(ctx, st.leases)
		}
	}
	if m.Reject != 0 {
		g.reject(x, st)
		if reserved {
			g.settle(ctx, st, m.Reject, nil)
		}
		return false
	}
	if res.Delay > 0 {
		if over := pastWriteDeadline(st, res.Delay); over >= 0 {
			// Its place in the queue comes when its answer can no
			// longer be written: refused now, as by a full queue.
			g.refuseQueued(x, st, reserved, over)
			return false
		}
		if !x.Wait(ctx, st, res.Delay) {
			if reserved {
				g.cancelReservation(ctx, st) // the client went away while queued
			}
			return false
		}
	}
	st.out = g.render(st, false)
	x.SetFields(st.out)
	if !reserved {
		return g.pass(x, st, nil, true)
	}
	// The reservation is settled whatever happens next (finish).
	rec := st.Recorder()
	rec.g, rec.ctx = g, ctx // the hits the status decides are settled by it
	st.reserved = true
	if x.Proxies() && len(rec.bodyHits) > 0 {
		// Ask the upstream for a body that is not compressed, so that the
		// actual cost can be read.
		x.DelHeader("Accept-Encoding")
	}
	return g.pass(x, st, rec, true)
}

// finish ends a request once its answer is written (or its handler
// panicked): the reservation is settled, the renewal of its leases stops
// and they are given back, and the access log gets its record.
func (g *Gateway) finish(x Exchange, st *Flow) {
	ctx := x.Context()
	if st.ovl.held {
		g.releaseOverload(x, st)
	}
	if st.reserved {
		st.reserved = false
		g.settle(ctx, st, 0, &st.rec)
	}
	if st.stop != nil {
		st.stop()
		st.stop = nil
	}
	if len(st.leases) > 0 {
		g.release(ctx, st.leases)
	}
	if g.keeper != nil && !st.peek && !st.screened {
		g.outcome(x, st)
	}
	if g.alog != nil && !st.peek {
		g.logAccess(x, st) // a look (explain) is not a request served
	}
	g.observeLatency(st)
}

// render returns the response fields of st's verdict.
func (g *Gateway) render(st *Flow, denied bool) []fields.Field {
	m := &st.m
	for i := range m.Hits {
		if i >= len(m.Fields) {
			m.Fields = append(m.Fields, nil)
		}
		if m.Fields[i] == nil {
			m.Fields[i] = g.rfields.get(m.Hits[i].Rule)
		}
	}
	var binding int
	st.items, binding = fields.AppendResult(st.items[:0], &st.res, m.Fields)
	return g.renderer.Render(st.out[:0], st.items, binding, denied, st.res.RetryAfter, g.options(m))
}

// deny answers 429 from st's verdict, or as the refusal of the binding
// limit (or of the route) says.
func (g *Gateway) deny(x Exchange, st *Flow) {
	res := &st.res
	st.out = g.render(st, true)
	rule := st.m.Hits[res.Binding].Rule
	status, body := http.StatusTooManyRequests, bodyTooMany
	if rule.Algorithm().Kind() == floodgate.KindQuota {
		body = bodyExceeded
	}
	if rf := refusalOf(&st.m, res.Binding); rf != nil {
		status = rf.Status
		if rf.Body != nil {
			body = rf.Body
		}
		st.out = append(st.out, rf.Fields...)
	}
	x.SetFields(st.out)
	st.refused = true
	// A refusal by a failure policy (the store did not answer) is ours,
	// not the client's: it is no offence.
	if i := res.Binding; i < len(st.m.Limits) && st.m.Limits[i] != nil &&
		(i >= len(res.Flags) || res.Flags[i]&limiter.Degraded == 0) {
		st.m.RefusedBy = st.m.Limits[i].Identities
	}
	g.rejected(st, rule.Name(), status)
	if g.log.Enabled(x.Context(), slog.LevelDebug) {
		g.log.Debug("gateway: refused", "status", status, "limit", rule.Name(), "route", st.m.Route, "path", strings.Clone(st.view.Path), "retry_after", res.RetryAfter)
	}
	x.Answer(status, body, false)
}

// badRequest answers 400 with the reason.
// BadRequestError is a Matcher's error for a request it refuses to match
// (400, with Why as the reason) rather than one it failed on.
type BadRequestError struct{ Why string }

func (e *BadRequestError) Error() string { return "gateway: bad request: " + e.Why }

// matchFailed answers a request its matcher returned err for: 400 for a
// BadRequestError, else 500.
func (g *Gateway) matchFailed(x Exchange, st *Flow, err error) {
	if br, ok := errors.AsType[*BadRequestError](err); ok {
		g.badRequest(x, st, br.Why)
		return
	}
	g.log.Error("gateway: match", "err", err, "path", st.view.Path)
	x.Answer(http.StatusInternalServerError, bodyInternal, false)
}

func (g *Gateway) badRequest(x Exchange, st *Flow, why string) {
	g.rejected(st, "", http.StatusBadRequest)
	if g.log.Enabled(x.Context(), slog.LevelDebug) {
		g.log.Debug("gateway: 400", "reason", why, "path", strings.Clone(st.view.Path))
	}
	x.Answer(http.StatusBadRequest, badRequestBody(why), false)
}

// badRequestBodies are the 400 bodies, one per reason (the reasons are
// constants, so there are few).
var badRequestBodies sync.Map // string → []byte

// badRequestBody returns the 400 body of a reason.
func badRequestBody(why string) []byte {
	if b, ok := badRequestBodies.Load(why); ok {
		return b.([]byte)
	}
	body, _ := json.Marshal(struct {
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}{"Bad Request", why})
	body = append(body, '\n')
	badRequestBodies.Store(why, body)
	return body
}

// reject answers the Match's Reject status.
func (g *Gateway) reject(x Exchange, st *Flow) {
	status := st.m.Reject
	g.rejected(st, "", status)
	g.refusedBeforeLimit(st, status)
	if g.log.Enabled(x.Context(), slog.LevelDebug) {
		g.log.Debug("gateway: rejected", "status", status, "route", st.m.Route, "path", strings.Clone(st.view.Path))
	}
	switch status {
	case http.StatusForbidden:
		x.Answer(status, bodyForbidden, false)
	case http.StatusUnauthorized:
		x.Answer(status, bodyUnauthorized, true)
	default:
		x.Answer(status, bodyInternal, false)
	}
}

// rejected counts an answer the gateway gave itself (limit names the
// binding limit of a 429). A look (explain) is no answer served: it is
// not counted.
func (g *Gateway) rejected(st *Flow, limit string, status int) {
	if !st.peek {
		g.obs.Rejected(limiter.FrontGateway, limit, status)
	}
}

// refusedBeforeLimit tells the RefusalObserver of an answer refused
// before any limit.
func (g *Gateway) refusedBeforeLimit(st *Flow, status int) {
	if g.refusals != nil && !st.peek {
		g.refusals.RefusedBeforeLimit(st.m.Route, status)
	}
}

// wait holds a request for its place in a leaky queue, for the HTTP
// engines: gone, from the engine's watch, is closed when the client leaves
// first (stop ends the watch). It returns false then, and the charge is
// refunded where the engine can. A client seen gone when the delay ends
// left, whichever the wait saw first: its request is not forwarded. A
// request whose place came goes on with its decisions made delay ago
// moved on to now (aged), so that the RateLimit fields of its answer
// count from its departure, as they would from an arrival then: the
// leaky queue it left has drained to it, and every reset is delay nearer.
func (g *Gateway) wait(ctx context.Context, st *Flow, delay time.Duration, watch func() (gone <-chan struct{}, stop func())) bool {
	name := ""
	for i := range st.m.Hits {
		if st.res.Decisions[i].Delay > 0 && st.res.Flags[i]&limiter.Shadow == 0 {
			name = st.m.Hits[i].Rule.Name()
			break
		}
	}
	g.obs.Queued(name, 1)
	defer g.obs.Queued(name, -1)
	t := time.NewTimer(delay)
	gone, stop := watch()
	if g.leakyWaitHook != nil {
		g.leakyWaitHook(gone)
	}
	select {
	case <-t.C:
		if !closed(gone) {
			stop()
			g.aged(ctx, st, delay)
			return true
		}
		// Its client left as its slot came: it left.
		stop()
	case <-gone:
		t.Stop()
		stop()
	}
	g.leftLeakyQueue(ctx, st)
	return false
}

// leftLeakyQueue gives back the place in a leaky queue of a request whose
// client went away before its place came.
func (g *Gateway) leftLeakyQueue(ctx context.Context, st *Flow) {
	g.refund(ctx, st, "gateway: refund of a queued request")
}

// refund gives back what st's hits were charged, other than a
// reservation's, for a request that will not go ahead after all (its
// client left while it waited, or its wait would outlast its write
// deadline, or overload control shed it): the rate algorithms' charges,
// and those of windows, sliding logs and quotas from the window, entry or
// period that counted them unless it has passed since (a concurrency
// lease is released when the request ends). what says which in the log line of a refund that fails, whose
// error it returns.
func (g *Gateway) refund(ctx context.Context, st *Flow, what string) error {
	if st.refundDone {
		return nil
	}
	st.refundDone = true
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.relTO)
	hits := refundHits(st)
	err := g.engine.Refund(rctx, hits)
	clear(hits) // st.leases' storage past its length: keep no rule alive
	if err != nil {
		g.log.Warn(what, "err", err)
	}
	cancel()
	return err
}

// pastWriteDeadline returns by how much a wait of delay from now ends
// after the write deadline of st's request (Request.WriteDeadline), or a
// negative duration when it ends before it, or the request has none.
func pastWriteDeadline(st *Flow, delay time.Duration) time.Duration {
	if st.view.WriteDeadline.IsZero() {
		return -1
	}
	return delay - time.Until(st.view.WriteDeadline)
}

// refuseQueued answers 429 a request a leaky queue let through with a
// delay that ends over past its write deadline: held that long, it would
// reach the upstream (which would do its work) when its answer can no
// longer be written. It is answered at once as a full queue answers it
// (deny, Retry-After the time after which its wait would end within a
// write timeout), and charged as such a refusal: its charges are given
// back as for a client that leaves while queued (its reservation in
// full), and its leases when it finishes.
func (g *Gateway) refuseQueued(x Exchange, st *Flow, reserved bool, over time.Duration) {
	ctx := x.Context()
	if !st.peek { // a look (explain) charged nothing to give back
		g.refund(ctx, st, "gateway: refund of a request refused for its wait in a queue")
	}
	if reserved {
		g.cancelReservation(ctx, st)
	}
	res := &st.res
	b := -1 // the queue that holds it longest binds
	for i := range st.m.Hits {
		d := &res.Decisions[i]
		if res.Flags[i]&limiter.Shadow == 0 && d.Delay > 0 && (b < 0 || d.Delay > res.Decisions[b].Delay) {
			b = i
		}
	}
	over = max(over, time.Nanosecond)
	if b >= 0 {
		d := &res.Decisions[b]
		d.Allowed, d.Delay, d.RetryAfter = false, 0, over
		res.Binding = b
	}
	res.Allowed, res.Delay, res.RetryAfter = false, 0, over
	g.deny(x, st)
}

// renew keeps the concurrency leases of a request in flight alive: every
// third of the shortest lease lifetime it extends them, so that a slow
// request (a slow client body, a slow upstream) never loses its slot while
// it is still being served. It returns the function that stops it.
//
// A lease the store let expire (renewals kept from it longer than the
// lease's lifetime, by an outage) is taken again by the next renewal,
// under its own ID, when the limit has room. When another request took
// the slot meanwhile, the request runs on over its limit: the loss is
// logged and counted (LeaseObserver) once, and each later renewal tries
// to take the slot again, so that it holds one again as soon as one is
// free. The request is not cut: it was admitted, its upstream may be
// doing its work, and the gateway has no way to end a request in flight
// of its own accord; the excess lasts until it ends.
func (g *Gateway) renew(ctx context.Context, leases []limiter.Hit) (stop func()) {
	ttl := time.Duration(0)
	for i := range leases {
		t := leases[i].Rule.Limit().LeaseTTL
		if t <= 0 {
			t = algo.DefaultLeaseTTL
		}
		if ttl == 0 || t < ttl {
			ttl = t
		}
	}
	every := max(ttl/3, time.Millisecond)
	// mu is held by a renewal while it runs, so that stop waits for it:
	// after stop the leases (the request's scratch space) are not read.
	var mu sync.Mutex // guards stopped, t and lost
	stopped := false
	var t *time.Timer
	var lost []bool // by lease: lost, and not taken again since
	mu.Lock()       // t is set before the first renewal reads it
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(g.relTO, every))
		err := g.engine.Renew(rctx, leases)
		cancel()
		if ll, ok := errors.AsType[*limiter.LeaseLostError](err); ok {
			if lost == nil {
				lost = make([]bool, len(leases))
			}
			lost = g.leasesLost(leases, lost, ll.Lost)
		} else if err != nil {
			g.log.Warn("gateway: renewal of concurrency leases", "err", err, "leases", len(leases))
		} else if lost != nil {
			lost = g.leasesLost(leases, lost, nil)
		}
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// leasesLost notes a renewal of leases that lost those at the indexes
// now (the others were renewed): a lease newly lost is logged and counted,
// one lost before and renewed now has its slot again. It returns lost,
// which says, by lease, which are lost after it.
func (g *Gateway) leasesLost(leases []limiter.Hit, lost []bool, now []int) []bool {
	for i := range leases {
		gone := slices.Contains(now, i)
		switch {
		case gone && !lost[i]:
			name := leases[i].Rule.Name()
			g.log.Warn("gateway: a request in flight lost its concurrency slot: its lease expired while the store was out of reach, "+
				"and another request took the slot; it runs on over the limit", "limit", name)
			if lo, ok := g.obs.(LeaseObserver); ok {
				lo.LeaseLost(name)
			}
		case !gone && lost[i]:
			g.log.Info("gateway: a request in flight took its lost concurrency slot again", "limit", leases[i].Rule.Name())
		}
		lost[i] = gone
	}
	return lost
}

// LeaseObserver is an Observer that is also told of the concurrency slots
// requests in flight lose (*metrics.Metrics is one): a lease that expired
// before its renewal reached the store (an outage longer than the limit's
// lease_ttl), whose slot another request took meanwhile. The request runs
// on over its limit until it ends or takes a slot again. Its method is
// called off the request path, at most once per lease lost.
type LeaseObserver interface {
	LeaseLost(limit string)
}

// release gives back concurrency leases; it runs deferred, so it happens
// whatever the handler or the upstream does (errors, panics, timeouts).
func (g *Gateway) release(ctx context.Context, leases []limiter.Hit) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.relTO)
	defer cancel()
	if err := g.engine.Release(rctx, leases); err != nil {
		g.log.Warn("gateway: release of concurrency leases", "err", err, "leases", len(leases))
	}
}

// failed answers a request whose check ended in an error. A cost larger
// than a limit's capacity can never pass: 429 without Retry-After (waiting
// would not help). Anything else passes: the engine already applies each
// limit's failure policy to store failures, so an error reaching the
// gateway is unexpected and is logged.
func (g *Gateway) failed(err error, x Exchange, st *Flow) (later bool) {
	st.err = err
	if cerr := x.Context().Err(); cerr != nil && errors.Is(err, cerr) {
		// The client left before the engine answered (a store call
		// ends with its request's context): nothing was decided, so
		// nothing is passed on, as it would be past a store that
		// failed, and nothing is logged but the request (499).
		return false
	}
	g.log.Error("gateway: engine", "err", err, "path", strings.Clone(st.view.Path))
	if errors.Is(err, floodgate.ErrNeverFits) {
		g.rejected(st, "", http.StatusTooManyRequests)
		x.Answer(http.StatusTooManyRequests, bodyTooMany, false)
		return false
	}
	if st.m.Reject != 0 {
		g.reject(x, st)
		return false
	}
	return g.pass(x, st, nil, false)
}

type nopObserver struct{}

func (nopObserver) Rejected(limiter.FrontEnd, string, int) {}
func (nopObserver) Queued(string, int)                     {}
func (nopObserver) Upstream(string, int)                   {}
