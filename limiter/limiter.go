package limiter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
)

// Defaults for the zero Options.
const (
	DefaultTimeout          = floodgate.DefaultStoreTimeout
	DefaultHardTimeout      = floodgate.DefaultStoreHardTimeout
	DefaultClosedRetryAfter = time.Second
	DefaultMaxInFlight      = 1024
)

// Options configure a Limiter. The zero value calls the store with a
// DefaultTimeout deadline and at most DefaultMaxInFlight calls at once,
// assumes one instance, and keeps the breaker's defaults (see
// BreakerOptions).
type Options struct {
	// Timeout is how long a store call may go without progress (0:
	// DefaultTimeout; negative: only the caller's context bounds a call).
	// For a store that implements ReplyClock (the Redis store), a call
	// fails at Timeout only when no reply at all arrived on its
	// connections for that long (a stopped, unreachable or stuck
	// server); while replies keep arriving (a busy server, or this
	// process starved of CPU) it waits up to HardTimeout, and a call that
	// reaches HardTimeout is decided by its policy without being held
	// against the store. For other stores, Timeout is each call's
	// deadline. It covers the wait for an in-flight slot and the call
	// itself, so that a store outage never holds a request longer than
	// Timeout; see BreakerOptions for what counts against the store.
	// Stores that answer from memory (see InProcess) are called without
	// one. A caller whose context is cancelled during a store call
	// (rather than reaching its deadline) waits for that call's answer or
	// for Timeout, whichever comes first.
	Timeout time.Duration
	// HardTimeout bounds a store call that outlasts Timeout while its
	// store keeps answering (0: DefaultHardTimeout; below Timeout:
	// Timeout). It applies to stores that implement ReplyClock.
	HardTimeout time.Duration
	// MaxInFlight bounds the store calls in flight at once
	// (0: DefaultMaxInFlight; negative: no bound). Further calls wait for
	// a slot, within their deadline: backpressure on the callers instead
	// of an ever longer queue in front of the store. Stores in this
	// process are not bounded.
	MaxInFlight int
	// Instances is the number of instances that share the store; FailLocal
	// limits are the global ones divided by it (0: 1).
	Instances int
	// InstancesFunc, when set, returns the number of instances as learned
	// at run time (from a membership list, a service registry ...). A
	// result of at least 1 overrides Instances. It is called only while
	// deciding by the FailLocal policy and must be cheap and safe for
	// concurrent use.
	InstancesFunc func() int
	// Local is the store FailLocal limits use while the store fails,
	// normally a memstore. Without one, FailLocal hits fail open.
	Local Store
	// ClosedRetryAfter is the RetryAfter of a denial by FailClosed
	// (0: DefaultClosedRetryAfter).
	ClosedRetryAfter time.Duration
	// Breaker configures the circuit breaker, and the one kept per
	// server of a store that implements Partitioner.
	Breaker BreakerOptions
	// DenyCache configures the deny cache, which answers denials that are
	// certain until a known instant without asking the store. It is on
	// by default; stores in this process do without.
	DenyCache DenyCacheOptions
	// Lease configures the rules kept with Leased consistency (stores
	// that implement Leaser; others, and stores in this process, keep
	// every rule exact).
	Lease LeaseOptions
	// Observer, when set, is told about every decision.
	Observer Observer
	// Now is the clock of the circuit breaker (default time.Now). Store
	// deadlines are timers and follow the runtime's clock.
	Now func() time.Time
	// MaxKeyBytes caps the length of a hit's key (0:
	// floodgate.DefaultMaxKeyBytes;
	// negative: no cap). A longer key (a huge header or descriptor value)
	// is replaced by its SHA-256 before the store sees it, so that no
	// request can make the store keep keys of any size. A cap below the
	// length of that replacement (39 bytes) is that length.
	MaxKeyBytes int
	// Logger receives breaker transitions and fallback problems (default:
	// discard).
	Logger *slog.Logger
}

// InProcess is implemented by stores that answer from this process's
// memory and never wait on I/O. The engine calls them without a deadline of
// its own, which saves setting up a timer per call.
type InProcess interface {
	InProcess() bool
}

// Limiter is the engine: it checks and charges the hits of one request
// against a Store, all or nothing, and falls back to each rule's failure
// policy when the store cannot answer in time. It is safe for concurrent
// use.
type Limiter struct {
	store       Store
	releaser    Releaser // the store's, when it keeps concurrency leases
	refunder    Refunder // the store's, when it gives charges back
	reserver    Reserver // the store's, when it keeps reservations
	localRel    Releaser // Options.Local's, when it keeps concurrency leases
	inProcess   bool
	clock       ReplyClock // the store's, when it has one and is not in process
	timeout     time.Duration
	hardTimeout time.Duration
	closedWait  time.Duration
	opts        Options
	log         *slog.Logger
	breaker     breaker     // the shared one, and the time base of all
	partitioner Partitioner // the store's, when it has one and is not in process
	parts       partitions  // the breakers of the partitioner's partitions
	maxKey      int

	scratch   sync.Pool // *scratch
	deadlines sync.Pool // *deadlineCtx
	noLocal   sync.Once // warns once about FailLocal without a local store

	slots  chan struct{} // one token per store call in flight; nil: unbounded
	deny   *denyCache    // nil: off
	leases *leases       // nil: every rule is exact

	degraded      atomic.Uint64
	storeFailures atomic.Uint64
	queueTimeouts atomic.Uint64
	slotWaits     atomic.Uint64
	lateDeadlines atomic.Uint64
	slowCalls     atomic.Uint64
	hardTimeouts  atomic.Uint64
	leaseTakes    atomic.Uint64
	leaseGrants   atomic.Uint64

	unreleased unreleased // leases whose release did not reach the store
}

// maxUnreleased bounds the leases kept for a later release.
const maxUnreleased = 4096

// unreleased keeps the concurrency leases of requests that have ended but
// whose release could not reach the store (it failed, or the breaker was
// open). Their acquisition may still have been applied by the store after
// its deadline (written before a stall, run when the store came back):
// such a lease would hold a slot for its whole lifetime. They are
// released again once the store answers.
type unreleased struct {
	mu      sync.Mutex // guards hits
	hits    []Hit
	n       atomic.Int32 // len(hits)
	running atomic.Bool  // a retry is under way
}

// keepUnreleased remembers the concurrency leases among hits for a later
// release.
func (l *Limiter) keepUnreleased(hits []Hit) {
	u := &l.unreleased
	u.mu.Lock()
	for i := range hits {
		h := hits[i]
		if h.Lease == 0 || h.Rule.Algorithm().Kind() != floodgate.KindConcurrency || len(u.hits) >= maxUnreleased {
			continue
		}
		u.hits = append(u.hits, Hit{Rule: h.Rule, Key: h.Key, Cost: h.Cost, Lease: h.Lease})
	}
	u.n.Store(int32(len(u.hits)))
	u.mu.Unlock()
}

// retryUnreleased releases the kept leases, in the background, once.
func (l *Limiter) retryUnreleased() {
	u := &l.unreleased
	if u.n.Load() == 0 || !u.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer u.running.Store(false)
		u.mu.Lock()
		hits := u.hits
		u.hits = nil
		u.n.Store(0)
		u.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, time.Second))
		defer cancel()
		if err := l.giveBack(ctx, opRelease, hits, nil, nil); err != nil {
			l.keepUnreleased(hits)
		}
	}()
}

// ErrNoStore reports a call to a Limiter that New was given no store for:
// it decides nothing, and never falls back to failure policies for want
// of a store (a FailOpen rule would allow every request).
var ErrNoStore = errors.New("limiter: no store: New was given a nil Store")

// New returns a limiter over store. A nil store makes a Limiter whose
// every call returns ErrNoStore.
func New(store Store, opts Options) *Limiter {
	l := &Limiter{store: store, opts: opts, timeout: opts.Timeout, closedWait: opts.ClosedRetryAfter, log: opts.Logger}
	l.releaser, _ = store.(Releaser)
	l.refunder, _ = store.(Refunder)
	l.reserver, _ = store.(Reserver)
	l.localRel, _ = opts.Local.(Releaser)
	if ip, ok := store.(InProcess); ok && ip.InProcess() {
		l.inProcess = true
	}
	if l.timeout == 0 {
		l.timeout = DefaultTimeout
	}
	if rc, ok := store.(ReplyClock); ok && !l.inProcess && l.timeout > 0 {
		l.clock = rc
		l.hardTimeout = opts.HardTimeout
		if l.hardTimeout == 0 {
			l.hardTimeout = DefaultHardTimeout
		}
		l.hardTimeout = max(l.hardTimeout, l.timeout)
	}
	if l.closedWait <= 0 {
		l.closedWait = DefaultClosedRetryAfter
	}
	if n := opts.MaxInFlight; !l.inProcess && n >= 0 {
		if n == 0 {
			n = DefaultMaxInFlight
		}
		l.slots = make(chan struct{}, n)
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	switch l.maxKey = opts.MaxKeyBytes; {
	case l.maxKey == 0:
		l.maxKey = floodgate.DefaultMaxKeyBytes
	case l.maxKey < 0:
		l.maxKey = 0
	default:
		// A cap below the length of a hash would hash a hashed key again
		// (a Settle or a second Decide of the same Request).
		l.maxKey = max(l.maxKey, hashedKeyLen)
	}
	l.breaker.init(opts.Breaker, l.timeout, opts.Now, l.log)
	if p, ok := store.(Partitioner); ok && !l.inProcess && !l.breaker.off {
		l.partitioner = p
	}
	if !l.inProcess {
		l.deny = newDenyCache(opts.DenyCache)
		l.leases = newLeases(store, opts.Lease)
	}
	l.scratch.New = func() any { return new(scratch) }
	l.deadlines.New = newDeadlineCtx
	return l
}

// Check checks every hit and charges all of them only if every non-shadow
// hit allows, for a Go program using the engine directly (FrontLibrary).
// Hits come most specific first. See Decide.
func (l *Limiter) Check(ctx context.Context, hits []Hit) (Result, error) {
	var r Result
	err := l.Decide(ctx, &Request{Hits: hits}, &r)
	return r, err
}

// Peek answers like Check but charges nothing.
func (l *Limiter) Peek(ctx context.Context, hits []Hit) (Result, error) {
	var r Result
	err := l.Decide(ctx, &Request{Peek: true, Hits: hits}, &r)
	return r, err
}

// Decide checks the hits of req and, unless req.Peek, charges all of them
// only if every non-shadow hit allows. It writes the verdict into res,
// reusing res's slices: with a reused Result and a store that allocates
// nothing, a decision allocates nothing.
//
// For a concurrency hit whose Lease is 0, Decide picks a random non-zero
// lease and writes it into req.Hits[i].Lease, so that the caller can hand
// the same hits to Release when the request is done.
//
// A cost below 1 is floodgate.ErrInvalidCost and a cost above a rule's
// capacity floodgate.ErrNeverFits (such a request can never pass; there is
// no RetryAfter). A failing store is not an error: its hits are decided by
// their failure policies and flagged Degraded. A nil req or res is an
// error, and so is every call to a Limiter made without a store
// (ErrNoStore): nothing is decided then.
func (l *Limiter) Decide(ctx context.Context, req *Request, res *Result) error {
	if req == nil || res == nil {
		return errors.New("limiter: decide: nil Request or Result")
	}
	if l.store == nil {
		res.reset(len(req.Hits))
		return ErrNoStore
	}
	o := opCharge
	if req.Peek {
		o = opPeek
	}
	return l.run(ctx, o, req, res)
}

// Release ends the concurrency leases of hits (as filled in by Check);
// other hits are ignored. Releasing is idempotent. FailLocal leases are
// released in the local store as well, where they were taken while the
// store failed. An error means the store could not be told: the leases
// are kept (up to 4,096) and released again after the next store call
// that is answered, since the store may still have taken them, running a
// call written before it stalled once it comes back; past that bound, or
// should that release fail too and find no room, a lease ends when it
// expires. The leases of a request the failure policies refused after a
// store call that went unanswered are released so too: no caller releases
// a refused request.
func (l *Limiter) Release(ctx context.Context, hits []Hit) error {
	if l.store == nil {
		return ErrNoStore
	}
	for i := range hits {
		if hits[i].Rule == nil {
			return fmt.Errorf("limiter: hit %d has no rule", i)
		}
	}
	var err error
	if l.releaser != nil { // else no concurrency hit was decided
		if err = l.giveBack(ctx, opRelease, hits, nil, nil); err != nil {
			l.keepUnreleased(hits)
		}
	}
	if l.localRel != nil {
		sc := l.scratch.Get().(*scratch)
		defer l.scratch.Put(sc)
		lh := sc.localHits[:0]
		for i := range hits {
			if hits[i].Rule.OnFailure() != floodgate.FailLocal || hits[i].Lease == 0 {
				continue
			}
			if lr := l.localRule(hits[i].Rule); lr != nil {
				lh = append(lh, Hit{Rule: lr, Key: hits[i].Key, Cost: hits[i].Cost, Lease: hits[i].Lease})
			}
		}
		if len(lh) > 0 {
			if lerr := l.localRel.Release(ctx, lh); lerr != nil {
				l.log.Warn("limiter: local release failed", "err", lerr)
			}
		}
		clear(lh) // drop the rule pointers
		sc.localHits = lh[:0]
	}
	return err
}

// Renew extends the concurrency leases of hits (as Decide filled them in)
// by their rules' lease lifetimes, for a request still in flight: a lease
// is re-acquired under its own ID, so it never takes a second slot, and a
// lease that expired meanwhile (its renewals kept from the store longer
// than its lifetime) takes its slot again when the limit has room. Other
// hits are ignored. Renewing is not a decision and is not reported to the
// Observer. An error means the store could not be told; the lease then
// ends at its old expiry. A *LeaseLostError (ErrLeaseLost) names the
// leases that expired and whose limit had no room to take them again
// (another request took the slot): the others were renewed.
func (l *Limiter) Renew(ctx context.Context, hits []Hit) error {
	if l.store == nil {
		return ErrNoStore
	}
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	leases := sc.localHits[:0]
	for i := range hits {
		if hits[i].Rule == nil {
			return fmt.Errorf("limiter: hit %d has no rule", i)
		}
		if hits[i].Lease != 0 && hits[i].Rule.Algorithm().Kind() == floodgate.KindConcurrency {
			leases = append(leases, hits[i])
		}
	}
	var err error
	if len(leases) > 0 {
		out := sc.outFor(len(leases))
		err = l.giveBack(ctx, opCharge, leases, out, nil)
		if err == nil && !allAllowed(out) {
			err = l.renewLost(ctx, hits, leases, out)
		}
	}
	clear(leases)
	sc.localHits = leases[:0]
	return err
}

// allAllowed reports whether every decision allowed.
func allAllowed(out []floodgate.Decision) bool {
	for i := range out {
		if !out[i].Allowed {
			return false
		}
	}
	return true
}

// renewLost ends a renewal some of whose leases were refused (out, as
// the store decided leases, a subset of hits): those are lost, and since
// a charge is all or nothing the others are renewed again without them,
// until the store takes what is left. It returns the *LeaseLostError.
func (l *Limiter) renewLost(ctx context.Context, hits, leases []Hit, out []floodgate.Decision) error {
	lost := &LeaseLostError{}
	for {
		var v Verdict
		keep := 0
		for i := range leases {
			v.Add(&leases[i], out[i].Allowed)
			if out[i].Allowed {
				leases[keep] = leases[i]
				keep++
				continue
			}
			if !leases[i].Rule.Shadow() { // a shadow limit's lease stops nothing
				lost.Lost = append(lost.Lost, indexOfLease(hits, &leases[i]))
			}
		}
		if !v.Refused() || keep == 0 || keep == len(leases) {
			break // the store charged those that allowed, or there are none
		}
		clear(leases[keep:])
		leases, out = leases[:keep], out[:keep]
		if err := l.giveBack(ctx, opCharge, leases, out, nil); err != nil {
			return err
		}
	}
	if len(lost.Lost) == 0 {
		return nil
	}
	slices.Sort(lost.Lost)
	return lost
}

// indexOfLease returns the index in hits of the concurrency hit holding
// h's lease.
func indexOfLease(hits []Hit, h *Hit) int {
	for i := range hits {
		if hits[i].Lease == h.Lease && hits[i].Rule == h.Rule && hits[i].Key == h.Key {
			return i
		}
	}
	return -1
}

// ErrLeaseLost reports that a request in flight lost a concurrency lease:
// it expired before a renewal reached the store (a store outage longer
// than the limit's lease_ttl), and when the renewal came the limit had no
// room to take the slot again, another request holding it.
var ErrLeaseLost = errors.New("limiter: concurrency lease lost")

// LeaseLostError is Renew's error when some leases were lost
// (ErrLeaseLost); the others were renewed.
type LeaseLostError struct {
	// Lost holds the indexes, in the hits given to Renew, of the leases
	// lost, in order.
	Lost []int
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("limiter: renew: %d concurrency lease(s) lost: expired, and the slot taken meanwhile", len(e.Lost))
}

// Unwrap returns ErrLeaseLost.
func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// Refund gives back what Check charged for hits, for a request that will
// not go ahead after all (a queued request whose client went away). Rules
// whose algo.Params are Refundable (token bucket, GCRA, leaky bucket and
// leaky queue) give their charge back; a fixed or sliding window, a
// sliding log or a quota gives it back when its hit names the charge's
// Decision.Mark (Hit.Mark), from the window, log entry or period that
// counted it, unless that has passed since. The others keep the charge,
// and so does every rule on a store that does not implement Refunder. A
// refund never fills a bucket beyond full, and each charge is to be
// refunded once: a second refund would take another request's. Charges
// made by a failure policy while the store failed are not given back, and
// an error means the store could not be told: the units then come back as
// time passes.
func (l *Limiter) Refund(ctx context.Context, hits []Hit) error {
	if l.store == nil {
		return ErrNoStore
	}
	for i := range hits {
		if hits[i].Rule == nil {
			return fmt.Errorf("limiter: hit %d has no rule", i)
		}
		if hits[i].Cost < 1 {
			return fmt.Errorf("limiter: refund: %w", floodgate.ErrInvalidCost)
		}
	}
	if l.refunder == nil {
		return nil
	}
	if l.deny != nil {
		l.deny.forget(hits)
	}
	return l.giveBack(ctx, opRefund, hits, nil, nil)
}

// giveBack runs a release, a refund, a lease renewal (opCharge) or, with
// settled, a settle on the store, through the breakers.
func (l *Limiter) giveBack(ctx context.Context, op storeOp, hits []Hit, out []floodgate.Decision, settled []Settled) error {
	what := "release"
	switch op {
	case opRefund:
		what = "refund"
	case opCharge:
		what = "renew"
	case opSettle:
		what = "settle"
	}
	var g gate
	l.gateFor(hits, &g)
	if !g.allow() {
		return fmt.Errorf("limiter: %s: %w", what, ErrBreakerOpen)
	}
	c, o, err := l.callStore(ctx, op, hits, out, settled, nil)
	l.judge(&g, c, o, err)
	if err != nil {
		return fmt.Errorf("limiter: %s: %w", what, err)
	}
	return nil
}

// judge tells the breakers g of a store call how it ended, err its error:
// an answer counts on each, a failure on the one err names
// (PartitionError), else on each, and the rest on none.
func (l *Limiter) judge(g *gate, c call, o outcome, err error) {
	switch o {
	case answered:
		for i := range g.n {
			e := g.at(i)
			e.b.success(e.probe, c.end)
		}
		l.retryUnreleased()
		l.returnDropped()
	case storeFail:
		l.storeFailures.Add(1)
		failed := l.failedPart(g, err)
		for i := range g.n {
			if e := g.at(i); failed == nil || e.b == failed {
				e.b.failure(e.probe, c.sent, err)
			} else {
				e.b.release(e.probe)
			}
		}
	default:
		for i := range g.n {
			e := g.at(i)
			e.b.release(e.probe)
		}
	}
}

// failedPart returns the breaker of g whose partition err names
// (PartitionError), or nil: none named, or none of g's.
func (l *Limiter) failedPart(g *gate, err error) *breaker {
	if g.n < 2 {
		return nil
	}
	var pe *PartitionError
	if !errors.As(err, &pe) {
		return nil
	}
	return g.find(pe.Partition, &l.breaker)
}

// gateFor fills g with the breakers of a store call for hits: that of each
// store partition they touch (Partitioner), the shared one for the hits
// whose partition is not known, or for every hit of another store.
func (l *Limiter) gateFor(hits []Hit, g *gate) {
	if l.partitioner == nil || len(hits) == 0 {
		g.add(&l.breaker)
		return
	}
	if part, ok := l.partitioner.Partition(hits); ok || len(hits) == 1 {
		// One partition (the common call), or the one hit's is not known.
		g.add(l.partBreaker(part, ok))
		return
	}
	for i := range hits {
		part, ok := l.partitioner.Partition(hits[i : i+1])
		if ok && g.find(part, &l.breaker) != nil {
			continue
		}
		g.add(l.partBreaker(part, ok))
	}
}

// partBreaker returns the breaker of part (the shared one when !ok, or
// when part can get none).
func (l *Limiter) partBreaker(part string, ok bool) *breaker {
	if !ok {
		return &l.breaker
	}
	if b := l.parts.get(part, &l.breaker); b != nil {
		return b
	}
	return &l.breaker
}

// hashedKeyLen is the length of hashKey's keys.
const hashedKeyLen = len("sha256:") + 32

// hashKey is the key a too long key is counted under.
func hashKey(k string) string {
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// ErrBreakerOpen reports a store call skipped because the circuit breaker
// is open.
var ErrBreakerOpen = errors.New("limiter: circuit breaker open")

// newLease returns a random non-zero lease ID.
func newLease() uint64 {
	for {
		if v := rand.Uint64(); v != 0 {
			return v
		}
	}
}

// reservationTTL is the lifetime of a reservation asked for with ttl.
func reservationTTL(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return floodgate.DefaultReservationTTL
	}
	return min(ttl, floodgate.MaxReservationTTL)
}

// run decides req's hits with op (Charge or Peek) into r. A Charge some of
// whose hits are marked Reserve becomes a Reserve.
func (l *Limiter) run(ctx context.Context, op storeOp, req *Request, r *Result) error {
	hits := req.Hits
	r.reset(len(hits))
	reserved := 0
	for i := range hits {
		h := &hits[i]
		if h.Rule == nil {
			return fmt.Errorf("limiter: hit %d has no rule", i)
		}
		if h.Cost < 1 {
			return fmt.Errorf("limiter: %s: cost %d: %w", h.Rule.ID(), h.Cost, floodgate.ErrInvalidCost)
		}
		if c := h.Rule.Params().Capacity(); h.Cost > c {
			return fmt.Errorf("limiter: %s: cost %d above capacity %d: %w", h.Rule.ID(), h.Cost, c, floodgate.ErrNeverFits)
		}
		if h.Rule.Algorithm().Kind() == floodgate.KindConcurrency {
			if l.releaser == nil {
				return fmt.Errorf("limiter: %s: a concurrency limit on a store that releases no leases: %w", h.Rule.ID(), ErrUnsupported)
			}
			if op == opCharge && h.Lease == 0 && !h.Reserve {
				h.Lease = newLease()
			}
		}
		if h.Reserve {
			reserved++
		}
		if len(h.Key) > l.maxKey && l.maxKey > 0 {
			h.Key = hashKey(h.Key)
		}
	}
	if len(hits) == 0 {
		r.Allowed = true
		return nil
	}
	if l.deny != nil && l.deny.decide(l.breaker.since(), hits, r) {
		l.summarize(hits, r)
		if o := l.opts.Observer; o != nil {
			o.ObserveDecision(req, r)
		}
		return nil
	}
	if op == opCharge && reserved > 0 && l.reserver == nil {
		if err := l.checkUnreserved(ctx, hits, reserved, r); err != nil {
			return err
		}
		l.summarize(hits, r)
		if o := l.opts.Observer; o != nil {
			o.ObserveDecision(req, r)
		}
		return nil
	}
	if op == opCharge && reserved > 0 {
		op = opReserve
		if req.Reservation == 0 {
			req.Reservation = newLease()
		}
		ttl := reservationTTL(req.TTL)
		for i := range hits {
			if hits[i].Reserve {
				hits[i].Lease, hits[i].TTL = req.Reservation, ttl
			}
		}
	}
	var err error
	if op == opCharge && l.leased(hits) {
		err = l.chargeLeased(ctx, hits, r)
	} else {
		err = l.step(ctx, op, hits, r.Decisions, r.Flags, r)
	}
	if err != nil {
		return err
	}
	l.summarize(hits, r)
	if !r.Allowed && (op == opCharge || op == opReserve) && (r.Degraded == DegradedDeadline || r.Degraded == DegradedStoreError) {
		// The store may still run the call it did not answer in time
		// (one written before a stall runs when the store comes back):
		// the leases it would take for a request refused here belong to
		// no one, and no caller releases a refused request.
		l.keepUnreleased(hits)
	}
	if o := l.opts.Observer; o != nil {
		o.ObserveDecision(req, r)
	}
	return nil
}

// step makes one store call for hits (through the breakers, within the
// deadline) and, when the store cannot answer, decides them by their
// failure policies. It writes decisions into out and flags into flags, and
// the store's latency and any degradation into r.
func (l *Limiter) step(ctx context.Context, op storeOp, hits []Hit, out []floodgate.Decision, flags []HitFlags, r *Result) error {
	degraded := DegradedBreakerOpen
	var g gate
	l.gateFor(hits, &g)
	if g.allow() {
		c, o, err := l.callStore(ctx, op, hits, out, nil, nil)
		r.StoreLatency += c.latency
		if o != answered || c.end >= 0 || !g.quiet() {
			l.judge(&g, c, o, err)
		} else {
			l.retryUnreleased() // a success that changes nothing else
		}
		switch {
		case err == nil:
			degraded = NotDegraded
			if l.deny != nil && (op == opCharge || op == opPeek || op == opReserve) {
				l.deny.learn(c.sent, op, hits, out)
			}
		case isCallerError(err):
			return fmt.Errorf("limiter: %w", err)
		case o == gaveUp:
			// The caller gave up; that says nothing about the store.
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("limiter: %w", cerr)
			}
			return fmt.Errorf("limiter: %w", context.DeadlineExceeded)
		case errors.Is(err, context.DeadlineExceeded):
			degraded = DegradedDeadline
		default:
			degraded = DegradedStoreError
		}
	}
	if degraded != NotDegraded {
		r.Degraded = degraded
		l.decideByPolicy(ctx, op, hits, out, flags)
	}
	return nil
}

// ErrReservationUnknown reports a Settle of a reservation the store does
// not hold: settled already, expired (it then settled at its estimate),
// never made, or made while the store failed (decided by failure policies,
// which keep no reservation).
var ErrReservationUnknown = errors.New("limiter: reservation unknown: settled already, expired or never made")

// Settle ends the reservation that Decide made for req: each hit marked
// Reserve is settled with actual[i] as its real cost (0 or more). Below
// the estimate the difference is given back, in the window or period the
// reservation charged; above it the excess is charged as far as the limit
// allows, never below zero credit, and what did not fit is reported as the
// hit's Decision.Overrun. Hits that name the same limit and key (reserved
// together, they are one settle record in the store, of the sum of their
// estimates) are settled once, at the sum of their actual costs, and each
// gets the decision (the overrun on the first). The hits not marked
// Reserve are left alone (their decisions in res are zero). Settling is not a decision and is not
// reported to the Observer.
//
// Settle writes each reserved hit's state afterwards into res (Remaining
// is the units free); res.Allowed reports that every reservation was
// found. A reservation that is not (settled already, expired, never made)
// changes nothing, and Settle returns an error wrapping
// ErrReservationUnknown unless only shadow hits were missing: a second
// Settle of the same reservation at other actual costs is refused. The
// same Settle sent again within SettledTTL (its answer lost on the way)
// is answered as the first was and changes nothing. Another error means the store
// could not be told; the reservation then settles at its estimate when
// its TTL passes.
func (l *Limiter) Settle(ctx context.Context, req *Request, actual []int64, res *Result) error {
	if req == nil || res == nil {
		return errors.New("limiter: settle: nil Request or Result")
	}
	if l.store == nil {
		res.reset(len(req.Hits))
		return ErrNoStore
	}
	hits := req.Hits
	if len(actual) != len(hits) {
		return fmt.Errorf("limiter: settle: %d actual costs for %d hits", len(actual), len(hits))
	}
	res.reset(len(hits))
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	// at[i] is the hit of sub that settles hits[i], or -1.
	sub, at := sc.localHits[:0], sc.localIdx[:0]
	defer func() {
		clear(sub)
		sc.localHits, sc.localIdx = sub[:0], at[:0]
	}()
	for i := range hits {
		h := hits[i]
		at = append(at, -1)
		if h.Rule == nil {
			return fmt.Errorf("limiter: hit %d has no rule", i)
		}
		if !h.Reserve {
			continue
		}
		if actual[i] < 0 {
			return fmt.Errorf("limiter: settle: %s: actual cost %d: %w", h.Rule.ID(), actual[i], floodgate.ErrInvalidCost)
		}
		if req.Reservation == 0 && l.reserver != nil {
			return fmt.Errorf("limiter: settle: no reservation named: %w", ErrReservationUnknown)
		}
		if len(h.Key) > l.maxKey && l.maxKey > 0 {
			h.Key = hashKey(h.Key)
		}
		h.Lease, h.Cost = req.Reservation, actual[i]
		if k := sameReserved(sub, &h); k >= 0 {
			// One limit and key reserved twice: the store keeps one
			// settle record, of the sum of the estimates, so it is
			// settled once, at the sum of the actual costs.
			sub[k].Cost = addCost(sub[k].Cost, h.Cost)
			at[i] = k
			continue
		}
		at[i] = len(sub)
		sub = append(sub, h)
	}
	res.Allowed = true
	if len(sub) == 0 {
		return nil
	}
	if l.reserver == nil {
		return l.settleUnreserved(ctx, req, actual, res)
	}
	out := sc.settledFor(len(sub))
	if l.deny != nil {
		l.deny.forget(sub) // a settle below the estimate gives units back
	}
	if err := l.giveBack(ctx, opSettle, sub, nil, out); err != nil {
		res.Allowed = false
		return err
	}
	if l.deny != nil {
		// Again: a denial learnt while the settle was on its way is stale.
		l.deny.forget(sub)
	}
	unknown := false
	for i, k := range at {
		if k < 0 {
			continue
		}
		st := &out[k]
		d := &res.Decisions[i]
		*d = floodgate.Decision{Limit: hits[i].Rule.Capacity()}
		if st.Found {
			d.Allowed, d.Remaining, d.Overrun = true, st.Remaining, st.Overrun
		}
		st.Overrun = 0 // reported once, on the first hit settled by it
		shadow := hits[i].Rule.Shadow()
		if shadow {
			res.Flags[i] |= Shadow
		}
		if !st.Found {
			res.Allowed = false
			unknown = unknown || !shadow
			continue
		}
		if !shadow && (res.Binding < 0 || st.Remaining < res.Decisions[res.Binding].Remaining) {
			res.Binding = i
		}
	}
	if unknown {
		return fmt.Errorf("limiter: settle %x: %w", req.Reservation, ErrReservationUnknown)
	}
	return nil
}

// sameReserved returns the index of the hit of sub that names the same
// limit and key as h (the store's settle record of both), or -1.
func sameReserved(sub []Hit, h *Hit) int {
	for k := range sub {
		if sub[k].Key == h.Key && sub[k].Rule.ID() == h.Rule.ID() {
			return k
		}
	}
	return -1
}

// addCost adds two costs of 0 or more, saturating.
func addCost(a, b int64) int64 {
	if c := a + b; c >= a {
		return c
	}
	return math.MaxInt64
}

// isCallerError reports errors that are the request's fault, not the
// store's: retrying elsewhere would give the same answer.
func isCallerError(err error) bool {
	return errors.Is(err, floodgate.ErrInvalidCost) || errors.Is(err, floodgate.ErrNeverFits) ||
		errors.Is(err, floodgate.ErrInvalidLimit)
}

// summarize fills in r's verdict from its decisions, in one pass over the
// hits unless some hit is in a group.
func (l *Limiter) summarize(hits []Hit, r *Result) {
	r.Allowed = true
	grouped := false
	least, leastShadow := -1, -1
	for i := range hits {
		h, d := &hits[i], &r.Decisions[i]
		if h.Check && d.Allowed {
			d.Remaining = min(d.Limit, d.Remaining+h.Cost) // looked at: nothing taken
		}
		if h.Rule.Shadow() {
			r.Flags[i] |= Shadow
			if !d.Allowed {
				r.Flags[i] |= ShadowDenied
				r.ShadowDenied = true
			}
			if leastShadow < 0 || d.Remaining < r.Decisions[leastShadow].Remaining {
				leastShadow = i
			}
			continue
		}
		if h.Group != 0 {
			grouped = true
		}
		if !d.Allowed {
			// Outside a group it stops the request; in a group that went
			// ahead it was not charged, and it is not the one that binds.
			if h.Group == 0 && r.Allowed {
				r.Allowed = false
				r.Binding = i
			}
			continue
		}
		if !h.Check {
			r.Delay = max(r.Delay, d.Delay)
		}
		if least < 0 || d.Remaining < r.Decisions[least].Remaining {
			least = i
		}
	}
	if grouped && r.Allowed && groupRefused(hits, r.Decisions) {
		r.Allowed = false // every hit of a group denied
	}
	if !r.Allowed {
		l.refused(hits, r)
		return
	}
	if least >= 0 {
		r.Binding = least
	} else {
		r.Binding = leastShadow
	}
}

// groupRefused reports whether every non-shadow hit of some group denied.
func groupRefused(hits []Hit, decisions []floodgate.Decision) bool {
	var v Verdict
	for i := range hits {
		if hits[i].Group != 0 {
			v.Add(&hits[i], decisions[i].Allowed)
		}
	}
	return v.Refused()
}

// refused completes the Result of a request that does not go ahead:
// nothing was charged, so the hits that allowed still have the units their
// decisions counted as taken. The binding hit is the first that denied
// outside a group, or the first of the first group all of whose hits
// denied, whichever comes first; RetryAfter is the longest wait among the
// denials that stop the request (for a group, its shortest: one of its
// hits passing is enough).
func (l *Limiter) refused(hits []Hit, r *Result) {
	r.Delay = 0
	binding, grouped := -1, false
	for i := range hits {
		h, d := &hits[i], &r.Decisions[i]
		if h.Rule.Shadow() {
			continue
		}
		if d.Allowed && !h.Check {
			d.Remaining = min(d.Limit, d.Remaining+h.Cost)
		}
		if h.Group != 0 {
			grouped = true
		} else if !d.Allowed {
			if binding < 0 {
				binding = i
			}
			r.RetryAfter = max(r.RetryAfter, d.RetryAfter)
		}
	}
	if grouped {
		// Each group of hits all of which denied: its first hit, and its
		// shortest wait.
		var buf [8]groupState
		groups := buf[:0]
		for i := range hits {
			h, d := &hits[i], &r.Decisions[i]
			if h.Group == 0 || h.Rule.Shadow() {
				continue
			}
			j := 0
			for j < len(groups) && groups[j].id != h.Group {
				j++
			}
			if j == len(groups) {
				groups = append(groups, groupState{id: h.Group, first: i, wait: d.RetryAfter})
			}
			gs := &groups[j]
			gs.passed = gs.passed || d.Allowed
			gs.wait = min(gs.wait, d.RetryAfter)
		}
		for _, gs := range groups {
			if gs.passed {
				continue
			}
			r.RetryAfter = max(r.RetryAfter, gs.wait)
			if binding < 0 || gs.first < binding {
				binding = gs.first
			}
		}
	}
	r.Binding = binding
}

// groupState is what refused tallies of one group of hits.
type groupState struct {
	id     uint8
	first  int
	wait   time.Duration
	passed bool
}

// Stats are a Limiter's counters.
type Stats struct {
	// Degraded counts hits decided by their failure policy.
	Degraded uint64
	// StoreFailures counts store calls that failed in the store: an error,
	// or a deadline that passed while the store held the call.
	StoreFailures uint64
	// QueueTimeouts counts store calls whose deadline passed while they
	// waited in this process: before they were sent (for an in-flight
	// slot, or in the store's own queue), or with too little of it left
	// when they were sent for the store to be judged. Their hits were
	// decided by their failure policies, but they are not held against
	// the store. Any at all mean that the deadline is too short for the
	// load.
	QueueTimeouts uint64
	// SlotWaits counts store calls that found every in-flight slot taken
	// and waited for one.
	SlotWaits uint64
	// LateDeadlines counts deadlines noticed well after they passed,
	// because this process did not run (not held against the store).
	LateDeadlines uint64
	// SlowCalls counts store calls that outlasted Timeout and were given
	// more time because the store kept answering (stores that implement
	// ReplyClock); HardTimeouts counts those that reached HardTimeout,
	// whose hits were decided by their policies without the call being
	// held against the store.
	SlowCalls, HardTimeouts uint64
	// InFlight is the number of store calls in flight now.
	InFlight int
	// DenyCacheHits counts requests answered by the deny cache.
	DenyCacheHits uint64
	// DenyCacheEntries is the number of keys the deny cache holds now.
	DenyCacheEntries int64
	// DenyCacheEvictions counts entries dropped to make room before they
	// expired.
	DenyCacheEvictions uint64
	// LeaseTakes counts leased hits decided from a lease, without a store
	// call; LeaseGrants counts the store calls that took leases.
	LeaseTakes, LeaseGrants uint64
	// LeasedKeys is the number of leased keys held now; LeasesDropped
	// counts leases dropped to make room (see LeaseOptions.Keys).
	LeasedKeys    int
	LeasesDropped uint64
	// DroppedLeasesWaiting is the number of give-backs waiting to go to
	// the store now, or sent and not yet answered: the units of dropped
	// leases, and those of refused requests whose lease was renewed
	// meanwhile; LeaseUnitsNotReturned
	// counts the units of such give-backs not known to have reached the
	// store (it failed, or too many waited; see LeaseOptions).
	DroppedLeasesWaiting  int
	LeaseUnitsNotReturned uint64
	// BreakerOpen reports whether a circuit breaker is open now: the
	// shared one, or that of any server of a store that keeps one per
	// server and that calls still meet (see BreakerOptions).
	BreakerOpen bool
	// BreakerOpens counts how often a circuit breaker opened, the
	// shared one's and those of the servers together.
	BreakerOpens uint64
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	var dh, dv uint64
	var de int64
	if c := l.deny; c != nil {
		dh, de, dv = c.hits.Load(), c.entries.Load(), c.evictions.Load()
	}
	var lk, lw int
	var ld, lu uint64
	now := l.breaker.since()
	bo, bn := l.parts.state(now)
	// With a breaker per server, the shared one judges only the hits
	// whose server is not known yet (a Cluster whose slot map was not
	// read): once the servers answer and their calls go through their
	// own breakers, nothing may come to probe it, and one that no call
	// met for a whole window counts as closed, as a server's.
	shared := l.breaker.open.Load() && (l.partitioner == nil || !l.breaker.forsaken(now))
	if ls := l.leases; ls != nil {
		ls.mu.Lock()
		lk, ld, lw, lu = len(ls.m), ls.dropped, len(ls.back)+ls.sending, ls.lost
		ls.mu.Unlock()
	}
	return Stats{
		LeaseTakes:            l.leaseTakes.Load(),
		LeaseGrants:           l.leaseGrants.Load(),
		LeasedKeys:            lk,
		LeasesDropped:         ld,
		DroppedLeasesWaiting:  lw,
		LeaseUnitsNotReturned: lu,
		DenyCacheHits:         dh,
		DenyCacheEntries:      de,
		DenyCacheEvictions:    dv,
		Degraded:              l.degraded.Load(),
		StoreFailures:         l.storeFailures.Load(),
		QueueTimeouts:         l.queueTimeouts.Load(),
		SlotWaits:             l.slotWaits.Load(),
		LateDeadlines:         l.lateDeadlines.Load(),
		SlowCalls:             l.slowCalls.Load(),
		HardTimeouts:          l.hardTimeouts.Load(),
		InFlight:              len(l.slots),
		BreakerOpen:           bo || shared,
		BreakerOpens:          bn + l.breaker.opens.Load(),
	}
}
