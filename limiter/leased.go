package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/floodgate/floodgate"
)

// Leased consistency defaults.
const (
	DefaultLeaseLifetime = 100 * time.Millisecond
	DefaultLeaseShare    = 4
	DefaultLeasedKeys    = 4096
)

// LeaseOptions configure the rules kept with Leased consistency.
//
// An instance takes a lease of units from the store for a leased rule's
// key (Leaser) and spends it on its own requests, without a store call,
// until the lease runs out or its Lifetime passes; then the next request
// gives back what is left and takes a new lease in the same store call.
// The size of a lease follows the key's rate on this instance: the units
// it spent during the previous lease, scaled to one Lifetime, at least the
// request's cost and at most the rule's capacity divided by Share times
// the number of instances (Options.Instances or InstancesFunc). A lease
// is granted only when the key has that many units; otherwise the
// request takes just its own cost, as an exact decision would, so the
// last units of a key are never held in leases; for one Lifetime after
// that, requests of the key take just their cost each, in parallel, as
// exact requests do, before a lease is asked for again.
//
// The bound on over-admission, for K instances, a lease size of at most
// N = capacity / (Share·K) units and a lifetime L:
//
//   - token bucket, GCRA and leaky bucket at Rate per second: over any
//     span of time, at most min(Rate·L, K·N) units more than the exact
//     limit would admit, because every unit spent was granted by the
//     store at most L earlier (a unit is spent at most L after the store
//     counted it);
//   - fixed window: none. A lease ends no later than its window (by the
//     instant the store answered at, which is after the call was sent),
//     so every unit is spent in the window that counted it.
//
// The other way, units held in a lease are not available to the other
// instances: a request elsewhere may be denied while up to K·N units wait
// in leases, for at most L (and at most until the window ends). Units
// left in a lease whose key sees no further request stay taken until the
// key refills or its window ends; ReturnLeases gives them back (on
// shutdown, say). While the store fails, an instance goes on spending the
// leases it holds; then each hit follows its failure policy.
//
// Leased hits take the lease path in charges only; peeks, reservations,
// refunds and the hits of other rules are exact. A request's hits are
// still all or nothing: the units a request took from leases go back into
// them when another of its hits denies, unless the lease was renewed
// meanwhile (the store counted them at the old grant, in a window that may
// have ended): they then stay spent.
type LeaseOptions struct {
	// Lifetime bounds how long the units of a lease are spent
	// (0: DefaultLeaseLifetime).
	Lifetime time.Duration
	// Share divides the rule's capacity by Share times the number of
	// instances to bound a lease (0: DefaultLeaseShare).
	Share int
	// Keys bounds the leased keys an instance keeps (0: DefaultLeasedKeys);
	// past it, a lease is dropped with its units (counted in
	// Stats.LeasesDropped).
	Keys int
}

// Leaser is implemented by stores that grant leases (package redisstore
// does). Without it, leased rules are exact.
type Leaser interface {
	// Lease gives back first the units of back (a lease taken earlier,
	// when it still counts: a fixed window only within its window), then
	// charges h's counter want units if it has that many, else h.Cost
	// units if it has those, else nothing. It returns the units taken and
	// the decision for h.Cost that a charge of the units taken would give
	// (a denial when nothing was taken). A call with want and h.Cost 0
	// only gives back.
	Lease(ctx context.Context, h *Hit, want int64, back Giveback) (Grant, error)
}

// Giveback is the unspent part of a lease, returned to the store.
type Giveback struct {
	// Units is the number of units to give back (0: none).
	Units int64
	// Mark is the Grant.Mark of the lease they came from.
	Mark int64
}

// Grant is a Leaser's answer.
type Grant struct {
	// Units is the number of units taken: 0, the hit's cost, or want.
	Units int64
	// Mark identifies the instant of the grant in the store's terms, for
	// a later Giveback.
	Mark int64
	// Decision is the decision for the hit's cost.
	Decision floodgate.Decision
}

// unitLease is one key's lease on this instance. Instants are ns on the
// limiter's clock since it started.
type unitLease struct {
	mu        sync.Mutex // guards the fields below
	units     int64      // left to spend
	granted   int64      // units of the current lease
	spent     int64      // units spent from it
	mark      int64      // the grant's Mark
	since     int64      // when it was asked for
	expires   int64      // when what is left goes back
	remaining int64      // the key's units after the grant, beyond this lease
	reset     int64      // when the key is back to full, as of the grant
	short     int64      // until then, requests take their cost alone
	gen       uint64     // counts the leases installed, for putBack
	rule      *Rule      // the rule the lease was made for (ReturnLeases)
	refill    chan struct{}
}

// leaseKey names a leased counter as the store does: by its rule's ID
// (the limit's name and a fingerprint of its fields) and its key. A rule
// made again with the same limit (a key store rebuilding the rules of its
// keys, a reload) so spends the lease the earlier one took, instead of
// taking another while the first one's units sit unspent in the store.
type leaseKey struct {
	id, key string
}

// leases holds the leased keys of an instance.
type leases struct {
	leaser   Leaser
	lifetime int64
	share    int64
	max      int
	mu       sync.Mutex // guards m and dropped
	m        map[leaseKey]*unitLease
	dropped  uint64
}

func newLeases(s Store, o LeaseOptions) *leases {
	lr, ok := s.(Leaser)
	if !ok {
		return nil
	}
	ls := &leases{leaser: lr, lifetime: int64(o.Lifetime), share: int64(o.Share), max: o.Keys,
		m: make(map[leaseKey]*unitLease)}
	if ls.lifetime <= 0 {
		ls.lifetime = int64(DefaultLeaseLifetime)
	}
	if ls.share <= 0 {
		ls.share = DefaultLeaseShare
	}
	if ls.max <= 0 {
		ls.max = DefaultLeasedKeys
	}
	return ls
}

// get returns the lease of a rule's key, made empty when there is none.
func (ls *leases) get(rule *Rule, key string) *unitLease {
	k := leaseKey{rule.ID(), key}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	u := ls.m[k]
	if u == nil {
		if len(ls.m) >= ls.max {
			for old := range ls.m {
				delete(ls.m, old)
				ls.dropped++
				break
			}
		}
		u = &unitLease{rule: rule}
		ls.m[k] = u
	}
	return u
}

// leased reports whether a charge of hits takes the lease path.
func (l *Limiter) leased(hits []Hit) bool {
	if l.leases == nil {
		return false
	}
	leased := false
	for i := range hits {
		if hits[i].Check || hits[i].Group != 0 {
			return false // decided in the store, exactly: a lease spends, it does not look
		}
		leased = leased || hits[i].Rule.Consistency() == floodgate.Leased
	}
	return leased
}

// undo is a cost a request took from a lease, to put back if the request
// is denied after all, and the lease it took it from (unitLease.gen).
type undo struct {
	u    *unitLease
	cost int64
	gen  uint64
}

// chargeLeased decides a charge some of whose hits are leased: the leased
// hits first, from their leases; the others in the store, only when the
// leased ones allowed; the leased units go back when the others deny.
func (l *Limiter) chargeLeased(ctx context.Context, hits []Hit, r *Result) error {
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	var undos [4]undo
	took := undos[:0]
	denied := -1
	for i := range hits {
		h := &hits[i]
		if h.Rule.Consistency() != floodgate.Leased {
			continue
		}
		u := l.leases.get(h.Rule, h.Key)
		ok, gen, err := l.takeUnits(ctx, u, h, &r.Decisions[i], &r.Flags[i], r)
		if err != nil {
			l.putBack(took)
			return err
		}
		if ok {
			took = append(took, undo{u, h.Cost, gen})
		} else if !r.Decisions[i].Allowed {
			denied = i
			break
		}
	}
	// The other hits, exact, in one store call: charged when the leased
	// ones allowed, else only looked at (with the leased hits not decided
	// yet).
	op := opCharge
	if denied >= 0 {
		op = opPeek
	}
	sub, idx := sc.localHits[:0], sc.localIdx[:0]
	for i := range hits {
		if hits[i].Rule.Consistency() != floodgate.Leased || (denied >= 0 && i > denied) {
			sub = append(sub, hits[i])
			idx = append(idx, i)
		}
	}
	var err error
	if len(sub) > 0 {
		out, flags := sc.outFor(len(sub)), sc.flagsFor(len(sub))
		if err = l.step(ctx, op, sub, out, flags, r); err == nil {
			for k, i := range idx {
				r.Decisions[i], r.Flags[i] = out[k], r.Flags[i]|flags[k]
				if !out[k].Allowed && !hits[i].Rule.Shadow() {
					denied = i
				}
			}
		}
	}
	clear(sub)
	sc.localHits, sc.localIdx = sub[:0], idx[:0]
	if err != nil || denied >= 0 {
		l.putBack(took)
	}
	return err
}

// putBack returns the costs a denied request took from leases, to the
// leases they were taken from. A lease renewed since has given back what
// was left of the old one, and the store counted the cost at the old
// grant (a fixed window's earlier window, say): spent from the new lease
// it would be admitted beyond what the store granted it, so it stays
// spent, as a request the store denied after a charge would leave it.
func (l *Limiter) putBack(took []undo) {
	for _, t := range took {
		t.u.mu.Lock()
		if t.u.gen == t.gen {
			t.u.units += t.cost
			t.u.spent -= t.cost
		}
		t.u.mu.Unlock()
	}
}

// takeUnits decides a leased hit into d: from its lease when it holds the
// cost, else with a new lease from the store (one request at a time asks
// for it, the others wait), else, while the key is short of units, alone
// as an exact decision would. It reports whether the cost may be put back
// into the lease if the request is denied after all, and the lease's
// generation it may be put back into.
func (l *Limiter) takeUnits(ctx context.Context, u *unitLease, h *Hit, d *floodgate.Decision, f *HitFlags, r *Result) (bool, uint64, error) {
	capacity := h.Rule.Capacity()
	for {
		now := l.breaker.since()
		u.mu.Lock()
		if now < u.expires && u.units >= h.Cost {
			u.units -= h.Cost
			u.spent += h.Cost
			*d = floodgate.Decision{Allowed: true, Limit: capacity, Remaining: min(u.remaining+u.units, capacity),
				ResetAfter: time.Duration(max(u.reset-now, 0))}
			gen := u.gen
			u.mu.Unlock()
			*f |= Leased
			l.leaseTakes.Add(1)
			return true, gen, nil
		}
		if now < u.short {
			// The key had fewer units than a lease lately: each request
			// takes just its cost, in parallel, as exact requests do.
			gen := u.gen
			u.mu.Unlock()
			g, ok, err := l.grantOne(ctx, h, h.Cost, Giveback{}, d, f, r)
			return ok && g.Units >= h.Cost, gen, err
		}
		if ch := u.refill; ch != nil {
			// Another request is renewing the lease: wait for it.
			u.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return false, 0, fmt.Errorf("limiter: %w", ctx.Err())
			}
		}
		ch := make(chan struct{})
		u.refill = ch
		back := Giveback{Units: u.units, Mark: u.mark}
		want := max(l.leases.size(u, now, capacity, l.instances()), h.Cost)
		u.units = 0
		u.mu.Unlock()

		g, ok, err := l.grantOne(ctx, h, want, back, d, f, r)
		u.mu.Lock()
		u.refill = nil
		close(ch)
		u.gen++ // the old lease went back with back
		if !ok || g.Units < h.Cost {
			// No lease: a denial, or what the store did is unknown (its
			// units count as spent).
			u.granted, u.spent, u.expires = 0, 0, 0
			if ok {
				u.short = now + l.leases.lifetime
			}
			u.mu.Unlock()
			return false, 0, err
		}
		if g.Units < want {
			u.short = now + l.leases.lifetime
		}
		u.granted, u.spent, u.mark, u.since = g.Units, h.Cost, g.Mark, now
		u.units = g.Units - h.Cost
		u.expires = now + l.leases.lifetime
		if h.Rule.Algorithm().Family() == floodgate.FamilyWindow {
			// Spent only within the window that counted it.
			u.expires = min(u.expires, now+int64(g.Decision.ResetAfter))
		}
		u.remaining = g.Decision.Remaining
		u.reset = now + int64(g.Decision.ResetAfter)
		d.Remaining = min(u.remaining+u.units, capacity)
		gen := u.gen
		u.mu.Unlock()
		return true, gen, nil
	}
}

// grantOne asks the store for a lease for h and writes the decision for h
// into d: the store's, or its failure policy's when the store cannot
// answer. It reports whether the store answered.
func (l *Limiter) grantOne(ctx context.Context, h *Hit, want int64, back Giveback, d *floodgate.Decision, f *HitFlags, r *Result) (Grant, bool, error) {
	g, degraded, err := l.grant(ctx, h, want, back, r)
	if err != nil {
		return g, false, err
	}
	if degraded {
		one, dd, ff := [1]Hit{*h}, [1]floodgate.Decision{}, [1]HitFlags{}
		l.decideByPolicy(ctx, opCharge, one[:], dd[:], ff[:])
		*d, *f = dd[0], *f|ff[0]
		return g, false, nil
	}
	l.leaseGrants.Add(1)
	*d = g.Decision
	return g, true, nil
}

// size returns the units to ask for in the next lease of u (whose lock the
// caller holds): what the previous lease spent, scaled to one lifetime,
// at most capacity / (share · instances).
func (ls *leases) size(u *unitLease, now, capacity int64, instances int) int64 {
	limit := max(capacity/(ls.share*int64(instances)), 1)
	if u.granted == 0 || u.spent <= 0 {
		return 1
	}
	lasted := max(now-u.since, 1)
	n := math.Ceil(float64(u.spent) * float64(ls.lifetime) / float64(lasted))
	if n >= float64(limit) {
		return limit
	}
	return max(int64(n), 1)
}

// grant asks the store for a lease through the breaker, within the
// deadline, and reports whether it could not answer (degraded, with the
// reason in r).
func (l *Limiter) grant(ctx context.Context, h *Hit, want int64, back Giveback, r *Result) (Grant, bool, error) {
	call, probe := l.breaker.allow()
	if !call {
		r.Degraded = DegradedBreakerOpen
		return Grant{}, true, nil
	}
	lc := leaseCall{h: h, want: want, back: back}
	c, o, err := l.callStore(ctx, 0, nil, nil, nil, &lc)
	r.StoreLatency += c.latency
	l.judge(c, o, probe)
	switch {
	case err == nil:
		return lc.grant, false, nil
	case isCallerError(err):
		return Grant{}, false, fmt.Errorf("limiter: %w", err)
	case o == gaveUp:
		return Grant{}, false, fmt.Errorf("limiter: %w", context.Cause(ctx))
	}
	r.Degraded = DegradedStoreError
	if errors.Is(err, context.DeadlineExceeded) {
		r.Degraded = DegradedDeadline
	}
	return Grant{}, true, nil
}

// leaseCall is a Leaser call on its way through callStore.
type leaseCall struct {
	h     *Hit
	want  int64
	back  Giveback
	grant Grant
}

// ReturnLeases gives back to the store the units left in this instance's
// leases (on shutdown, say), and forgets the leases.
func (l *Limiter) ReturnLeases(ctx context.Context) error {
	if l.leases == nil {
		return nil
	}
	l.leases.mu.Lock()
	m := l.leases.m
	l.leases.m = make(map[leaseKey]*unitLease)
	l.leases.mu.Unlock()
	var first error
	for k, u := range m {
		u.mu.Lock()
		back := Giveback{Units: u.units, Mark: u.mark}
		u.units, u.expires = 0, 0
		u.gen++
		u.mu.Unlock()
		if back.Units == 0 {
			continue
		}
		h := Hit{Rule: u.rule, Key: k.key}
		if _, err := l.leases.leaser.Lease(ctx, &h, 0, back); err != nil && first == nil {
			first = fmt.Errorf("limiter: return leases: %w", err)
		}
	}
	return first
}
