package limiter

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
)

// Deny cache defaults.
const (
	DefaultDenyCacheEntries = 65536
	DefaultDenyCacheMaxAge  = time.Second
)

// DenyCacheOptions configure the deny cache: denials the store gave that
// are certain to hold until a known instant, answered here without a
// round trip until then.
//
// A key whose store answer says it has no unit left (Remaining 0) cannot
// allow any cost until the instant T at which one unit is back with no
// other traffic: other requests, from this instance or any other, only
// take more. So until T the store would deny every request of that key,
// and the cache answers for it. T is the denial's RetryAfter for a cost of
// 1; for a fixed window it is the window's end, whatever the cost (and a
// window filled by an allowed request is known full until its end too).
// The cache answers a cost for which it knows the wait: 1, the cost of the
// denial it learnt from, and any cost for a fixed window. A hit whose
// counter an earlier hit of its request names teaches it nothing: the
// store's answer for it counts the earlier hits' units, which a refused
// request never took. Concurrency
// limits, whose units come back when a holder releases them, leased rules,
// whose units come back when a lease ends, and shadow rules are never
// cached.
//
// A request is answered from the cache only when every one of its hits is
// denied there; otherwise the store decides it (it reports the other hits'
// units too, which the cache does not know). A cached answer is a denial
// with Remaining 0 and the RetryAfter and ResetAfter the store would give
// at that instant if no other request had charged the key since (with other
// traffic, the store's waits would be longer); the instants are taken from
// this machine's clock, placed by the moment the store call was sent, so
// they may be shorter than the store's by up to that call's round trip,
// and never longer. The decision is flagged Cached.
//
// What the cache cannot see: units given back by another instance
// (Refund of a queued request, a reservation it settles below its
// estimate, or a Cluster's refund of a request denied in another slot) and
// state the store lost (a flush, a restart without persistence, an
// eviction). Either lets the store allow before T; the cache keeps denying
// for at most MaxAge after it learnt the denial. Units this limiter gives
// back (Refund, Settle) drop its entries at once.
type DenyCacheOptions struct {
	// Entries bounds the keys kept (0: DefaultDenyCacheEntries; negative:
	// no cache). Past it, expired entries and then arbitrary ones make
	// room (Stats.DenyCacheEvictions).
	Entries int
	// MaxAge bounds how long an entry is used after the store's answer it
	// came from (0: DefaultDenyCacheMaxAge).
	MaxAge time.Duration
}

// denyShards is the number of independently locked parts of the cache.
const denyShards = 16

// denyKey names a rule's counter for a subject.
type denyKey struct {
	rule *Rule
	key  string
}

// denyEntry is a counter known to have no unit left until t1. Instants
// are ns on the limiter's clock (Options.Now), since the limiter started.
type denyEntry struct {
	t1      int64 // one unit is back (no other traffic)
	tc      int64 // cost units are back
	cost    int64 // the cost tc is for
	reset   int64 // the counter is back to full or idle
	expires int64 // min(t1, learnt + MaxAge)
	anyCost bool  // tc holds for every cost (a fixed window)
}

type denyShard struct {
	mu sync.Mutex // guards m
	m  map[denyKey]denyEntry
	_  [40]byte
}

// denyCache is the cache; nil when off.
type denyCache struct {
	maxAge   int64
	perShard int
	shards   [denyShards]denyShard
	seed     uint64

	entries   atomic.Int64
	hits      atomic.Uint64
	evictions atomic.Uint64
}

func newDenyCache(o DenyCacheOptions) *denyCache {
	if o.Entries < 0 {
		return nil
	}
	n := o.Entries
	if n == 0 {
		n = DefaultDenyCacheEntries
	}
	age := o.MaxAge
	if age <= 0 {
		age = DefaultDenyCacheMaxAge
	}
	c := &denyCache{maxAge: int64(age), perShard: max(n/denyShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[denyKey]denyEntry)
	}
	return c
}

// shard picks the shard of a key (FNV-1a of the subject).
func (c *denyCache) shard(k *denyKey) *denyShard {
	h := uint32(2166136261)
	for i := 0; i < len(k.key); i++ {
		h = (h ^ uint32(k.key[i])) * 16777619
	}
	return &c.shards[h%denyShards]
}

// cacheable reports whether the cache may hold a hit's counter: not a
// shadow rule, not a concurrency limit, not a leased rule (whose units
// other instances give back).
func cacheable(h *Hit) bool {
	return !h.Rule.Shadow() && h.Rule.Algorithm().Kind() != floodgate.KindConcurrency &&
		h.Rule.Consistency() != floodgate.Leased
}

// decide answers the hits from the cache at instant now when every one of
// them is denied there, writing the decisions into r. It reports whether
// it did.
func (c *denyCache) decide(now int64, hits []Hit, r *Result) bool {
	if c.entries.Load() == 0 {
		return false
	}
	for i := range hits {
		if !c.lookup(now, &hits[i], &r.Decisions[i]) {
			// Undo what was written: r is as reset for the store.
			clear(r.Decisions[:i])
			return false
		}
	}
	for i := range hits {
		r.Flags[i] |= Cached
	}
	c.hits.Add(1)
	return true
}

// lookup writes into d the cache's denial of h at instant now, and reports
// whether it has one.
func (c *denyCache) lookup(now int64, h *Hit, d *floodgate.Decision) bool {
	if !cacheable(h) {
		return false
	}
	k := denyKey{h.Rule, h.Key}
	s := c.shard(&k)
	s.mu.Lock()
	e, ok := s.m[k]
	s.mu.Unlock()
	if !ok || now >= e.expires {
		return false
	}
	var until int64
	switch {
	case e.anyCost || h.Cost == e.cost:
		until = e.tc
	case h.Cost == 1:
		until = e.t1
	default:
		return false
	}
	*d = floodgate.Decision{Limit: h.Rule.Capacity(),
		RetryAfter: time.Duration(until - now), ResetAfter: time.Duration(max(e.reset-now, 0))}
	return true
}

// learn keeps what the store's answers out to hits say about counters with
// no unit left; sent is when the call was sent (on the limiter's clock).
func (c *denyCache) learn(sent int64, op storeOp, hits []Hit, out []floodgate.Decision) {
	charged := op == opCharge || op == opReserve
	for i := range hits {
		if !out[i].Allowed && !hits[i].Rule.Shadow() {
			charged = false
		}
	}
	for i := range hits {
		h, d := &hits[i], &out[i]
		if d.Remaining != 0 || !cacheable(h) || countedBefore(hits[:i], h) {
			continue
		}
		fixed := h.Rule.Algorithm() == floodgate.FixedWindow
		var e denyEntry
		switch {
		case !d.Allowed && (fixed || h.Cost == 1):
			t := sent + int64(d.RetryAfter)
			e = denyEntry{t1: t, tc: t, cost: h.Cost, reset: sent + int64(d.ResetAfter), anyCost: fixed}
		case d.Allowed && charged && fixed && !h.Check:
			// Filled by this request: full until the window ends.
			t := sent + int64(d.ResetAfter)
			e = denyEntry{t1: t, tc: t, cost: 1, reset: t, anyCost: true}
		default:
			continue
		}
		e.expires = min(e.t1, sent+c.maxAge)
		if e.expires <= sent {
			continue
		}
		c.put(denyKey{h.Rule, h.Key}, e, sent)
	}
}

// countedBefore reports whether a hit of earlier names h's counter. The
// store decides a request's hits in order, so a later hit on a counter
// sees the units the earlier ones would take: when the request is refused
// they were never taken, and the later hit's "nothing left" is not the
// counter's.
func countedBefore(earlier []Hit, h *Hit) bool {
	for j := range earlier {
		if earlier[j].Key == h.Key && (earlier[j].Rule == h.Rule || earlier[j].Rule.ID() == h.Rule.ID()) {
			return true
		}
	}
	return false
}

// put stores an entry, making room in its shard if needed.
func (c *denyCache) put(k denyKey, e denyEntry, now int64) {
	s := c.shard(&k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; !ok && len(s.m) >= c.perShard {
		// Drop the expired entries among the first few, else one of them.
		var victim denyKey
		found, n := false, 0
		for old, oe := range s.m {
			if oe.expires <= now {
				delete(s.m, old)
				c.entries.Add(-1)
			} else if !found {
				victim, found = old, true
			}
			if n++; n == 8 {
				break
			}
		}
		if len(s.m) >= c.perShard && found {
			delete(s.m, victim)
			c.entries.Add(-1)
			c.evictions.Add(1)
		}
	}
	if _, ok := s.m[k]; !ok {
		c.entries.Add(1)
	}
	s.m[k] = e
}

// forget drops the entries of hits, whose units this limiter gives back.
func (c *denyCache) forget(hits []Hit) {
	if c.entries.Load() == 0 {
		return
	}
	for i := range hits {
		k := denyKey{hits[i].Rule, hits[i].Key}
		s := c.shard(&k)
		s.mu.Lock()
		if _, ok := s.m[k]; ok {
			delete(s.m, k)
			c.entries.Add(-1)
		}
		s.mu.Unlock()
	}
}
