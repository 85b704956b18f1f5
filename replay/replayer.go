package replay

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/access"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// sweepEvery is the virtual time between sweeps of idle keys: the store
// holds the keys of the last few minutes of traffic, not of the whole log.
const sweepEvery = int64(time.Minute)

// Replayer decides logged requests through a policy, one at a time, on an
// embedded store whose clock is the log's: a request is decided at the
// instant it arrived, with nothing slept. Each request goes through the
// gateway's own admission flow (gateway.Gateway.Handle), with the identity
// the log gives (client address, user, API key or its name): limits
// counted by outcome (count_on) and reservations are settled when the
// request ends, with the status the log gives, and concurrency leases are
// held until it ends (its time plus its duration). A Replayer is not safe
// for concurrent use.
type Replayer struct {
	p       *policy.Policy
	store   *memstore.Store
	g       *gateway.Gateway
	now     int64
	userHdr string
	// writeTimeout is the policy's server.timeouts.write: a request a
	// leaky queue would hold past it is refused, as serve's engines
	// refuse it.
	writeTimeout time.Duration

	pending   completions
	lastSweep int64
	peakKeys  int
	// renewEvery is a third of the shortest lease lifetime of the
	// policy's concurrency limits (0: none), lastRenew when the leases of
	// the requests in flight were last renewed (renew).
	renewEvery, lastRenew int64

	view  gateway.Request
	known gateway.Known
	hdr   http.Header
	cur   *gateway.Handled // the request decided last, when it ended at once
	out   Outcome
	// none and noneRes are the outcome of a request refused before any
	// limit (Record.Refused).
	none    gateway.Match
	noneRes limiter.Result
	ck      *checker // of Check
}

// Outcome is the replay's decision on one request. It is valid until the
// Replayer's next call.
type Outcome struct {
	// Denied reports that a limit refused the request (429, or the status
	// its refusal sets).
	Denied bool
	// Forbidden reports a 403: the route requires an API key the request
	// lacks (the limits that need no key allowed it).
	Forbidden bool
	// Answered is the status of the answer the gateway gave the request
	// before any limit decided it, 0 otherwise: its own 400 (an escaped
	// slash, a field sent twice), or what the log shows it answered so
	// (Record.Refused: the deny list's 403, the penalty box's 429, an
	// engine's refusal). No limit allowed or refused such a request.
	Answered int
	// Err is set when the engine could not decide (a cost above a limit's
	// capacity); the request is then refused.
	Err error
	// Match holds the request's route and limits; Result their decisions
	// (Result.Binding indexes Match.Hits).
	Match  *gateway.Match
	Result *limiter.Result
}

// Refused reports whether the gateway refused the request rather than
// pass it on: a limit refused it, the route's API key was missing (403),
// or the gateway answered it before any limit (its own 400, an access
// list, the penalty box). A comparison flips a request only when one
// policy refuses it and the other does not.
func (o *Outcome) Refused() bool {
	return o.Denied || o.Forbidden || o.Answered != 0
}

// Binding returns the binding limit, or nil when no limit applied.
func (o *Outcome) Binding() *policy.Limit {
	if b := o.Result.Binding; b >= 0 && b < len(o.Match.Limits) && len(o.Match.Hits) > 0 {
		return o.Match.Limits[b]
	}
	return nil
}

// NewReplayer returns a Replayer of p on a store of its own, capped at the
// policy's server.memory.max_bytes as floodgate serve's embedded store is:
// past it, keys are evicted as serve evicts them.
func NewReplayer(p *policy.Policy) (*Replayer, error) {
	r := &Replayer{p: p, hdr: http.Header{}}
	srv := p.Server()
	st, err := memstore.New(memstore.Options{Now: func() int64 { return r.now }, MaxBytes: srv.Memory.MaxBytes, SnapshotInterval: -1, SweepInterval: -1})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	r.store = st
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{Now: func() time.Time { return time.Unix(0, r.now) }})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("replay: %w", err)
	}
	var keeper gateway.Gatekeeper
	if l := access.Compile(access.FileEntries(&srv.Access)); len(l.Entries()) > 0 {
		keeper = exemptions{l}
	}
	r.g, err = gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, gateway.EngineOptions(srv)), MethodOverride: gateway.MethodOverrideOf(srv.MethodOverride),
		Gatekeeper: keeper})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("replay: %w", err)
	}
	if srv.User.Header != "" {
		r.userHdr = http.CanonicalHeaderKey(srv.User.Header)
	}
	r.writeTimeout = srv.Timeouts.Write
	r.view.Known = &r.known
	for _, l := range p.Limits() {
		if l.Rule.Algorithm().Kind() != floodgate.KindConcurrency {
			continue
		}
		ttl := l.Rule.Limit().LeaseTTL
		if ttl <= 0 {
			ttl = algo.DefaultLeaseTTL
		}
		if every := max(int64(ttl/3), 1); r.renewEvery == 0 || every < r.renewEvery {
			r.renewEvery = every
		}
	}
	return r, nil
}

// exemptions is the gatekeeper of a replay: an address on the policy
// file's allow list is exempt from the limits its entry names, as the
// gateway exempts it. The deny list and the penalty box refused requests
// before any limit, which the log shows (Record.Refused): they are not
// screened again.
type exemptions struct{ l *access.List }

func (e exemptions) Screen(m *gateway.Match) (int, time.Duration) {
	return gateway.ScreenByList(e.l, m, false), 0
}

func (exemptions) Outcome(context.Context, time.Duration, *gateway.Match, bool, int) {}

// Close releases the store.
func (r *Replayer) Close() error { return r.store.Close() }

// capBytes is what the replayer's store may hold: the policy file's
// server.memory.max_bytes.
func (r *Replayer) capBytes() int64 { return r.p.Server().Memory.MaxBytes }

// storeBytes is what the replayer's store holds, as counted for its cap.
func (r *Replayer) storeBytes() int64 { return r.store.Stats().Bytes }

// Policy returns the policy the requests are decided by.
func (r *Replayer) Policy() *policy.Policy { return r.p }

// Decide decides rec at its time and charges what the gateway would.
func (r *Replayer) Decide(rec *Record) *Outcome {
	r.prepare(rec)
	return r.decide(rec)
}

// Check decides rec as Run does when the log records decisions. It
// decides as Decide does, except when its answer differs from the logged
// one and moving the request by at most tol (a refill or a window's end
// within the log's resolution) gives the logged answer: then it charges
// the request as logged, at the nearest instant that gives it. Run
// replays each policy so, with tol the larger of Options.Tolerance and the
// log's resolution.
func (r *Replayer) Check(rec *Record, tol time.Duration) *Outcome {
	if r.ck == nil || r.ck.tol != int64(tol) {
		r.ck = newChecker(tol, nil)
	}
	r.prepare(rec)
	return r.ck.check(r, rec)
}

// prepare ends the request decided last, moves the clock to rec's time
// (ending the requests that ended before it) and turns rec into the
// request the gateway saw; it charges nothing.
func (r *Replayer) prepare(rec *Record) {
	if r.cur != nil {
		r.cur.Done(0)
		r.cur = nil
	}
	r.advance(rec.Time)
	clear(r.hdr)
	for _, h := range rec.Headers {
		r.hdr[h.Name] = append(r.hdr[h.Name], h.Value)
	}
	r.known = gateway.Known{ClientIP: rec.ClientIP, ClientKey: rec.ClientKey, UserKnown: true, User: rec.User, APIKey: rec.APIKey, KeyName: rec.Key}
	if r.known.User == "" && r.userHdr != "" {
		// The user a trusted proxy named, as the log holds it.
		r.known.User = r.hdr.Get(r.userHdr)
	}
	r.view = gateway.Request{Method: rec.Method, Host: rec.Host, Path: rec.Path, RawPath: rec.RawPath, Proto: "HTTP/1.1", Peer: rec.ClientIP,
		Header: r.hdr, Known: &r.known}
	if r.writeTimeout > 0 {
		// The request is decided now, its answer due within the write
		// timeout: a queue's wait is set against it as the engines set it.
		r.view.WriteDeadline = time.Now().Add(r.writeTimeout)
	}
}

// peek decides the prepared request at instant t without charging it:
// whether it would be denied.
func (r *Replayer) peek(t int64) bool {
	saved := r.now
	r.now = t
	h := r.g.Handle(context.Background(), &r.view, gateway.HandleOptions{Peek: true})
	denied := h.Refused
	h.Done(0)
	r.now = saved
	return denied
}

// decideAt decides and charges the prepared request as if it came at
// instant t, near its logged time.
func (r *Replayer) decideAt(rec *Record, t int64) *Outcome {
	saved := r.now
	r.now = t
	o := r.decide(rec)
	r.now = saved
	return o
}

// decide charges the prepared request through the gateway's admission
// flow. A request that holds something when it is let through (leases, a
// reservation) is held until its logged end, when it settles with the
// logged status.
func (r *Replayer) decide(rec *Record) *Outcome {
	if r.cur != nil {
		r.cur.Done(0)
		r.cur = nil
	}
	o := &r.out
	if rec.Refused {
		// Refused before any limit: nothing was charged.
		r.none = gateway.Match{}
		*o = Outcome{Answered: rec.Status, Match: &r.none, Result: &r.noneRes}
		if o.Answered == 0 {
			o.Answered = http.StatusBadRequest // a log that says refused without a status
		}
		return o
	}
	var left time.Duration
	if rec.Status == statusClientGone {
		left = rec.Duration // a request in a leaky queue may have left it
	}
	h := r.g.Handle(context.Background(), &r.view, gateway.HandleOptions{Hold: true, Left: left, Shed: rec.Shed})
	*o = Outcome{Denied: h.Refused, Forbidden: h.Status == http.StatusForbidden,
		Err: h.Err, Match: h.Match, Result: h.Result}
	if !h.Refused && h.Status == http.StatusBadRequest {
		o.Answered = h.Status // the gateway's own 400, before any limit
	}
	if !h.Held {
		r.cur = h
		return o
	}
	status := rec.Status
	if rec.Logged == LoggedDeny {
		// The log shows the request refused; had it passed, its status is
		// unknown: what it reserved is given back.
		status = 0
	}
	r.pending.push(completion{t: rec.Time + int64(rec.Duration), h: h, status: status})
	return o
}

// statusClientGone is the status an access log gives a request whose
// client went away unanswered.
const statusClientGone = 499

// completion is a request held until its logged end.
type completion struct {
	t      int64
	h      *gateway.Handled
	status int
}

// completions is a min-heap by time.
type completions []completion

func (h *completions) push(c completion) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].t <= s[i].t {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *completions) pop() completion {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = completion{}
	s = s[:n]
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && s[c+1].t < s[c].t {
			c++
		}
		if s[i].t <= s[c].t {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
	return top
}

// advance moves the clock to t, ending the requests that ended by then,
// and sweeps idle keys now and then.
func (r *Replayer) advance(t int64) {
	for len(r.pending) > 0 && r.pending[0].t <= t {
		c := r.pending.pop()
		r.now = max(r.now, c.t)
		// A reservation held past its TTL has settled at its estimate in
		// the store already: its settle changes nothing.
		c.h.Done(c.status)
	}
	r.now = max(r.now, t)
	r.renew()
	if r.now-r.lastSweep >= sweepEvery {
		if r.lastSweep != 0 {
			r.peakKeys = max(r.peakKeys, r.store.Stats().Keys)
			r.store.Sweep()
		}
		r.lastSweep = r.now
	}
}

// renew extends the concurrency leases of the requests in flight, as the
// gateway renews them every third of their lifetime until they end: a
// request longer than its limit's lease_ttl keeps its slot. It renews
// before a decision whenever that third has passed since the last
// renewal, so that no lease has expired when a request is decided (one
// that lapsed in a gap of the log is taken again at once: nothing was
// decided in the gap that could have taken its slot).
func (r *Replayer) renew() {
	if r.renewEvery == 0 || len(r.pending) == 0 || r.now-r.lastRenew < r.renewEvery {
		return
	}
	r.lastRenew = r.now
	for i := range r.pending {
		// A lease whose slot another request took runs on over its
		// limit, as at the gateway.
		_ = r.pending[i].h.Renew(context.Background())
	}
}

// PeakKeys is the largest number of keys the store held, as seen before
// each sweep.
func (r *Replayer) PeakKeys() int {
	return max(r.peakKeys, r.store.Stats().Keys)
}
