package gateway

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/maphash"
	"io"
	"math/bits"
	"net"
	"net/http"
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

// Overload control (a route's overload block, policy.Overload) is the
// last step of the admission flow before a request is forwarded: after
// its limits allowed it and after any wait in a leaky queue. It never
// applies to a look (explain), to a request decided in process (replay,
// whose log tells what happened), or to a request that reaches no
// upstream (a route without one, a refusal of the gateway's own).
//
// A controller per route holds the requests in flight against the cap
// (fixed, or algo.Adaptive), shares it among criticality tiers
// (algo.Tiers), and queues the requests that do not fit, one fair queue
// (algo.FairQueue) per tier: a freed slot goes to the most critical tier
// with a request waiting that fits under its ceiling, and within a tier to
// the tenants in turn, passing over a tenant that holds its share of the
// cap while another waits (below). A request that finds the queue full
// takes the place of the newest waiter of the least critical tier below
// its own that has one, which is shed; without one, of the newest waiter
// of the tenant with the most waiting in its tier, when that tenant has
// at least two more waiting than its own. A request that cannot wait is
// shed: 503 Service Unavailable with Retry-After.
//
// Share of the cap. Turns count requests, not the time they hold a place:
// a tenant whose requests the upstream answers in a second and another's
// in 50 ms, admitted in turn, would leave the first holding twenty places
// for each of the second's. So a route with a queue counts each tenant's
// requests in flight, and a freed place goes to a waiting tenant below
// its share, ⌈cap / tenants with requests in flight or waiting⌉, before one
// at or above it, whose waiter passed over goes to the end of its own
// line. It stays work-conserving: when every tenant waiting holds its
// share, the place goes to the next in turn, and a request that finds a
// place free and nobody waiting before it takes it whoever holds the rest.
// Tenants are counted by a seeded hash of what names them (no string is
// kept or made), so a collision, which nobody can aim at, merges two
// tenants' counts and nothing else.

// Shed reasons, as metrics and the access log name them.
const (
	ShedFull       = "full"        // over the cap, and no queue
	ShedQueueFull  = "queue_full"  // the route's queue holds its size
	ShedTenantFull = "tenant_full" // the tenant's backlog is full
	ShedTimeout    = "timeout"     // max_wait passed in the queue
	ShedClientGone = "client_gone" // the client left while queued
	ShedDisplaced  = "displaced"   // queued, it made room for a more critical request
)

// bodyUnavailable is the body of a shed request.
var bodyUnavailable = []byte(`{"message":"Service Unavailable"}` + "\n")

// OverloadStat is the state of one route's overload control, for
// metrics, the dashboard and explanations.
type OverloadStat struct {
	Route string
	// Limit is the cap on requests in flight now (fixed or learnt).
	Limit int
	// Inflight and Queued are the requests forwarded and not answered,
	// and those waiting for a place.
	Inflight, Queued int
	// Latency is the mean latency of the adaptive limit's last window,
	// and NoLoad its estimate of the upstream's latency without queueing
	// (0 for a fixed cap, or before the first window ends).
	Latency, NoLoad time.Duration
	// Adaptive reports that the limit is learnt.
	Adaptive bool
}

// OverloadObserver receives the events of overload control; an Observer
// that implements it (*metrics.Metrics does) is told them.
type OverloadObserver interface {
	// OverloadShed reports a request shed on route, of tier, from tenant
	// (a label the observer bounds), for reason (ShedFull ...).
	OverloadShed(route, tier, tenant, reason string)
}

// OverloadWatcher is an Observer that reads the state of the overload
// controllers when it needs it (on a scrape): New gives it the function
// that visits them.
type OverloadWatcher interface {
	WatchOverload(visit func(each func(route string, limit, inflight, queued int, latency, noLoad time.Duration)))
}

// waiter is a request waiting in a controller's queue.
type waiter struct {
	ch       chan struct{}                    // told when admitted or shed (buffered: never blocks)
	admitted bool                             // set under the controller's mu
	shed     string                           // why it left the queue unserved: displaced, or a reload's (under mu)
	level    int                              // in flight at its admission, itself included
	gen      uint64                           // the controller's useGen when it was admitted (under mu)
	tier     string                           // its tier's name
	tenant   string                           // its tenant, as the queue knows it
	th       uint64                           // its tenant's hash (tenantHash)
	seq      uint64                           // its arrival: the controller's arrivals when it was queued
	q        *algo.FairQueue[string, *waiter] // the queue it waits in (under mu)
	tk       algo.Ticket                      // its place in q (under mu)
}

// tenantUse is what one tenant holds on a route with a queue: requests in
// flight and requests waiting.
type tenantUse struct{ inflight, queued int32 }

// overloadCtl is the overload control of one route. A reload that
// changes the route's overload block retunes it (retune): the requests in
// flight and waiting stay counted under the new settings.
type overloadCtl struct {
	route string
	clock func() time.Time // Options.Now
	epoch time.Time        // instants are nanoseconds since, on clock
	seed  maphash.Seed     // of tenantHash, the controller's own
	// cur is o, for a request to read before it takes mu.
	cur atomic.Pointer[policy.Overload]

	mu       sync.Mutex       // guards what follows
	o        *policy.Overload // the settings in force
	ad       *algo.Adaptive
	inflight int
	queued   int
	queues   []*algo.FairQueue[string, *waiter] // by tier; nil without a queue
	last     int64                              // the latest instant given to ad and the queues
	arrivals uint64                             // the waiters queued so far (waiter.seq)
	used     bool                               // looked up since the last reload
	// lifted says a reload took the route's overload block away (lift):
	// a request matched before it that comes now is not capped either.
	lifted bool
	// use holds, with a queue, each tenant's requests in flight and
	// waiting, by tenantHash; a tenant with neither has no entry, so it
	// holds at most inflight + queued entries. useGen numbers the maps
	// use has been (a retune that adds or removes the queue makes a new
	// one), so that a request counted in one map is not taken off the
	// next.
	use    map[uint64]tenantUse
	useGen uint64
}

// countsTenants reports whether o's requests are told apart by
// tenantHash: with a queue (use) or an adaptive limit (its drops, by
// source).
func countsTenants(o *policy.Overload) bool { return o.Adaptive != nil || o.Queue != nil }

func newOverloadCtl(o *policy.Overload, route string, clock func() time.Time) *overloadCtl {
	c := &overloadCtl{o: o, route: route, clock: clock, epoch: clock(), seed: maphash.MakeSeed()}
	c.cur.Store(o)
	if o.Adaptive != nil {
		c.ad, _ = algo.NewAdaptive(*o.Adaptive) // validated
	}
	c.queues = newQueues(o)
	if o.Queue != nil {
		c.use, c.useGen = map[uint64]tenantUse{}, 1
	}
	return c
}

// newQueues returns the fair queues of o's tiers, nil without a queue.
func newQueues(o *policy.Overload) []*algo.FairQueue[string, *waiter] {
	if o.Queue == nil {
		return nil
	}
	qo := *o.Queue
	qo.MaxWait = 0 // each waiter keeps its own time
	qs := make([]*algo.FairQueue[string, *waiter], 0, len(o.Tiers))
	for range o.Tiers {
		q, _ := algo.NewFairQueue[string, *waiter](qo) // validated
		qs = append(qs, q)
	}
	return qs
}

// retune puts the settings o, of a policy loaded after the controller's,
// in force (mu held). What the route holds stays counted: its requests in
// flight keep their places under the new cap, which admits no more until
// fewer are in flight than it allows; the adaptive limit keeps what it
// learnt, also with new options (algo.Adaptive.Retune): its limit, within
// the new bounds, and its estimate of the no-load latency. The requests waiting keep their wait (and their own
// max_wait) in the new queues, in the tier of the same name (else the
// route's tier), and the order they arrived in, so the newest arrival is
// still the one a more critical request displaces; those the new queues
// cannot hold are shed as queue_full or tenant_full, and without a queue
// any that does not fit under its ceiling now is shed as full.
func (c *overloadCtl) retune(o *policy.Overload) {
	old := c.o
	c.o = o
	c.lifted = false
	c.cur.Store(o)
	switch a := o.Adaptive; {
	case a == nil:
		c.ad = nil
	case c.ad != nil && old.Adaptive != nil && *old.Adaptive == *a:
		// The same options: it keeps learning.
	case c.ad != nil:
		// New options: it keeps its limit (within the new bounds) and
		// its estimate of the no-load latency; starting again would
		// grow the limit by half a window past the knee it found.
		_ = c.ad.Retune(*a) // validated
	default:
		c.ad, _ = algo.NewAdaptive(*a) // validated
	}
	now := c.now()
	waiting := c.popAll(now) // pushed again in the order they arrived
	keepsUse := old.Queue != nil && o.Queue != nil
	for _, w := range waiting {
		c.queued--
		if keepsUse {
			c.changeUse(w.th, 0, -1)
		}
	}
	c.queues = newQueues(o)
	if !keepsUse {
		c.use = nil
		c.useGen++
		if o.Queue != nil {
			c.use = map[uint64]tenantUse{}
		}
	}
	for _, w := range waiting {
		t := o.TierIndex(w.tier)
		if t < 0 {
			t = o.Tier
		}
		if c.queues == nil {
			if o.Ceilings.Admit(t, c.capacity(), c.inflight) {
				c.inflight++
				w.admitted, w.level, w.gen = true, c.inflight, c.useGen
			} else {
				w.shed = ShedFull
			}
			w.ch <- struct{}{}
			continue
		}
		tk, err := c.queues[t].Push(w.tenant, w, now)
		if err != nil {
			w.shed = ShedQueueFull
			if errors.Is(err, algo.ErrTenantFull) {
				w.shed = ShedTenantFull
			}
			w.ch <- struct{}{}
			continue
		}
		w.q, w.tk = c.queues[t], tk
		c.queued++
		c.changeUse(w.th, 0, 1)
	}
	c.dispatch()
}

// popAll takes every request waiting out of the route's queues (popped
// in turn, tier by tier) and returns them in the order they arrived (mu
// held).
func (c *overloadCtl) popAll(now int64) []*waiter {
	var waiting []*waiter
	for _, q := range c.queues {
		for {
			w, ok := q.Pop(now, nil)
			if !ok {
				break
			}
			waiting = append(waiting, w)
		}
	}
	slices.SortFunc(waiting, func(a, b *waiter) int { return cmp.Compare(a.seq, b.seq) })
	return waiting
}

// lift lets every request waiting go on at once, in the order they
// arrived, after a reload that took the route's overload block away (or
// the route): nothing caps the route now, also for a request matched
// before the reload that comes later (from a leaky queue's wait). They,
// and the requests in flight, hold their places until they end (mu
// held).
func (c *overloadCtl) lift() {
	c.lifted = true
	if c.queued == 0 {
		return
	}
	for _, w := range c.popAll(c.now()) {
		c.queued--
		c.inflight++
		c.changeUse(w.th, 1, -1)
		w.admitted, w.level, w.gen = true, c.inflight, c.useGen
		w.ch <- struct{}{}
	}
}

// changeUse adds din requests in flight and dq waiting to tenant th's
// counts, forgetting a tenant left with neither (mu held, with a queue).
func (c *overloadCtl) changeUse(th uint64, din, dq int32) {
	u := c.use[th]
	u.inflight += din
	u.queued += dq
	if u.inflight <= 0 && u.queued <= 0 {
		delete(c.use, th)
		return
	}
	c.use[th] = u
}

// atShare reports whether tenant th holds its share of the cap in flight:
// ⌈cap / tenants with requests in flight or waiting⌉ (mu held, with a
// queue).
func (c *overloadCtl) atShare(th uint64) bool {
	n := len(c.use)
	if n <= 1 {
		return false
	}
	capacity := c.capacity()
	share := (capacity + n - 1) / n
	return int(c.use[th].inflight) >= max(share, 1)
}

// now returns the instant, never before one already used (called with mu
// held).
func (c *overloadCtl) now() int64 {
	n := int64(c.clock().Sub(c.epoch))
	if n < c.last {
		return c.last
	}
	c.last = n
	return n
}

// capacity returns the cap now (mu held).
func (c *overloadCtl) capacity() int {
	if c.ad != nil {
		return c.ad.Limit()
	}
	return c.o.Limit
}

// fits reports whether a request of tier may start now (mu held): its
// ceiling has room, and no request of its tier or a more critical one is
// waiting before it.
func (c *overloadCtl) fits(tier int) bool {
	for t := 0; t <= tier && t < len(c.queues); t++ {
		if c.queues[t].Len() > 0 {
			return false
		}
	}
	return c.o.Ceilings.Admit(tier, c.capacity(), c.inflight)
}

// dispatch gives free places to the requests waiting, most critical tier
// first, tenants in turn within a tier (mu held).
func (c *overloadCtl) dispatch() {
	if c.queued == 0 {
		return
	}
	now := c.now()
	for t := 0; t < len(c.queues); t++ {
		q := c.queues[t]
		passed := 0 // tenants passed over in a row, at their share
		for q.Len() > 0 && c.o.Ceilings.Admit(t, c.capacity(), c.inflight) {
			w, ok := q.Next(now, nil)
			if !ok {
				break
			}
			others := q.Tenants() - 1 // other tenants waiting in the tier
			if passed < others && c.atShare(w.th) {
				// Its turn passes while another tenant waits: it goes
				// to the end of its own line, keeping its age (the
				// newest arrival is still the one displace takes).
				// Once every other tenant waiting was passed over too,
				// the place goes to the next in turn (work-conserving).
				q.PassOver()
				passed++
				continue
			}
			q.Pop(now, nil) // w
			passed = 0
			c.queued--
			c.inflight++
			c.changeUse(w.th, 1, -1)
			w.admitted, w.level, w.gen = true, c.inflight, c.useGen
			w.ch <- struct{}{}
		}
	}
}

// displace makes room in a full queue for a request of tier: the newest
// waiter of the least critical tier below it that has one (the last to
// arrive: a waiter passed over at its share keeps its age) leaves the
// queue (its request is shed, ShedDisplaced). It reports false, changing
// nothing, when no tier below tier has a waiter (mu held).
func (c *overloadCtl) displace(tier int) bool {
	for t := len(c.queues) - 1; t > tier; t-- {
		if w, ok := c.queues[t].RemoveNewest(); ok {
			c.displaced(w)
			return true
		}
	}
	return false
}

// displaceLongest makes room in a full queue for a request of tenant in
// q, its tier's queue, when a tenant there has at least two more waiting
// than tenant: the newest waiter of the tenant with the most leaves the
// queue (its request is shed, ShedDisplaced), so that their backlogs come
// closer to level and never cross. Without it the tenants that filled the
// queue would keep it full under a flood, every other tenant's request
// refused at once. It reports false, changing nothing, otherwise (mu
// held).
func (c *overloadCtl) displaceLongest(q *algo.FairQueue[string, *waiter], tenant string) bool {
	if q.Longest() < q.TenantLen(tenant)+2 {
		return false
	}
	w, ok := q.RemoveNewestOfLongest()
	if ok {
		c.displaced(w)
	}
	return ok
}

// displaced tells waiter w, just taken out of its queue, that it was
// displaced (mu held).
func (c *overloadCtl) displaced(w *waiter) {
	c.queued--
	c.changeUse(w.th, 0, -1)
	w.shed = ShedDisplaced
	w.ch <- struct{}{}
}

// stat returns the controller's state.
func (c *overloadCtl) stat() OverloadStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := OverloadStat{Route: c.route, Limit: c.capacity(), Inflight: c.inflight, Queued: c.queued, Adaptive: c.ad != nil}
	if c.ad != nil {
		s.Latency, s.NoLoad = c.ad.Latency(), c.ad.NoLoadLatency()
	}
	return s
}

// overloadSet holds the controllers of a Gateway, one per route name, so
// that a reload keeps a route's controller: one that keeps the route's
// settings (policy.Overload.Key) keeps it as it is, and one that changes
// them retunes it (overloadCtl.retune), its requests in flight and waiting
// still counted. A reload (ForgetUpstreams) forgets those idle and unused
// since the reload before, so the set stays bounded by the routes of two
// policies; a gateway whose owner never calls it (package guard) is held
// to maxControllers by forgetting idle ones as new ones come.
type overloadSet struct {
	byPtr   sync.Map // *policy.Overload → *overloadCtl: the fast path
	mu      sync.Mutex
	byRoute map[string]*overloadCtl // guarded by mu
	ptrs    int                     // entries of byPtr, guarded by mu
}

// maxControllers bounds the controllers kept between reloads.
const maxControllers = 256

// controller returns the controller of a route's overload control.
func (g *Gateway) controller(o *policy.Overload, route string) *overloadCtl {
	if v, ok := g.ovl.byPtr.Load(o); ok {
		return v.(*overloadCtl)
	}
	g.ovl.mu.Lock()
	defer g.ovl.mu.Unlock()
	if g.ovl.byRoute == nil {
		g.ovl.byRoute = map[string]*overloadCtl{}
	}
	c := g.ovl.byRoute[route]
	if c == nil {
		if len(g.ovl.byRoute) >= maxControllers {
			for k, old := range g.ovl.byRoute {
				old.mu.Lock()
				idle := old.inflight == 0 && old.queued == 0
				old.mu.Unlock()
				if idle {
					delete(g.ovl.byRoute, k)
				}
			}
			// No policy's pointer may lead to a controller forgotten.
			g.ovl.byPtr.Clear()
			g.ovl.ptrs = 0
		}
		c = newOverloadCtl(o, route, g.now)
		g.ovl.byRoute[route] = c
	}
	c.mu.Lock()
	if c.o.Key != o.Key && o.Seq > c.o.Seq {
		c.retune(o)
	}
	c.used = true
	c.mu.Unlock()
	if g.ovl.ptrs >= 4*maxControllers {
		g.ovl.byPtr.Clear() // the policies of many reloads: start again
		g.ovl.ptrs = 0
	}
	g.ovl.byPtr.Store(o, c)
	g.ovl.ptrs++
	return c
}

// forgetOverload follows a reload: the next requests look their
// controllers up again, and those idle and not looked up since the last
// reload go. Under a PolicyMatcher the reload's policy is put in force at
// once for the requests waiting: a route whose overload block changed is
// retuned (as its next request would retune it), and one whose block (or
// the route itself) is gone has its waiters go on at once (lift), as
// nothing caps the route any more; without it they would wait for places
// under a cap no new request keeps, and be shed at max_wait while the
// route's new requests pass.
func (g *Gateway) forgetOverload() {
	var blocks map[string]*policy.Overload
	if pm, ok := g.matcher.(*PolicyMatcher); ok {
		if p := pm.src.Policy(); p != nil {
			blocks = map[string]*policy.Overload{}
			for _, r := range p.Routes() {
				if r.Overload != nil {
					blocks[r.Overload.Route] = r.Overload
				}
			}
		}
	}
	g.ovl.mu.Lock()
	defer g.ovl.mu.Unlock()
	g.ovl.byPtr.Clear()
	g.ovl.ptrs = 0
	for k, c := range g.ovl.byRoute {
		c.mu.Lock()
		if blocks != nil {
			switch o := blocks[k]; {
			case o == nil:
				c.lift()
			case c.o.Key != o.Key && o.Seq > c.o.Seq:
				c.retune(o)
			default:
				c.lifted = false // the block is back as it was
			}
		}
		idle := !c.used && c.inflight == 0 && c.queued == 0
		c.used = false
		c.mu.Unlock()
		if idle {
			delete(g.ovl.byRoute, k)
		}
	}
}

// OverloadStats calls each with the state of every route's overload
// control.
func (g *Gateway) OverloadStats(each func(OverloadStat)) {
	g.ovl.mu.Lock()
	cs := make([]*overloadCtl, 0, len(g.ovl.byRoute))
	for _, c := range g.ovl.byRoute {
		cs = append(cs, c)
	}
	g.ovl.mu.Unlock()
	for _, c := range cs {
		each(c.stat())
	}
}

// OverloadOf returns the state of route's overload control, false when it
// has none yet (no request reached it since the policy was loaded).
func (g *Gateway) OverloadOf(o *policy.Overload) (OverloadStat, bool) {
	if o == nil {
		return OverloadStat{}, false
	}
	if v, ok := g.ovl.byPtr.Load(o); ok {
		return v.(*overloadCtl).stat(), true
	}
	g.ovl.mu.Lock()
	c := g.ovl.byRoute[o.Route]
	g.ovl.mu.Unlock()
	if c == nil {
		return OverloadStat{}, false
	}
	return c.stat(), true
}

// overloadSlot is a request's place under its route's cap.
type overloadSlot struct {
	c *overloadCtl
	// o is the controller's settings the request was taken under (those
	// of a later policy than the request's, after a reload); tier indexes
	// its tiers.
	o      *policy.Overload
	tier   int
	level  int   // in flight at its admission, itself included
	start  int64 // when it was admitted (the controller's instants)
	status int   // the first final status of the answer, 0 before
	at     int64 // when the status came
	shed   string
	th     uint64 // its tenant's hash, on a route with a queue
	gen    uint64 // the controller's useGen when the place was counted in its use, 0 if not
	held   bool   // the slot is taken and must be released
	late   bool   // the status came after the client left
	// waited is how long, before the status came, the request waited
	// on its client's body on its way upstream (UpstreamBodyWaited); body
	// is the net/http engine's client body, which times its reads.
	waited int64
	body   *overloadBody
}

// tierOf returns the tier of the request: a trusted proxy's header, else
// its key's plan's, else the route's.
func tierOf(o *policy.Overload, st *Flow) int {
	h := ""
	if o.TierHeader != "" && st.m.PeerTrusted {
		h = st.view.header(o.TierHeader)
	}
	return o.TierOf(h, st.m.PlanTier)
}

// tenantOf returns the tenant of the request, as its route's overload
// control counts them ("" for a request without the part).
func tenantOf(o *policy.Overload, st *Flow) string {
	m := &st.m
	switch o.Tenant {
	case policy.TenantAPIKey:
		return keyTenant(m.KeyID)
	case policy.TenantPlan:
		return m.Plan
	case policy.TenantUser:
		return m.User
	case policy.TenantHeader:
		v := st.view.header(o.TenantField)
		if o.TenantSecret && v != "" {
			return secretTenant(v)
		}
		return v
	}
	if m.ClientKey != "" {
		return m.ClientKey
	}
	if m.ClientIP.IsValid() {
		return m.ClientIP.String()
	}
	return st.view.Peer.String()
}

// keyTenant returns the tenant an API key names: its name, or none ("")
// for an unknown key ("?" and its hash, policy.Match.KeyID), which a
// client can make up anew for each request on a route that does not
// require a key: such requests are the one anonymous tenant, as requests
// without a key are.
func keyTenant(keyID string) string {
	if strings.HasPrefix(keyID, "?") {
		return ""
	}
	return keyID
}

// secretTenant names the tenant whose field carries a credential by the
// value's SHA-256 (its first 8 bytes), so that the credential reaches no
// metric label, access log or explanation.
func secretTenant(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// tenantHash returns the hash of the tenant of the request that tenantOf
// names, under seed, without making a string.
func tenantHash(seed maphash.Seed, o *policy.Overload, st *Flow) uint64 {
	m := &st.m
	s := ""
	switch o.Tenant {
	case policy.TenantAPIKey:
		s = keyTenant(m.KeyID)
	case policy.TenantPlan:
		s = m.Plan
	case policy.TenantUser:
		s = m.User
	case policy.TenantHeader:
		s = st.view.header(o.TenantField)
	default:
		if m.ClientKey != "" {
			s = m.ClientKey
		} else {
			a := m.ClientIP
			if !a.IsValid() {
				a = st.view.Peer
			}
			b := a.As16()
			return maphash.Bytes(seed, b[:]) ^ 1 // apart from the strings'
		}
	}
	return maphash.String(seed, s)
}

// clientWatcher is an Exchange that can tell when its client leaves while
// its request waits; the others are watched through their Context.
type clientWatcher interface {
	WatchClient() (gone <-chan struct{}, stop func())
}

// pass hands the request on (handOn) once it has a place under its
// route's overload control, if the route has one; otherwise the request
// is shed, or its client left while it waited, and it reports false.
// decided reports that st.res holds the engine's verdict on the request's
// hits.
func (g *Gateway) pass(x Exchange, st *Flow, rec *Recorder, decided bool) (later bool) {
	if o := st.m.Overload; o != nil && !st.peek {
		lx, local := x.(*localExchange)
		switch {
		case local && lx.shed != "":
			// Decided in process, it takes no place under the cap: it is
			// shed as its log says.
			g.shedAsLogged(x, st, o, lx.shed)
		case !local && (!x.Proxies() || st.m.Upstream != nil):
			if g.admit(x, st, o) {
				return g.handOn(x, st, rec, decided)
			}
		default:
			return g.handOn(x, st, rec, decided)
		}
		if rec != nil {
			rec.noAnswer = true // no upstream answer began: the reservation goes back
		}
		return false
	}
	return g.handOn(x, st, rec, decided)
}

// shedAsLogged sheds a request decided in process (HandleOptions.Shed)
// as the gateway shed it: answered 503, or, when its client left while it
// waited (ShedClientGone), answered nothing; either way its charges are
// given back.
func (g *Gateway) shedAsLogged(x Exchange, st *Flow, o *policy.Overload, reason string) {
	st.ovl.o, st.ovl.tier = o, tierOf(o, st)
	if reason == ShedClientGone {
		g.leftQueue(x, st)
		return
	}
	g.shed(x, st, reason, false)
}

// admit takes a place for the request under its route's cap, waiting in
// the route's queue if it must and may. It returns false when the request
// was shed (answered 503) or its client left while it waited; a client
// seen gone when its wait ends left, whatever else ended the wait (it was
// given a place, displaced, or max_wait passed, at the same moment): it is
// answered nothing, a place it was given goes to the next waiter, and its
// charges are given back (leftQueue). It follows
// the settings the controller has in force, which after a reload may be
// a later policy's than the request's o.
func (g *Gateway) admit(x Exchange, st *Flow, o *policy.Overload) bool {
	c := g.controller(o, st.m.Route)
	s := &st.ovl
	s.c = c
	for {
		co := c.cur.Load()
		s.o, s.tier, s.th = co, tierOf(co, st), 0
		if countsTenants(co) {
			s.th = tenantHash(c.seed, co, st)
		}
		c.mu.Lock()
		if c.o == co {
			break
		}
		c.mu.Unlock() // retuned meanwhile: again, with its new settings
	}
	co := s.o
	if c.lifted || c.fits(s.tier) {
		c.inflight++
		if c.use != nil {
			c.changeUse(s.th, 1, 0)
			s.gen = c.useGen
		}
		s.level, s.held = c.inflight, true
		s.start = c.now()
		c.mu.Unlock()
		return true
	}
	if c.ad != nil {
		c.ad.Refused()
	}
	if c.queues == nil {
		c.mu.Unlock()
		g.shed(x, st, ShedFull, false)
		return false
	}
	// A request its tenant's backlog refuses is refused before it may
	// displace anyone: it would shed a waiter and take no place.
	tenant := tenantOf(co, st)
	q := c.queues[s.tier]
	if q.TenantLen(tenant) >= co.Queue.PerTenant {
		c.mu.Unlock()
		g.shed(x, st, ShedTenantFull, false)
		return false
	}
	if c.queued >= co.Queue.Total && !c.displace(s.tier) && !c.displaceLongest(q, tenant) {
		c.mu.Unlock()
		g.shed(x, st, ShedQueueFull, false)
		return false
	}
	c.arrivals++
	w := &waiter{ch: make(chan struct{}, 1), tier: co.Tiers[s.tier], tenant: strings.Clone(tenant), th: s.th, seq: c.arrivals}
	queued := c.now()
	tk, err := q.Push(w.tenant, w, queued)
	if err != nil {
		c.mu.Unlock()
		g.shed(x, st, ShedQueueFull, false)
		return false
	}
	w.q, w.tk = q, tk
	c.queued++
	c.changeUse(s.th, 0, 1)
	c.mu.Unlock()

	var gone <-chan struct{}
	stop := func() {}
	if cw, ok := x.(clientWatcher); ok {
		gone, stop = cw.WatchClient()
	} else {
		gone = x.Context().Done()
	}
	if g.waitHook != nil {
		g.waitHook(gone)
	}
	t := time.NewTimer(co.Queue.MaxWait)
	reason := ""
	select {
	case <-w.ch:
	case <-t.C:
		reason = ShedTimeout
	case <-gone:
		reason = ShedClientGone
	}
	t.Stop()
	stop()
	c.mu.Lock()
	if !w.admitted && w.shed == "" {
		if _, ok := w.q.Remove(w.tk); ok {
			c.queued--
			if c.use != nil {
				c.changeUse(s.th, 0, -1)
			}
		}
	}
	admitted := w.admitted
	if w.shed != "" && reason != ShedClientGone {
		reason = w.shed
	}
	if admitted && (reason == ShedClientGone || closed(gone)) {
		// Its client left as it was given its place: the place goes
		// to the next waiter, and it left, as one that left first.
		admitted, reason = false, ShedClientGone
		c.inflight--
		if c.use != nil && w.gen == c.useGen {
			c.changeUse(s.th, -1, 0)
		}
		c.dispatch()
	}
	if admitted {
		s.level, s.held, s.gen = w.level, true, w.gen
		s.start = c.now()
	}
	c.mu.Unlock()
	if !admitted && reason != ShedClientGone && closed(gone) {
		// Its client left as it was shed (displaced, at max_wait or by a
		// reload): it left, as one that left first did, answered
		// nothing and its charges given back.
		reason = ShedClientGone
	}
	switch {
	case admitted:
		g.admittedAfter(x, st, time.Duration(s.start-queued))
		return true
	case reason == ShedClientGone:
		g.leftQueue(x, st)
		return false
	}
	g.shed(x, st, reason, true)
	return false
}

// closed reports whether ch is closed (a nil ch never is).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// leftQueue gives back what a request whose client left while it waited
// for a place was charged, as a leaky queue's leave does: the rate
// algorithms' charges are refunded, a reservation is given back in full.
func (g *Gateway) leftQueue(x Exchange, st *Flow) {
	st.ovl.shed = ShedClientGone
	g.overloadShed(st, ShedClientGone)
	if len(st.m.Hits) == 0 || st.err != nil || !st.res.Allowed {
		return
	}
	ctx := x.Context()
	g.refund(ctx, st, "gateway: refund of a request that left the overload queue")
	if st.reserved {
		st.reserved = false
		g.cancelReservation(ctx, st)
	}
}

// overloadShed counts a shed request.
func (g *Gateway) overloadShed(st *Flow, reason string) {
	if g.oobs == nil {
		return
	}
	o := st.ovl.o
	// The tenant may live in the engine's request buffer: the observer
	// may keep it.
	g.oobs.OverloadShed(st.m.Route, o.Tiers[st.ovl.tier], strings.Clone(tenantOf(o, st)), reason)
}

// shed answers 503 Service Unavailable with Retry-After: the route's
// max_wait in whole seconds, at least one. The request is refused by
// capacity every client shares, which another client's flood can take:
// what it was charged is given back before it is answered, as for a
// client that left the queue (the rate algorithms' charges refunded; a
// reservation goes back in full once the request ends), so that a flood
// that sheds a client's requests does not spend that client's limits.
// Its RateLimit fields say what its limits hold once that is back: those
// of a request shed at once are its charge's decisions with the charge
// given back (refunded); a request that waited in the queue (waited) is
// answered from a fresh look at its limits (lookAgain), since the window
// or period that counted its charge may have ended while it waited.
func (g *Gateway) shed(x Exchange, st *Flow, reason string, waited bool) {
	st.ovl.shed = reason
	g.overloadShed(st, reason)
	if len(st.m.Hits) > 0 && st.err == nil && st.res.Allowed {
		if g.refund(x.Context(), st, "gateway: refund of a request shed by overload control") == nil {
			// Its fields say what its limits hold now.
			if !waited || !g.lookAgain(x.Context(), st, func(int) bool { return true }) {
				refunded(st)
			}
			st.out = g.render(st, false)
		}
	}
	g.obs.Rejected(limiter.FrontGateway, "", http.StatusServiceUnavailable)
	secs := int64(1)
	if w := st.ovl.o.MaxWait(); w > time.Second {
		secs = int64((w + time.Second - 1) / time.Second)
	}
	st.out = append(st.out, fields.Field{Name: fields.NameRetryAfter, Value: fields.Itoa(secs)})
	x.SetFields(st.out)
	x.Answer(http.StatusServiceUnavailable, bodyUnavailable, false)
}

// givenBack reports whether hit i of st is one whose charge refund gave
// back and whose fields say so: a charge (not a reservation, a check, a
// shadow limit, one decided by a failure policy, or a group's denial) of
// a rate algorithm that refunds (a bucket, GCRA), or of a window, sliding
// log or quota whose decision says where it was counted (Decision.Mark).
func givenBack(st *Flow, i int) bool {
	res := &st.res
	h := &st.m.Hits[i]
	if i >= len(res.Decisions) || i >= len(res.Flags) || h.Reserve || h.Check || !res.Decisions[i].Allowed ||
		res.Flags[i]&(limiter.Shadow|limiter.Degraded) != 0 {
		return false
	}
	if res.Decisions[i].Mark != 0 {
		return true
	}
	return rateKind(h.Rule.Limit())
}

// rateKind reports whether l is of a rate algorithm that refunds (a
// bucket, GCRA, a leaky bucket), with a rate.
func rateKind(l floodgate.Limit) bool {
	return l.Algorithm.Traits().Refundable && l.Rate > 0 && l.Per > 0
}

// refunded makes st's decisions say what its limits hold once the charges
// refund gave back are back, for the fields of its answer (givenBack
// names the hits; the others are left as they were).
func refunded(st *Flow) {
	for i := range st.m.Hits {
		if givenBack(st, i) {
			d := &st.res.Decisions[i]
			giveBack(d, &st.m.Hits[i], d.Mark != 0)
		}
	}
}

// giveBack makes d, a decision that charged h (or a look that would
// have), say what h's limit holds without that charge: a window's, a
// log's or a quota's (counted) has the cost back in its remaining units,
// never above its capacity, its reset as it was; a refundable rate
// algorithm's has the cost back in its remaining units and is full that
// many intervals sooner (rounded down, so that its t never comes early).
func giveBack(d *floodgate.Decision, h *limiter.Hit, counted bool) {
	d.Remaining = min(d.Limit, d.Remaining+h.Cost)
	if counted {
		return
	}
	l := h.Rule.Limit()
	hi, lo := bits.Mul64(uint64(h.Cost), uint64(l.Per))
	if hi >= uint64(l.Rate) {
		d.ResetAfter = 0
		return
	}
	back, _ := bits.Div64(hi, lo, uint64(l.Rate))
	if back >= uint64(d.ResetAfter) {
		d.ResetAfter = 0
	} else {
		d.ResetAfter -= time.Duration(back)
	}
}

// lookAgain makes st's decisions of the hits pick names, among those
// whose charges refund gives back (givenBack), say what their limits hold
// now, from one look at them that charges nothing. It serves two answers.
// A request shed after it waited in the queue (pick: every such hit): the
// window or quota period that counted its charge may have ended while it
// waited (the refund then gave nothing back to the one in force), and a
// bucket refilled. A request admitted after it waited, or whose place in
// a leaky queue came (aged), for the hits whose charge no longer weighs
// on their limit: the window, log entry or quota period that counted it
// has ended, or the bucket drained it. In
// both the limit as it stands holds none of the request's charge, so a
// look that allows, which says what the limit would hold with the
// request's cost charged once more, gets that cost back (giveBack); one
// that refuses says what the limit holds. It reports false, changing
// nothing, when the store could not be looked at (an error, or failure
// policies decided).
func (g *Gateway) lookAgain(ctx context.Context, st *Flow, pick func(i int) bool) bool {
	hits := st.leases[len(st.leases):] // scratch, as refund's
	defer func() { clear(hits) }()     // keep no rule alive
	for i := range st.m.Hits {
		if givenBack(st, i) && pick(i) {
			h := st.m.Hits[i]
			h.Mark = 0
			hits = append(hits, h)
		}
	}
	if len(hits) == 0 {
		return true
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.relTO)
	err := g.engine.Decide(rctx, &limiter.Request{Front: limiter.FrontGateway, Peek: true, Hits: hits}, &st.look)
	cancel()
	if err != nil || st.look.Degraded != limiter.NotDegraded || len(st.look.Decisions) != len(hits) {
		g.log.Warn("gateway: look at the limits of a request that waited", "err", err, "degraded", st.look.Degraded)
		return false
	}
	k := 0
	for i := range st.m.Hits {
		if !givenBack(st, i) || !pick(i) {
			continue
		}
		d, now := &st.res.Decisions[i], st.look.Decisions[k]
		if now.Allowed {
			giveBack(&now, &hits[k], d.Mark != 0)
		}
		d.Limit, d.Remaining, d.ResetAfter = now.Limit, now.Remaining, now.ResetAfter
		k++
	}
	return true
}

// admittedAfter makes the RateLimit fields of a request admitted after it
// waited in the queue for waited (on the controller's clock) say what its
// limits hold as it leaves the queue (aged), in place of those of its
// arrival, before it goes upstream. A request admitted at once keeps the
// fields it has and pays nothing more.
func (g *Gateway) admittedAfter(x Exchange, st *Flow, waited time.Duration) {
	if waited <= 0 || len(st.m.Hits) == 0 || st.err != nil || !st.res.Allowed {
		return
	}
	g.aged(x.Context(), st, waited)
	st.out = g.render(st, false)
	x.SetFields(st.out)
}

// aged makes st's decisions, made waited ago, say what their limits hold
// now, with the least the store can be asked: waited is taken off every
// decision's ResetAfter (its reset did not move; the answer's t counts
// from now), never below zero, and a bucket's remaining units are those
// it has refilled to meanwhile (elapsed). Only when the wait reached the
// reset of a hit that charged (givenBack) is its limit looked at again,
// in one look for all such hits (lookAgain): the window or quota period
// that counted the charge has ended, the log entry has expired or the
// bucket is full again, so what the decision says is of a state gone,
// and others may have spent since. The charge stays (the request goes
// ahead), but it sits in that ended window or drained bucket, not in the
// state in force: the look's remaining units get the request's cost back,
// as a shed request's do. A look the store does not answer leaves the
// decisions as worked out.
func (g *Gateway) aged(ctx context.Context, st *Flow, waited time.Duration) {
	res := &st.res
	look := false
	for i := range min(len(res.Decisions), len(res.Flags), len(st.m.Hits)) {
		d := &res.Decisions[i]
		if d.ResetAfter <= 0 {
			continue
		}
		d.ResetAfter = max(d.ResetAfter-waited, 0)
		if res.Flags[i]&limiter.Degraded == 0 {
			elapsed(d, &st.m.Hits[i])
		}
		look = look || d.ResetAfter == 0 && givenBack(st, i)
	}
	if look {
		g.lookAgain(ctx, st, func(i int) bool { return res.Decisions[i].ResetAfter == 0 })
	}
}

// elapsed makes d, a decision of h's limit whose ResetAfter was moved
// on to now, say the units a rate algorithm's (a bucket, GCRA, a leaky
// bucket) has now: one is back every interval, so the limit, full at
// its reset, lacks as many units as intervals are left to it (rounded
// up, so that no unit is said to be there early), never fewer than the
// decision said. Other algorithms' decisions are left as they are.
func elapsed(d *floodgate.Decision, h *limiter.Hit) {
	l := h.Rule.Limit()
	if !rateKind(l) || d.Remaining >= d.Limit {
		return
	}
	hi, lo := bits.Mul64(uint64(d.ResetAfter), uint64(l.Rate))
	if hi >= uint64(l.Per) {
		return
	}
	lack, r := bits.Div64(hi, lo, uint64(l.Per))
	if r > 0 {
		lack++
	}
	if lack < uint64(d.Limit) {
		d.Remaining = max(d.Remaining, d.Limit-int64(lack))
	}
}

// UpstreamStatus tells the flow the status line of the upstream's answer
// as it arrives, or the 502 or 504 the engine answers for an upstream
// that could not be reached or timed out: the adaptive limit learns the
// upstream's latency from it. The net/http engine tells it itself; the
// edge engine calls it. A 101 Switching Protocols is an upgrade's status
// line: what follows is the tunnel, no latency of the upstream's.
func (f *Flow) UpstreamStatus(status int) {
	s := &f.ovl
	if !s.held || s.status != 0 || status < 200 && status != http.StatusSwitchingProtocols {
		return
	}
	s.status = status
	s.c.mu.Lock()
	s.at = s.c.now()
	if s.body != nil {
		s.waited += s.body.wait.Load()
	}
	s.c.mu.Unlock()
}

// UpstreamBodyWaited tells the flow how long, sending the request
// upstream, it waited on its client's body (its reads of it): the
// adaptive limit leaves that time out of the latency, so that a client
// that sends its body slowly does not read as a slow upstream (an
// upstream that is slow to take the body still shows: waiting on it is
// not waiting on the client). The net/http engine times the reads itself
// (overloadBody); the edge engine calls it before the status comes.
func (f *Flow) UpstreamBodyWaited(d time.Duration) {
	s := &f.ovl
	if !s.held || s.status != 0 || d <= 0 {
		return
	}
	s.c.mu.Lock()
	s.waited += int64(d)
	s.c.mu.Unlock()
}

// overloadBody is the client's body of a request under overload control
// on the net/http engine: it adds up how long its reads wait on the
// client, for the adaptive limit (UpstreamBodyWaited). The upstream's
// transport reads it, and may go on after the handler returned, so it
// keeps what it counts itself.
type overloadBody struct {
	io.ReadCloser
	wait atomic.Int64 // ns its reads took
}

func (b *overloadBody) Read(p []byte) (int, error) {
	t := time.Now()
	n, err := b.ReadCloser.Read(p)
	b.wait.Add(int64(time.Since(t)))
	return n, err
}

// releaseOverload gives the request's place back and teaches the
// adaptive limit its outcome: the latency from forwarding to the
// upstream's status line, less the time spent waiting on the client's
// body; dropped for a 502, 503 or 504 (from the
// upstream, or the gateway's for an upstream it could not reach);
// ignored when the client left before the status came: no answer came,
// or the one that came followed the client's leaving (a handler that
// answers its context's end, with a 503 or at once, says nothing of the
// upstream's load).
func (g *Gateway) releaseOverload(x Exchange, st *Flow) {
	s := &st.ovl
	if !s.held {
		return
	}
	outcome := algo.OutcomeOK
	switch {
	case s.late || s.status == 0 && x.Context().Err() != nil:
		outcome = algo.OutcomeIgnored
	case s.status == http.StatusBadGateway || s.status == http.StatusServiceUnavailable || s.status == http.StatusGatewayTimeout:
		outcome = algo.OutcomeDropped
	}
	g.releaseOverloadAs(st, outcome)
}

// releaseOverloadAs gives st's place under overload control back, telling
// the adaptive limit the request's outcome.
func (g *Gateway) releaseOverloadAs(st *Flow, outcome algo.Outcome) {
	s := &st.ovl
	if !s.held {
		return
	}
	s.held = false
	c := s.c
	c.mu.Lock()
	now := c.now()
	c.inflight--
	if c.use != nil && s.gen == c.useGen {
		c.changeUse(s.th, -1, 0)
	}
	if c.ad != nil {
		end, waited := now, s.waited
		if s.status != 0 {
			end = max(s.at, s.start)
		} else if s.body != nil {
			waited += s.body.wait.Load()
		}
		// The time the request waited on its client's body is the
		// client's pace, not the upstream's load: it is left out.
		_ = c.ad.SampleFrom(now, time.Duration(max(end-s.start-waited, 0)), s.level, outcome, s.th)
	}
	c.dispatch()
	c.mu.Unlock()
}

// overloadWriter is the net/http engine's response writer of a request
// under overload control: it notes when the status line comes.
type overloadWriter struct {
	http.ResponseWriter
	f *Flow
}

func (w *overloadWriter) WriteHeader(code int) {
	w.status(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *overloadWriter) Write(b []byte) (int, error) {
	w.status(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush passes flushes through for streamed responses.
func (w *overloadWriter) Flush() {
	w.status(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection over: the reverse proxy takes it once the
// upstream accepted an upgrade with 101 Switching Protocols, before it
// relays the 101 (the middleware's handler takes it to answer one
// itself). That is the answer's status line: the tunnel after it, however
// long its client or the upstream keeps it open, is no latency of the
// upstream's, and the place is held until it ends.
func (w *overloadWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.status(http.StatusSwitchingProtocols)
	}
	return c, brw, err
}

// status tells the flow the answer's status, noting whether its client
// had left by then (its request's context is done).
func (w *overloadWriter) status(code int) {
	s := &w.f.ovl
	if s.held && s.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		if r := w.f.nh.r; r != nil && r.Context().Err() != nil {
			s.late = true
		}
	}
	w.f.UpstreamStatus(code)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *overloadWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// upstreamFailed passes the upstream's failure on (markFailed).
func (w *overloadWriter) upstreamFailed() { markFailed(w.ResponseWriter) }
