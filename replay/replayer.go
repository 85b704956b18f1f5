package replay

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// sweepEvery is the virtual time between sweeps of idle keys: the store
// holds the keys of the last few minutes of traffic, not of the whole log.
const sweepEvery = int64(time.Minute)

// Replayer decides logged requests through a policy, one at a time, on an
// embedded store whose clock is the log's: a request is decided at the
// instant it arrived, with nothing slept. It does what the gateway does
// around a decision: limits counted by outcome (count_on) are charged when
// the request ends, with the status the log gives, and concurrency leases
// are held until it ends (its time plus its duration). A Replayer is not
// safe for concurrent use.
type Replayer struct {
	p       *policy.Policy
	store   *memstore.Store
	eng     *limiter.Limiter
	now     int64
	keyHdr  string
	userHdr string

	pending   completions
	lastSweep int64
	peakKeys  int

	m       policy.Match
	req     limiter.Request
	res     limiter.Result
	peekReq limiter.Request
	peekRes limiter.Result
	settled limiter.Result
	ttl     time.Duration // of the request's reservation
	out     Outcome
	hdr     http.Header
	keys    clientKeys
	ck      *checker // of Check
}

// clientKeys remembers the counted form of client addresses (an IPv6
// prefix, an IPv4 address as text), so that a request does not format its
// address again; it forgets them all when full.
type clientKeys struct {
	bits int
	m    map[netip.Addr]string
}

const maxClientKeys = 1 << 16

func (c *clientKeys) key(a netip.Addr) string {
	if k, ok := c.m[a]; ok {
		return k
	}
	if c.m == nil || len(c.m) >= maxClientKeys {
		c.m = make(map[netip.Addr]string, 1024)
	}
	k := identity.ClientKey(a, c.bits)
	c.m[a] = k
	return k
}

// Outcome is the replay's decision on one request. It is valid until the
// Replayer's next call.
type Outcome struct {
	// Denied reports that a limit refused the request (429).
	Denied bool
	// Forbidden reports a 403: the route requires an API key the request
	// lacks (the limits that need no key allowed it).
	Forbidden bool
	// Err is set when the engine could not decide (a cost above a limit's
	// capacity); the request is then refused.
	Err error
	// Match holds the request's route and limits; Result their decisions
	// (Result.Binding indexes Match.Hits).
	Match  *policy.Match
	Result *limiter.Result
}

// Binding returns the binding limit, or nil when no limit applied.
func (o *Outcome) Binding() *policy.Limit {
	if b := o.Result.Binding; b >= 0 && b < len(o.Match.Limits) && len(o.Match.Hits) > 0 {
		return o.Match.Limits[b]
	}
	return nil
}

// NewReplayer returns a Replayer of p on a store of its own.
func NewReplayer(p *policy.Policy) (*Replayer, error) {
	r := &Replayer{p: p, hdr: http.Header{}}
	st, err := memstore.New(memstore.Options{Now: func() int64 { return r.now }, SnapshotInterval: -1, SweepInterval: -1})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	r.store = st
	r.eng = limiter.New(st, limiter.Options{})
	srv := p.Server()
	r.keys.bits = srv.IPv6Prefix
	if r.keys.bits == 0 {
		r.keys.bits = identity.DefaultIPv6Prefix
	}
	r.keyHdr = http.CanonicalHeaderKey(srv.APIKeyHeader)
	if srv.User.Header != "" {
		r.userHdr = http.CanonicalHeaderKey(srv.User.Header)
	}
	return r, nil
}

// Close releases the store.
func (r *Replayer) Close() error { return r.store.Close() }

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
// the request as logged, at that instant. Run replays each policy so,
// with tol the larger of Options.Tolerance and the log's resolution.
func (r *Replayer) Check(rec *Record, tol time.Duration) *Outcome {
	if r.ck == nil || r.ck.tol != int64(tol) {
		r.ck = newChecker(tol, nil)
	}
	r.prepare(rec)
	return r.ck.check(r, rec)
}

// prepare moves the clock to rec's time (ending the requests that ended
// before it) and matches rec; it charges nothing.
func (r *Replayer) prepare(rec *Record) {
	r.advance(rec.Time)
	r.match(rec)
}

// peek decides the prepared request at instant t without charging it:
// whether it would be denied, and the result.
func (r *Replayer) peek(t int64) bool {
	if len(r.m.Hits) == 0 {
		return false
	}
	saved := r.now
	r.now = t
	r.peekReq = limiter.Request{Peek: true, Hits: r.m.Hits}
	err := r.eng.Decide(context.Background(), &r.peekReq, &r.peekRes)
	r.now = saved
	return err != nil || !r.peekRes.Allowed
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

// decide charges the prepared request.
func (r *Replayer) decide(rec *Record) *Outcome {
	o := &r.out
	*o = Outcome{Match: &r.m, Result: &r.res}
	r.res.Binding, r.res.Allowed = -1, true
	r.res.Decisions, r.res.Flags = r.res.Decisions[:0], r.res.Flags[:0]
	if len(r.m.Hits) == 0 {
		o.Forbidden = r.m.Forbidden
		return o
	}
	r.req = limiter.Request{Hits: r.m.Hits, TTL: r.ttl}
	if err := r.eng.Decide(context.Background(), &r.req, &r.res); err != nil {
		o.Denied, o.Err = true, err
		return o
	}
	o.Denied = !r.res.Allowed
	if !o.Denied {
		// A request refused for its API key is refused once the limits
		// that need no key allowed it.
		o.Forbidden = r.m.Forbidden
		r.schedule(rec)
	}
	return o
}

// match turns rec into the request the gateway would have matched.
func (r *Replayer) match(rec *Record) {
	req := policy.Request{Method: rec.Method, Host: rec.Host, Path: rec.Path, ClientIP: rec.ClientIP,
		ClientKey: r.keys.key(rec.ClientIP), User: rec.User}
	if rec.APIKey != "" {
		req.APIKey = rec.APIKey
	} else {
		req.KeyName = rec.Key
	}
	if len(rec.Headers) > 0 {
		clear(r.hdr)
		for _, h := range rec.Headers {
			switch {
			case h.Name == r.keyHdr:
				if req.APIKey == "" && req.KeyName == "" {
					req.APIKey = h.Value
				}
			case h.Name == r.userHdr && r.userHdr != "":
				if req.User == "" {
					req.User = h.Value
				}
			}
			r.hdr[h.Name] = append(r.hdr[h.Name], h.Value)
		}
		req.Header = r.hdr
	}
	r.p.Match(&req, &r.m)
	r.ttl = 0
	for i, l := range r.m.Limits {
		h := &r.m.Hits[i]
		h.Reserve = l.Reserved()
		if c := l.Costs; c != nil {
			if h.Reserve {
				r.ttl = max(r.ttl, c.TTL)
			}
			if c.Estimate != nil {
				// The request told its estimate, which the log does not
				// hold: the limit's default estimate stands for it.
				h.Cost = min(max(c.Default, 1), h.Rule.Capacity())
			}
		}
	}
}

// completion is something to do when a request ends: give back its
// concurrency leases, charge its limits counted by outcome.
type completion struct {
	t           int64
	hits        []limiter.Hit
	actual      []int64 // nil: a release
	reservation uint64
	ttl         time.Duration
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

// schedule notes what the request owes when it ends: its concurrency
// leases, and the settle of its reservation (limits counted by outcome,
// and limits whose cost the response tells), as the gateway settles it.
func (r *Replayer) schedule(rec *Record) {
	end := rec.Time + int64(rec.Duration)
	var leases []limiter.Hit
	status := rec.Status
	if rec.Logged == LoggedDeny {
		// The log shows the request refused; had it passed, its status is
		// unknown: limits counted by outcome do not keep it.
		status = 0
	}
	for _, h := range r.m.Hits {
		if h.Lease != 0 && !h.Reserve {
			leases = append(leases, h)
		}
	}
	if leases != nil {
		r.pending.push(completion{t: end, hits: leases})
	}
	if !r.req.HasReserved() {
		return
	}
	hits := append([]limiter.Hit(nil), r.m.Hits...)
	actual := make([]int64, len(hits))
	for i, h := range hits {
		l := r.m.Limits[i]
		switch {
		case !h.Reserve:
		case l.Deferred():
			// Kept for the statuses the limit counts.
			if status != 0 && l.Counts(status) {
				actual[i] = h.Cost
			}
		default:
			// A cost the response told, which the log does not hold: the
			// estimate stands, for a request that succeeded.
			if status >= 200 && status <= 299 {
				actual[i] = h.Cost
			}
		}
	}
	r.pending.push(completion{t: end, hits: hits, actual: actual, reservation: r.req.Reservation, ttl: r.req.TTL})
}

// advance moves the clock to t, doing what requests that ended by then
// owe, and sweeps idle keys now and then.
func (r *Replayer) advance(t int64) {
	ctx := context.Background()
	for len(r.pending) > 0 && r.pending[0].t <= t {
		c := r.pending.pop()
		r.now = max(r.now, c.t)
		if c.actual == nil {
			_ = r.eng.Release(ctx, c.hits)
		} else {
			// A reservation held past its TTL has settled at its estimate
			// in the store already: the error says so, and changes nothing.
			_ = r.eng.Settle(ctx, &limiter.Request{Hits: c.hits, Reservation: c.reservation, TTL: c.ttl}, c.actual, &r.settled)
		}
	}
	r.now = max(r.now, t)
	if r.now-r.lastSweep >= sweepEvery {
		if r.lastSweep != 0 {
			r.peakKeys = max(r.peakKeys, r.store.Stats().Keys)
			r.store.Sweep()
		}
		r.lastSweep = r.now
	}
}

// PeakKeys is the largest number of keys the store held, as seen before
// each sweep.
func (r *Replayer) PeakKeys() int {
	return max(r.peakKeys, r.store.Stats().Keys)
}
