package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
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
// key refills, its window ends or the lease is dropped (below);
// ReturnLeases gives them back (on shutdown, say). While the store fails,
// an instance goes on spending the leases it holds; then each hit follows
// its failure policy.
//
// An instance keeps the leases of at most Keys keys. To make room for a
// new key it drops one, chosen among a few held leases: one with no unit
// left first, then one that has ended (its key saw no request within its
// lifetime), then the one holding fewest units; a lease in use at that
// moment is passed over. What a dropped lease holds goes back to the store
// in the background, as ReturnLeases gives it back: for a fixed window
// only within the window that counted it, never more than was taken, and
// without making a request wait; so does the cost of a request that took
// it from the lease before the drop and is then refused by another of its
// hits. So new keys, however many (one per client a subject names), cost
// the other keys nothing they do not get back, beyond what waits to go
// back. A give-back that could not be sent to the store waits for the
// store to answer again (three tries at most); one that failed after it
// was sent is not sent again, since the store may still apply it (a
// stalled Redis runs it when it comes back) and units are never given
// back twice. Units not known to have gone back (those, and those to give
// back while max(Keys, 1024) give-backs wait) are counted in
// Stats.LeaseUnitsNotReturned; those that did not go back stay taken until
// their key refills or its window ends.
//
// Leased hits take the lease path in charges only; peeks, reservations,
// refunds and the hits of other rules are exact. A request's hits are
// still all or nothing: the units a request took from leases go back into
// them when another of its hits denies, unless the lease was renewed or
// dropped meanwhile: the store counted them at the old grant, in a window
// that may have ended, so they go back to the store instead, in the
// background, for a fixed window only within that grant's window.
type LeaseOptions struct {
	// Lifetime bounds how long the units of a lease are spent
	// (0: DefaultLeaseLifetime).
	Lifetime time.Duration
	// Share divides the rule's capacity by Share times the number of
	// instances to bound a lease (0: DefaultLeaseShare).
	Share int
	// Keys bounds the leased keys an instance keeps (0: DefaultLeasedKeys);
	// past it, a lease is dropped to make room (counted in
	// Stats.LeasesDropped) and its units go back to the store in the
	// background. At most max(Keys, 1024) dropped leases wait to go back.
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
	dropped   bool // no longer held: what it gets goes back at once
}

// leaseKey names a leased counter as the store does: by its rule's ID
// (the limit's name and a fingerprint of its fields) and its key. A rule
// made again with the same limit (a key store rebuilding the rules of its
// keys, a reload) so spends the lease the earlier one took, instead of
// taking another while the first one's units sit unspent in the store.
type leaseKey struct {
	id, key string
}

// leases holds the leased keys of an instance, and the units of dropped
// leases on their way back to the store.
type leases struct {
	leaser   Leaser
	lifetime int64
	share    int64
	max      int
	mu       sync.Mutex // guards m, dropped, back and lost
	m        map[leaseKey]*unitLease
	dropped  uint64
	back     []droppedLease // waiting to go back (see queue)
	sending  int            // of them, taken by returnDropped and not yet answered
	lost     uint64         // units of dropped leases not known to have gone back
	waiting  atomic.Int32   // len(back)
	running  atomic.Bool    // a give-back is under way
}

// droppedLease is what a dropped lease holds, to give back to the store.
type droppedLease struct {
	rule  *Rule
	key   string
	back  Giveback
	tries int // store calls that failed to give it back
}

// Dropped leases: how many are looked at to choose one, and how many
// failed store calls give up on giving one back.
const (
	evictSample    = 8
	maxReturnTries = 3
)

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

// get returns the lease of a rule's key, made empty when there is none,
// dropping another lease to make room when max are held (see evict). It
// reports whether a dropped lease's units now wait to go back.
func (ls *leases) get(rule *Rule, key string, now int64) (*unitLease, bool) {
	k := leaseKey{rule.ID(), key}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	u := ls.m[k]
	queued := false
	if u == nil {
		if len(ls.m) >= ls.max {
			queued = ls.evict(now)
		}
		u = &unitLease{rule: rule}
		ls.m[k] = u
	}
	return u, queued
}

// evict drops one lease (the caller holds ls.mu), chosen among the first
// evictSample that the map's random order gives: the first with no unit
// left and no renewal under way, else an ended one, else the one holding
// fewest units. Leases locked at that moment (in use) are passed over
// unless all are. The dropped lease's units are queued to go back; it
// reports whether any were.
func (ls *leases) evict(now int64) bool {
	var (
		best     leaseKey
		bu       *unitLease
		bestRank [3]int64
		first    leaseKey
		fu       *unitLease
		seen     int
	)
	better := func(a, b [3]int64) bool {
		for i := range a {
			if a[i] != b[i] {
				return a[i] < b[i]
			}
		}
		return false
	}
	for k, u := range ls.m {
		if fu == nil {
			first, fu = k, u
		}
		if seen++; seen > evictSample {
			break
		}
		if !u.mu.TryLock() {
			continue
		}
		rank := [3]int64{1, 1, u.units} // renewing?, live?, units
		if u.refill == nil {
			rank[0] = 0
		}
		if now >= u.expires {
			rank[1] = 0
		}
		if rank[0] == 0 && u.units == 0 {
			if bu != nil {
				bu.mu.Unlock()
			}
			best, bu = k, u
			break
		}
		if bu == nil || better(rank, bestRank) {
			if bu != nil {
				bu.mu.Unlock()
			}
			best, bu, bestRank = k, u, rank
			continue
		}
		u.mu.Unlock()
	}
	if bu == nil {
		// Every lease looked at is in use: drop the first all the same
		// (its lock is held for a few instructions, never across a call).
		best, bu = first, fu
		bu.mu.Lock()
	}
	d := ls.drop(bu)
	bu.mu.Unlock()
	delete(ls.m, best)
	ls.dropped++
	if d.Units == 0 {
		return false
	}
	return ls.queue(droppedLease{rule: bu.rule, key: best.key, back: d})
}

// drop takes the units of u (whose lock the caller holds) to give back,
// and marks it dropped: a request that still holds u spends nothing more
// from it, and what a renewal under way brings into it goes back as well.
func (ls *leases) drop(u *unitLease) Giveback {
	back := Giveback{Units: u.units, Mark: u.mark}
	u.units, u.expires = 0, 0
	u.gen++
	u.dropped = true
	return back
}

// minWaiting is the least number of dropped leases that may wait to go
// back, whatever LeaseOptions.Keys.
const minWaiting = 1024

// queue keeps d to give back (the caller holds ls.mu); with max(ls.max,
// minWaiting) already waiting, its units are lost and counted. It reports
// whether d was kept.
func (ls *leases) queue(d droppedLease) bool {
	if len(ls.back) >= max(ls.max, minWaiting) {
		ls.lost += uint64(d.back.Units)
		return false
	}
	ls.back = append(ls.back, d)
	ls.waiting.Store(int32(len(ls.back)))
	return true
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

// undo is a cost a request took, to put back if the request is denied
// after all: the lease it took it from (unitLease.gen) and the grant that
// counted it in the store (Grant.Mark), or, when direct, the store alone.
type undo struct {
	u      *unitLease
	key    string
	cost   int64
	gen    uint64
	mark   int64
	direct bool
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
		u, queued := l.leases.get(h.Rule, h.Key, l.breaker.since())
		if queued {
			l.returnDropped()
		}
		t, ok, err := l.takeUnits(ctx, u, h, &r.Decisions[i], &r.Flags[i], r)
		if err != nil {
			l.putBack(took)
			return err
		}
		if ok {
			took = append(took, t)
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

// putBack returns the costs a denied request took, to the leases they
// were taken from while those hold. A lease renewed or dropped since (or
// being renewed now) has given back what was left of it, and the store
// counted the cost at the old grant (a fixed window's earlier window,
// say): spent from the new lease it would be admitted beyond what the
// store granted it, so it goes back to the store instead, in the
// background, as the old grant's (a fixed window takes it back only
// within that grant's window). So does a cost the store charged alone
// (direct).
func (l *Limiter) putBack(took []undo) {
	queued := false
	for _, t := range took {
		t.u.mu.Lock()
		back := Giveback{Units: t.cost, Mark: t.mark}
		if !t.direct && t.u.gen == t.gen && t.u.refill == nil {
			t.u.units += t.cost
			t.u.spent -= t.cost
			back.Units = 0
		}
		rule := t.u.rule
		t.u.mu.Unlock()
		if back.Units > 0 {
			l.leases.mu.Lock()
			queued = l.leases.queue(droppedLease{rule: rule, key: t.key, back: back}) || queued
			l.leases.mu.Unlock()
		}
	}
	if queued {
		l.returnDropped()
	}
}

// takeUnits decides a leased hit into d: from its lease when it holds the
// cost, else with a new lease from the store (one request at a time asks
// for it, the others wait), else, while the key is short of units, alone
// as an exact decision would. It reports whether a cost was taken, and
// where it goes back if the request is denied after all.
func (l *Limiter) takeUnits(ctx context.Context, u *unitLease, h *Hit, d *floodgate.Decision, f *HitFlags, r *Result) (undo, bool, error) {
	t := undo{u: u, key: h.Key, cost: h.Cost}
	capacity := h.Rule.Capacity()
	for {
		now := l.breaker.since()
		u.mu.Lock()
		if now < u.expires && u.units >= h.Cost {
			u.units -= h.Cost
			u.spent += h.Cost
			*d = floodgate.Decision{Allowed: true, Limit: capacity, Remaining: min(u.remaining+u.units, capacity),
				ResetAfter: time.Duration(max(u.reset-now, 0))}
			t.gen, t.mark = u.gen, u.mark
			u.mu.Unlock()
			*f |= Leased
			l.leaseTakes.Add(1)
			return t, true, nil
		}
		if now < u.short {
			// The key had fewer units than a lease lately: each request
			// takes just its cost, in parallel, as exact requests do.
			u.mu.Unlock()
			g, ok, err := l.grantOne(ctx, h, h.Cost, Giveback{}, d, f, r)
			t.mark, t.direct = g.Mark, true
			return t, ok && g.Units >= h.Cost, err
		}
		if ch := u.refill; ch != nil {
			// Another request is renewing the lease: wait for it.
			u.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return t, false, fmt.Errorf("limiter: %w", ctx.Err())
			}
		}
		ch := make(chan struct{})
		u.refill = ch
		back := Giveback{Units: u.units, Mark: u.mark}
		want := max(l.leases.size(u, now, capacity, l.instances()), h.Cost)
		if u.dropped {
			want = h.Cost // no longer held: take just the cost
		}
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
			return t, false, err
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
		t.gen, t.mark = u.gen, g.Mark
		var late Giveback
		if u.dropped {
			// Dropped while the store granted it: what is left goes back.
			late = l.leases.drop(u)
		}
		u.mu.Unlock()
		if late.Units > 0 {
			l.leases.mu.Lock()
			queued := l.leases.queue(droppedLease{rule: h.Rule, key: h.Key, back: late})
			l.leases.mu.Unlock()
			if queued {
				l.returnDropped()
			}
		}
		return t, true, nil
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
	var g gate
	l.gateForHit(h, &g)
	if !g.allow() {
		r.Degraded = DegradedBreakerOpen
		return Grant{}, true, nil
	}
	lc := leaseCall{h: h, want: want, back: back}
	c, o, err := l.callStore(ctx, 0, nil, nil, nil, &lc)
	r.StoreLatency += c.latency
	l.judge(&g, c, o, err)
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

// gateForHit is gateFor for the one hit *h.
func (l *Limiter) gateForHit(h *Hit, g *gate) {
	if l.partitioner == nil {
		g.add(&l.breaker)
		return
	}
	one := [1]Hit{*h}
	l.gateFor(one[:], g)
}

// leaseCall is a Leaser call on its way through callStore.
type leaseCall struct {
	h     *Hit
	want  int64
	back  Giveback
	grant Grant
}

// ReturnLeases gives back to the store the units left in this instance's
// leases and in the dropped leases still waiting to go back (on shutdown,
// say), and forgets the leases. Units it fails to give back are counted in
// Stats.LeaseUnitsNotReturned.
func (l *Limiter) ReturnLeases(ctx context.Context) error {
	ls := l.leases
	if ls == nil {
		return nil
	}
	ls.mu.Lock()
	m := ls.m
	ls.m = make(map[leaseKey]*unitLease)
	waiting := ls.back
	ls.back = nil
	ls.waiting.Store(0)
	ls.mu.Unlock()
	for k, u := range m {
		u.mu.Lock()
		back := ls.drop(u)
		u.mu.Unlock()
		if back.Units > 0 {
			waiting = append(waiting, droppedLease{rule: u.rule, key: k.key, back: back})
		}
	}
	var first error
	for _, d := range waiting {
		h := Hit{Rule: d.rule, Key: d.key}
		if _, err := ls.leaser.Lease(ctx, &h, 0, d.back); err != nil {
			ls.mu.Lock()
			ls.lost += uint64(d.back.Units)
			ls.mu.Unlock()
			if first == nil {
				first = fmt.Errorf("limiter: return leases: %w", err)
			}
		}
	}
	return first
}

// returnDropped gives back the units of the dropped leases waiting to go
// back, in the background, a few store calls at a time, unless that is
// under way. A give-back that was not sent (ErrNotSent) waits for the next
// store call that is answered (see judge), maxReturnTries calls at most;
// one the breaker keeps from the store waits without a try counted. One
// that failed after it was sent is not sent again (the store may still
// apply it): its units are counted as not returned.
func (l *Limiter) returnDropped() {
	ls := l.leases
	if ls == nil || ls.waiting.Load() == 0 || !ls.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		failed := false
		for !failed {
			ls.mu.Lock()
			batch := ls.back
			ls.back = nil
			ls.sending = len(batch)
			ls.waiting.Store(0)
			ls.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			again := l.giveBackDropped(batch)
			ls.mu.Lock()
			ls.sending = 0
			for _, d := range again {
				failed = true
				if d.tries >= maxReturnTries {
					ls.lost += uint64(d.back.Units)
				} else {
					ls.queue(d)
				}
			}
			ls.mu.Unlock()
		}
		ls.running.Store(false)
		if !failed {
			l.returnDropped() // any queued after the last batch was taken
		}
	}()
}

// returnParallel bounds the give-backs of dropped leases in flight.
const returnParallel = 16

// giveBackDropped gives back batch, returnParallel store calls at a time
// (the store batches them), through the breaker and within the deadline.
// It returns those that did not go back.
func (l *Limiter) giveBackDropped(batch []droppedLease) []droppedLease {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards again
		again []droppedLease
		sem   = make(chan struct{}, returnParallel)
	)
	for _, d := range batch {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			one := []Hit{{Rule: d.rule, Key: d.key}}
			var g gate
			l.gateFor(one, &g)
			if g.allow() {
				ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, time.Second))
				lc := leaseCall{h: &one[0], back: d.back}
				c, o, err := l.callStore(ctx, 0, nil, nil, nil, &lc)
				cancel()
				l.judge(&g, c, o, err)
				if err == nil {
					return
				}
				d.tries++
				if !errors.Is(err, ErrNotSent) {
					// Sent: the store may yet apply it (a stalled Redis
					// runs it when it comes back). Sent again, it could
					// give back twice what was taken.
					d.tries = maxReturnTries
				}
			}
			mu.Lock()
			again = append(again, d)
			mu.Unlock()
		})
	}
	wg.Wait()
	return again
}
