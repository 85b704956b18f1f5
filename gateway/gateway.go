package gateway

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// Matcher finds the route and the limits of a request. The policy package
// provides one; it must be safe for concurrent use.
type Matcher interface {
	// Match fills m (already reset) for r.
	Match(r *http.Request, m *Match) error
}

// Match is what a Matcher found for one request. The gateway owns it and
// reuses it for later requests; a Matcher appends to its slices.
type Match struct {
	// Forbidden is set when the route requires an API key and the request
	// has none, or an unknown one: the answer is 403.
	Forbidden bool
	// Route names the request's route ("" when none matched).
	Route string
	// Upstream is the route's upstream for the reverse proxy (nil in
	// middleware use, or when no route matched).
	Upstream *url.URL
	// Hits are the limits that apply with their keys, most specific first.
	Hits []limiter.Hit
	// CountOn is parallel to Hits: a non-empty list of statuses makes the
	// hit's limit count only responses with one of them (checked before
	// forwarding, charged after the response). Nil or shorter than Hits
	// means every hit is charged before forwarding.
	CountOn [][]int

	// fields, when set by the matcher, replaces the gateway's header
	// switches for this request (they follow a reloaded policy file).
	fields *fieldSwitches
}

// fieldSwitches are the header switches of one policy.
type fieldSwitches struct {
	opts     HeaderOptions
	noFields bool
}

// Reset empties m, keeping its storage.
func (m *Match) Reset() {
	clear(m.Hits)
	clear(m.CountOn)
	*m = Match{Hits: m.Hits[:0], CountOn: m.CountOn[:0]}
}

// countOn returns the statuses of hit i (nil: charge before forwarding).
func (m *Match) countOn(i int) []int {
	if i < len(m.CountOn) {
		return m.CountOn[i]
	}
	return nil
}

// Engine checks and charges the hits of a request. It has the shape of
// limiter.Store: the engine (limiter.Limiter, with failure policies and a
// circuit breaker) provides it, and a bare store works too. Apply writes one
// decision per hit; for Charge, a denying non-shadow hit keeps every other
// hit from being charged.
type Engine interface {
	Apply(ctx context.Context, op limiter.Op, hits []limiter.Hit, out []floodgate.Decision) error
}

// Outcome is what happened to one limit for one request, for metrics.
type Outcome uint8

// Outcomes of a limit.
const (
	// Allowed: the limit let the request pass.
	Allowed Outcome = iota
	// Denied: the limit refused the request.
	Denied
	// ShadowDenied: a shadow limit would have refused the request.
	ShadowDenied
)

// String returns allowed, denied or shadow_denied.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case ShadowDenied:
		return "shadow_denied"
	}
	return "outcome"
}

// Observer receives the gateway's events, for metrics. Methods are called
// on the request path: they must be fast and safe for concurrent use.
type Observer interface {
	// Decision reports one limit's decision; near is true when an allowed
	// request left at most 10% of the limit's capacity.
	Decision(limit string, o Outcome, near bool)
	// Rejected reports an answer of the gateway itself: 429 with the
	// binding limit, or 403 (limit "").
	Rejected(limit string, status int)
	// StoreLatency reports how long one call to the engine took.
	StoreLatency(d time.Duration)
	// Queued reports a request starting (+1) or ending (-1) its wait in a
	// leaky queue.
	Queued(limit string, delta int)
	// Upstream reports the status of an upstream response (0 when the
	// upstream could not be reached).
	Upstream(route string, status int)
}

// Options configure a Gateway. Matcher and Engine are required.
type Options struct {
	// Matcher finds the limits of requests.
	Matcher Matcher
	// Engine checks and charges them.
	Engine Engine
	// Headers switches the optional response fields.
	Headers HeaderOptions
	// NoRateLimitFields leaves out the RateLimit-Policy and RateLimit
	// fields (they are written by default).
	NoRateLimitFields bool
	// Observer receives metrics events (default: none).
	Observer Observer
	// Logger receives errors of the engine and the upstream (default:
	// discard).
	Logger *slog.Logger
	// ReleaseTimeout bounds giving back concurrency leases and refunds
	// after the request (default 2s).
	ReleaseTimeout time.Duration
	// Transport carries the reverse proxy's upstream requests (default:
	// NewTransport(TransportOptions{})).
	Transport http.RoundTripper
}

// Gateway enforces a policy on HTTP requests, as middleware or as a
// reverse proxy. It is safe for concurrent use.
type Gateway struct {
	matcher Matcher
	engine  Engine
	fields  fieldSwitches
	obs     Observer
	timed   bool // an Observer wants store latencies
	log     *slog.Logger
	relTO   time.Duration
	tr      http.RoundTripper

	headers   sync.Map // *limiter.Rule → *LimitHeader (rules are immutable)
	headerIDs atomic.Uint64
	policies  [256]atomic.Pointer[policyEntry]
	proxies   sync.Map // *url.URL → *upstreamProxy
	pool      sync.Pool
	lease     atomic.Uint64
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
		matcher: opts.Matcher,
		engine:  opts.Engine,
		fields:  fieldSwitches{opts: opts.Headers, noFields: opts.NoRateLimitFields},
		obs:     opts.Observer,
		log:     opts.Logger,
		relTO:   opts.ReleaseTimeout,
		tr:      opts.Transport,
	}
	if g.obs == nil {
		g.obs = nopObserver{}
	} else {
		g.timed = true
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.relTO <= 0 {
		g.relTO = 2 * time.Second
	}
	if g.tr == nil {
		g.tr = NewTransport(TransportOptions{})
	}
	// Lease IDs start at a random point so that instances sharing a store
	// do not collide.
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	g.lease.Store(binary.LittleEndian.Uint64(seed[:]) &^ (1 << 63))
	g.pool.New = func() any { return new(reqState) }
	return g, nil
}

// Middleware returns next wrapped by the gateway: requests over a limit are
// answered by the gateway, the others reach next (after their wait, for a
// leaky queue) with the RateLimit fields already set on the response.
func (g *Gateway) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.serve(w, r, next, nil)
	})
}

// ServeHTTP is the reverse proxy: it enforces the policy and forwards each
// request to its route's upstream (404 when no route matched).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.serve(w, r, nil, g.forward)
}

// reqState is the per-request scratch space, pooled.
type reqState struct {
	m        Match
	dec      []floodgate.Decision
	sub      []limiter.Hit
	subDec   []floodgate.Decision
	subIdx   []int
	postIdx  []int
	leases   []limiter.Hit
	covered  []Covered
	buf      []byte
	recorder statusRecorder
}

func (g *Gateway) get() *reqState {
	st := g.pool.Get().(*reqState)
	st.m.Reset()
	return st
}

func (g *Gateway) put(st *reqState) {
	st.m.Reset()
	clear(st.sub)
	clear(st.leases)
	clear(st.covered)
	st.sub, st.leases, st.covered = st.sub[:0], st.leases[:0], st.covered[:0]
	st.recorder = statusRecorder{}
	g.pool.Put(st)
}

// switches returns the header switches of a request: the matcher's when it
// set them, else the gateway's.
func (g *Gateway) switches(m *Match) *fieldSwitches {
	if m.fields != nil {
		return m.fields
	}
	return &g.fields
}

// header returns the precomputed fields of a rule.
func (g *Gateway) header(r *limiter.Rule) *LimitHeader {
	if h, ok := g.headers.Load(r); ok {
		return h.(*LimitHeader)
	}
	nh := NewLimitHeader(&r.Limit)
	nh.id = g.headerIDs.Add(1)
	h, _ := g.headers.LoadOrStore(r, nh)
	return h.(*LimitHeader)
}

// policyEntry is one cached RateLimit-Policy value: the limits, in order,
// and the field they make.
type policyEntry struct {
	hs    []*LimitHeader
	value string
}

// policyValue returns the RateLimit-Policy value of st.covered. The value
// depends only on which limits are listed in which order, so it is cached
// (a small table indexed by a hash of the limits; a collision just builds
// the value again).
func (g *Gateway) policyValue(st *reqState) string {
	items := st.covered
	var hash uint64 = 14695981039346656037
	for i := range items {
		hash ^= items[i].Header.id
		hash *= 1099511628211
	}
	slot := &g.policies[hash%uint64(len(g.policies))]
	if e := slot.Load(); e != nil && len(e.hs) == len(items) {
		same := true
		for i := range items {
			if e.hs[i] != items[i].Header {
				same = false
				break
			}
		}
		if same {
			return e.value
		}
	}
	st.buf = appendPolicy(st.buf[:0], items)
	e := &policyEntry{hs: make([]*LimitHeader, len(items)), value: string(st.buf)}
	for i := range items {
		e.hs[i] = items[i].Header
	}
	slot.Store(e)
	return e.value
}

// apply runs op on the hits with the given indices into st.m.Hits and
// copies the decisions into st.dec.
func (g *Gateway) apply(ctx context.Context, st *reqState, op limiter.Op, idx []int) error {
	st.sub = st.sub[:0]
	for _, i := range idx {
		st.sub = append(st.sub, st.m.Hits[i])
	}
	st.subDec = slices.Grow(st.subDec[:0], len(idx))[:len(idx)]
	clear(st.subDec)
	var err error
	if g.timed {
		start := time.Now()
		err = g.engine.Apply(ctx, op, st.sub, st.subDec)
		g.obs.StoreLatency(time.Since(start))
	} else {
		err = g.engine.Apply(ctx, op, st.sub, st.subDec)
	}
	for k, i := range idx {
		st.dec[i] = st.subDec[k]
	}
	return err
}

// serve is the request path shared by the middleware and the proxy: exactly
// one of next and fwd is set.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, next http.Handler, fwd func(http.ResponseWriter, *http.Request, *reqState)) {
	st := g.get()
	defer g.put(st)
	m := &st.m
	if err := g.matcher.Match(r, m); err != nil {
		g.log.Error("gateway: match", "err", err, "path", r.URL.Path)
		writeJSON(w, http.StatusInternalServerError, bodyInternal)
		return
	}
	if m.Forbidden {
		g.obs.Rejected("", http.StatusForbidden)
		if g.log.Enabled(r.Context(), slog.LevelDebug) {
			g.log.Debug("gateway: 403", "route", m.Route, "path", r.URL.Path)
		}
		WriteForbidden(w)
		return
	}
	n := len(m.Hits)
	if n == 0 {
		g.pass(w, r, st, next, fwd)
		return
	}
	st.dec = slices.Grow(st.dec[:0], n)[:n]
	clear(st.dec)

	// Split the hits: those counted by outcome are peeked now and charged
	// after the response; the others are charged now, all or nothing.
	pre, post := st.subIdx[:0], st.postIdx[:0]
	for i := range m.Hits {
		if len(m.countOn(i)) > 0 {
			post = append(post, i)
			continue
		}
		if m.Hits[i].Rule.Limit.Algorithm.Kind() == floodgate.KindConcurrency {
			m.Hits[i].Lease = g.lease.Add(1)
		}
		pre = append(pre, i)
	}
	st.subIdx, st.postIdx = pre, post
	ctx := r.Context()
	if len(post) > 0 {
		if err := g.apply(ctx, st, limiter.Peek, post); err != nil {
			g.failed(err, w, r, st, next, fwd)
			return
		}
		if !g.allows(st, post) {
			// Nothing charged: answer from the peeked limits alone
			// (Limit -1 marks a hit that was not evaluated).
			for _, i := range pre {
				st.dec[i] = floodgate.Decision{Allowed: true, Limit: -1}
			}
			pre = pre[:0]
		}
	}
	if len(pre) > 0 {
		if err := g.apply(ctx, st, limiter.Charge, pre); err != nil {
			g.failed(err, w, r, st, next, fwd)
			return
		}
	}

	// The verdict: the binding limit is the most specific denying one;
	// Retry-After the largest wait among the denials.
	allowed, binding := true, -1
	var retry, delay time.Duration
	var minT int64 = -1
	for i := range m.Hits {
		d := &st.dec[i]
		if d.Limit < 0 {
			continue // not evaluated
		}
		rule := m.Hits[i].Rule
		h := g.header(rule)
		switch {
		case d.Allowed:
			near := d.Remaining*10 <= d.Limit
			g.obs.Decision(h.Name, Allowed, near)
			if !rule.Shadow {
				delay = max(delay, d.Delay) // a shadow queue delays nothing
			}
		case rule.Shadow:
			g.obs.Decision(h.Name, ShadowDenied, false)
		default:
			g.obs.Decision(h.Name, Denied, false)
			allowed = false
			if binding < 0 {
				binding = i
			}
			retry = max(retry, d.RetryAfter)
			if t, ok := h.Reset(d); ok {
				minT = max(minT, t)
			}
		}
	}
	if !allowed {
		// Nothing was charged: the allowing limits still have the units
		// their peeked decisions counted as taken.
		for i := range m.Hits {
			if d := &st.dec[i]; d.Allowed && d.Limit >= 0 {
				d.Remaining = min(d.Limit, d.Remaining+m.Hits[i].Cost)
			}
		}
		if sw := g.switches(m); !sw.noFields {
			g.setFields(w.Header(), st, binding, &sw.opts)
		}
		h := g.header(m.Hits[binding].Rule)
		ra := RetryAfterSeconds(retry, minT)
		g.obs.Rejected(h.Name, http.StatusTooManyRequests)
		if g.log.Enabled(ctx, slog.LevelDebug) {
			g.log.Debug("gateway: 429", "limit", h.Name, "route", m.Route, "path", r.URL.Path, "retry_after", ra)
		}
		WriteTooMany(w, ra, h.Kind == floodgate.KindQuota)
		return
	}

	// Allowed: the concurrency leases are given back whatever happens next.
	for _, i := range pre {
		if m.Hits[i].Lease != 0 && st.dec[i].Allowed {
			st.leases = append(st.leases, m.Hits[i])
		}
	}
	if len(st.leases) > 0 {
		defer g.release(r.Context(), st.leases)
	}
	if delay > 0 && !g.wait(ctx, st, pre, delay) {
		return // the client went away while queued
	}
	if sw := g.switches(m); !sw.noFields {
		g.setFields(w.Header(), st, -1, &sw.opts)
	}
	if len(post) == 0 {
		g.pass(w, r, st, next, fwd)
		return
	}
	rec := &st.recorder
	rec.ResponseWriter, rec.status = w, 0
	g.pass(rec, r, st, next, fwd)
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	charge := post[:0]
	for _, i := range post {
		if slices.Contains(m.countOn(i), status) {
			charge = append(charge, i)
		}
	}
	if len(charge) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.relTO)
		if err := g.apply(cctx, st, limiter.Charge, charge); err != nil {
			g.engineError(err, r)
		}
		cancel()
	}
}

// allows reports whether every non-shadow hit among idx allowed.
func (g *Gateway) allows(st *reqState, idx []int) bool {
	for _, i := range idx {
		if !st.dec[i].Allowed && !st.m.Hits[i].Rule.Shadow {
			return false
		}
	}
	return true
}

// pass hands the request on: to next (middleware) or to the upstream.
func (g *Gateway) pass(w http.ResponseWriter, r *http.Request, st *reqState, next http.Handler, fwd func(http.ResponseWriter, *http.Request, *reqState)) {
	if next != nil {
		next.ServeHTTP(w, r)
		return
	}
	fwd(w, r, st)
}

// setFields writes the RateLimit fields of the limits that covered the
// request (shadow ones add nothing), the binding limit first: the given one
// on a denial, else the one with the fewest units left.
func (g *Gateway) setFields(h http.Header, st *reqState, binding int, opts *HeaderOptions) {
	m := &st.m
	if binding < 0 {
		for i := range m.Hits {
			d := &st.dec[i]
			if d.Limit < 0 || m.Hits[i].Rule.Shadow {
				continue
			}
			if binding < 0 || d.Remaining < st.dec[binding].Remaining {
				binding = i
			}
		}
		if binding < 0 {
			return
		}
	}
	st.covered = append(st.covered[:0], Covered{g.header(m.Hits[binding].Rule), st.dec[binding]})
	for i := range m.Hits {
		if i == binding || st.dec[i].Limit < 0 || m.Hits[i].Rule.Shadow {
			continue
		}
		st.covered = append(st.covered, Covered{g.header(m.Hits[i].Rule), st.dec[i]})
	}
	_, st.buf = setFields(h, g.policyValue(st), st.covered, opts, st.buf)
}

// wait holds a request for its place in a leaky queue. It returns false
// when the client went away first; then the charge is refunded if the
// engine can.
func (g *Gateway) wait(ctx context.Context, st *reqState, pre []int, delay time.Duration) bool {
	name := ""
	for _, i := range pre {
		if st.dec[i].Delay > 0 && !st.m.Hits[i].Rule.Shadow {
			name = g.header(st.m.Hits[i].Rule).Name
			break
		}
	}
	g.obs.Queued(name, 1)
	defer g.obs.Queued(name, -1)
	t := time.NewTimer(delay)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		t.Stop()
	}
	// The client went away before its slot: give its place back (the
	// rate algorithms' charges are refundable; others keep theirs).
	st.sub = st.sub[:0]
	for _, i := range pre {
		st.sub = append(st.sub, st.m.Hits[i])
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.relTO)
	if err := g.engine.Apply(rctx, limiter.Refund, st.sub, make([]floodgate.Decision, len(st.sub))); err != nil {
		g.log.Warn("gateway: refund of a queued request", "err", err)
	}
	cancel()
	return false
}

// release gives back concurrency leases; it runs deferred, so it happens
// whatever the handler or the upstream does (errors, panics, timeouts).
func (g *Gateway) release(ctx context.Context, leases []limiter.Hit) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.relTO)
	defer cancel()
	out := make([]floodgate.Decision, len(leases))
	if err := g.engine.Apply(rctx, limiter.Release, leases, out); err != nil {
		g.log.Warn("gateway: release of concurrency leases", "err", err, "leases", len(leases))
	}
}

// engineError logs an engine failure.
func (g *Gateway) engineError(err error, r *http.Request) {
	g.log.Error("gateway: engine", "err", err, "path", r.URL.Path)
}

// failed answers a request whose check ended in an error. A cost larger
// than a limit's capacity can never pass: 429 without Retry-After (waiting
// would not help). Anything else passes: the engine already applies each
// limit's failure policy to store failures, so an error reaching the
// gateway is unexpected and is logged.
func (g *Gateway) failed(err error, w http.ResponseWriter, r *http.Request, st *reqState, next http.Handler, fwd func(http.ResponseWriter, *http.Request, *reqState)) {
	g.engineError(err, r)
	if errors.Is(err, floodgate.ErrNeverFits) {
		g.obs.Rejected("", http.StatusTooManyRequests)
		writeJSON(w, http.StatusTooManyRequests, bodyTooMany)
		return
	}
	g.pass(w, r, st, next, fwd)
}

var bodyInternal = []byte(`{"message":"Internal Server Error"}` + "\n")

// statusRecorder remembers the status of a response.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush passes flushes through for streaming responses.
func (s *statusRecorder) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type nopObserver struct{}

func (nopObserver) Decision(string, Outcome, bool) {}
func (nopObserver) Rejected(string, int)           {}
func (nopObserver) StoreLatency(time.Duration)     {}
func (nopObserver) Queued(string, int)             {}
func (nopObserver) Upstream(string, int)           {}
