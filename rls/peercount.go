package rls

import (
	"context"
	mrand "math/rand/v2"
	"strconv"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/floodgate/floodgate"
)

// PeerCounter keeps counters as envoyproxy/ratelimit keeps them in Redis,
// so that while both serve from one Redis (a rolling migration) they count
// on the same keys. A counter's key is CACHE_KEY_PREFIX, the domain, then
// each entry's key and value, each followed by '_', and the start of its
// window in Unix seconds (the unit's length times the number of whole
// units since the epoch, on this machine's clock, as there):
//
//	shop_client_c1_1796179020
//
// (with share_threshold, an entry matched by a wildcard contributes the
// wildcard's pattern instead of its value). Its value is the number of
// hits, a Redis integer.
type PeerCounter interface {
	// Count adds hits[i] to the counter keys[i] (INCRBY; 0 reads it),
	// sets its expiry to ttl[i] seconds (EXPIRE) and puts the count after
	// into out[i]; perSecond[i] says it is the counter of a per-second
	// limit (REDIS_PERSECOND's Redis, when there is one). The counters are
	// counted in order, so that a read after a charge of the same counter
	// sees it.
	Count(ctx context.Context, keys []string, hits []uint64, ttl []int64, perSecond []bool, out []int64) error
}

// peerKey is the start of a counter's key in envoyproxy/ratelimit's
// format, without the prefix and the window.
func peerKey(domain string, ents []*rlv3.RateLimitDescriptor_Entry, trail []step) string {
	n := len(domain) + 1
	for _, e := range ents {
		n += len(e.GetKey()) + len(e.GetValue()) + 2
	}
	b := make([]byte, 0, n)
	b = append(b, domain...)
	b = append(b, '_')
	for i, e := range ents {
		v := e.GetValue()
		if i < len(trail) && trail[i].wild && trail[i].nd.shareThreshold {
			v = trail[i].nd.value
		}
		b = append(b, e.GetKey()...)
		b = append(b, '_')
		b = append(b, v...)
		b = append(b, '_')
	}
	return string(b)
}

// PeerKeyOptions are the parts of a counter's key and expiry that
// envoyproxy/ratelimit's settings choose.
type PeerKeyOptions struct {
	// Prefix starts every key (CACHE_KEY_PREFIX).
	Prefix string
	// Jitter, when positive, adds to each expiry a random number of
	// seconds below it (EXPIRATION_JITTER_MAX_SECONDS).
	Jitter int64
	// Rand returns a number in [0, n); nil means math/rand/v2.
	Rand func(n int64) int64
}

func (o PeerKeyOptions) rand(n int64) int64 {
	if o.Rand != nil {
		return o.Rand(n)
	}
	return mrand.Int64N(n)
}

// countPeer counts the request's limited descriptors with
// Options.PeerCounter and works out their counts, as decideCompat does
// from the engine's decisions.
func (s *Service) countPeer(ctx context.Context, app []applied, sc *scratch) error {
	now := time.Now()
	sec := now.Unix()
	n := len(sc.hits)
	pc := &sc.peer
	pc.reset(n)
	ko := s.opts.PeerKeys
	for i := range app {
		a := &app[i]
		if a.hit < 0 {
			continue
		}
		div := a.rl.unit.seconds()
		start := sec / div * div
		ttl := div
		if ko.Jitter > 0 {
			ttl += ko.rand(ko.Jitter)
		}
		pc.keys = append(pc.keys, ko.Prefix+a.peer+strconv.FormatInt(start, 10))
		pc.hits = append(pc.hits, uint64(a.cost))
		pc.ttl = append(pc.ttl, ttl)
		pc.perSecond = append(pc.perSecond, a.rl.unit == Second)
		pc.ends = append(pc.ends, time.Unix(start+div, 0).Sub(now))
	}
	pc.out = pc.out[:n]
	if err := s.opts.PeerCounter.Count(ctx, pc.keys, pc.hits, pc.ttl, pc.perSecond, pc.out); err != nil {
		return err
	}
	for i := range app {
		a := &app[i]
		if a.hit < 0 {
			continue
		}
		rpu := int64(a.rl.perUnit)
		after := pc.out[a.hit]
		a.d = floodgate.Decision{Allowed: true, Limit: rpu, ResetAfter: pc.ends[a.hit]}
		a.threshold = rpu
		a.before, a.after, a.over = after-a.cost, after, after > rpu
	}
	return nil
}

// peerScratch holds countPeer's arguments between requests.
type peerScratch struct {
	keys      []string
	hits      []uint64
	ttl       []int64
	perSecond []bool
	ends      []time.Duration
	out       []int64
}

func (p *peerScratch) reset(n int) {
	clear(p.keys)
	p.keys, p.hits, p.ttl, p.perSecond, p.ends = p.keys[:0], p.hits[:0], p.ttl[:0], p.perSecond[:0], p.ends[:0]
	if cap(p.out) < n {
		p.out = make([]int64, n)
	}
}
