package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
)

// ErrNotSent reports a store call whose deadline passed before it left this
// process: it waited for an in-flight slot of the engine, or in a queue of
// the store's own (a store that gathers calls into batches returns an error
// wrapping it). Such a call was not applied. For a store that implements
// ReplyClock it is held against the store only when the store made no
// progress meanwhile (the calls ahead of it were not answered); for other
// stores it says nothing about the store's health: the engine decides its
// hits by their failure policies but does not hold it against the store.
var ErrNotSent = errors.New("limiter: store call not sent before its deadline")

// ReplyClock is implemented by stores that talk to servers over
// connections and can tell when a reply last arrived on the connections
// that serve a set of hits. The engine then judges a call that outlasts
// its deadline by the store's progress rather than by the call's length:
// it fails only when no reply at all arrived for Options.Timeout, and
// while replies keep arriving it waits up to Options.HardTimeout (see
// Options.Timeout).
type ReplyClock interface {
	// LastReply returns the instant the newest reply arrived on the
	// connections that serve hits (the least recent of them when hits
	// live on several servers; the zero time when none ever did), and
	// false when the store cannot tell. It is called only for calls that
	// outlast the deadline, and must be safe for concurrent use.
	LastReply(hits []Hit) (time.Time, bool)
}

// minLateness is the least lateness of a deadline timer that is taken to
// mean this process did not run: timers on a busy machine fire a few
// milliseconds late as a matter of course.
const minLateness = 5 * time.Millisecond

// outcome classifies how a store call ended, for the breaker.
type outcome uint8

const (
	answered  outcome = iota // the store answered (maybe with a caller error)
	storeFail                // the store failed, or made no progress for a deadline
	ownFault                 // this process kept the call: never sent, or noticed late
	gaveUp                   // the caller's context ended
	tooSlow                  // the store kept answering, but not this call within the hard timeout
)

// Why a call's deadline context ended.
const (
	whyNone       uint32 = iota
	whyDeadline          // the deadline passed (stores without a ReplyClock, or one that could not tell)
	whyLate              // the deadline was noticed long after it passed
	whyNoProgress        // no reply arrived on the call's connections for a whole Timeout
	whyHard              // the hard timeout passed while the store kept answering
	whyCaller            // the caller's context ended while the call had more time
)

// call is one store call on its way: where its time went.
type call struct {
	latency time.Duration // from sending it to the answer (0 in this process)
	sent    int64         // when it was sent, on the breaker's clock
	end     int64         // when it ended, on the breaker's clock (-1: not read)
}

// callStore calls the store within the engine's deadline (the caller's when
// that is earlier) and classifies the result. Stores in this process are
// called directly. lc, when set, makes the call a lease (Leaser) rather than
// op; settled takes a settle's answers. For the others the deadline starts
// before the call waits for an in-flight slot (Options.MaxInFlight): the
// wait is part of what the caller waits for, but it is not held against the
// store unless the store made no progress meanwhile.
func (l *Limiter) callStore(ctx context.Context, op storeOp, hits []Hit, out []floodgate.Decision, settled []Settled, lc *leaseCall) (call, outcome, error) {
	c := call{end: -1}
	if l.inProcess {
		var err error
		if op == opCharge { // the common call, without apply's dispatch
			err = l.store.Decide(ctx, hits, false, out)
		} else {
			err = l.apply(ctx, op, hits, out, settled)
		}
		if err == nil {
			return c, answered, nil
		}
		c.sent = l.breaker.since()
		return c, l.classify(ctx, nil, err, 0), err
	}
	if err := ctx.Err(); err != nil {
		return c, gaveUp, err
	}
	// The clock is read three times: before, at the send when the call
	// waited for a slot, and after.
	t0 := time.Now()
	sctx := ctx
	var dc *deadlineCtx
	if l.timeout >= 0 {
		dl := t0.Add(l.timeout)
		if cdl, ok := ctx.Deadline(); !ok || cdl.After(dl) {
			dc = l.deadlines.Get().(*deadlineCtx)
			dc.start(l, ctx, t0, cdl, hits, lc)
			sctx = dc
		}
	}
	c.sent = l.breaker.at(t0)
	var err error
	if ok, waited := l.acquire(ctx, sctx); !ok {
		err = sctx.Err()
		if err == nil {
			err = ctx.Err()
		}
		err = fmt.Errorf("%w: %w", ErrNotSent, err)
	} else {
		sent := t0
		if waited {
			sent = time.Now()
			c.sent = l.breaker.at(sent)
		}
		if lc != nil {
			lc.grant, err = l.leases.leaser.Lease(sctx, lc.h, lc.want, lc.back)
		} else {
			err = l.apply(sctx, op, hits, out, settled)
		}
		end := time.Now()
		c.latency, c.end = end.Sub(sent), l.breaker.at(end)
		l.releaseSlot()
	}
	if dc != nil && dc.finish() {
		o := l.classify(ctx, dc, err, c.latency)
		// Done was not closed: the context can serve another call.
		dc.Context = nil
		l.deadlines.Put(dc)
		return c, o, err
	}
	return c, l.classify(ctx, dc, err, c.latency), err
}

// apply asks the store for op: the verb of Store or of the optional
// interface that does it (New found them; the engine asks for no verb the
// store lacks).
func (l *Limiter) apply(ctx context.Context, op storeOp, hits []Hit, out []floodgate.Decision, settled []Settled) error {
	switch op {
	case opCharge:
		return l.store.Decide(ctx, hits, false, out)
	case opPeek:
		return l.store.Decide(ctx, hits, true, out)
	case opRelease:
		return l.releaser.Release(ctx, hits)
	case opRefund:
		return l.refunder.Refund(ctx, hits)
	case opReserve:
		return l.reserver.Reserve(ctx, hits, out)
	case opSettle:
		return l.reserver.Settle(ctx, hits, settled)
	}
	return fmt.Errorf("limiter: unknown store op %d", op)
}

// classify says whose fault a store call's error is. dc is the call's own
// deadline, if it had one, and held how long the store held the call.
func (l *Limiter) classify(ctx context.Context, dc *deadlineCtx, err error, held time.Duration) outcome {
	var why uint32
	if dc != nil {
		why = dc.why.Load()
	}
	switch {
	case err == nil || isCallerError(err):
		return answered
	case callerDone(ctx):
		return gaveUp
	case why == whyNoProgress && errors.Is(err, context.DeadlineExceeded):
		// Not a reply for a whole Timeout: the store is stopped,
		// unreachable or stuck, whether this call left this process or
		// waited behind calls the store did not answer.
		return storeFail
	case why == whyHard && errors.Is(err, context.DeadlineExceeded):
		// Replies kept coming, only not this one in time: a busy store
		// or a starved process, not a dead store.
		l.hardTimeouts.Add(1)
		return tooSlow
	case errors.Is(err, ErrNotSent):
		l.queueTimeouts.Add(1)
		return ownFault
	case dc == nil || !errors.Is(err, context.DeadlineExceeded):
		return storeFail
	case why == whyLate:
		// The deadline was noticed long after it passed: this process
		// did not run, so the answer may well have been waiting.
		l.lateDeadlines.Add(1)
		return ownFault
	case held < l.timeout/2:
		// Most of the deadline went by in this process, waiting for a
		// slot: the store had the call for too short a time to judge it.
		l.queueTimeouts.Add(1)
		return ownFault
	}
	return storeFail
}

// callerDone reports whether the caller's context has ended, or reached
// its deadline (its timer may not have fired yet when another one, set for
// the same instant, did).
func callerDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// acquire takes an in-flight slot, waiting while all are taken until the
// call's or the caller's context ends. It reports whether it got one, and
// whether it waited.
func (l *Limiter) acquire(caller, call context.Context) (ok, waited bool) {
	if l.slots == nil {
		return true, false
	}
	select {
	case l.slots <- struct{}{}:
		return true, false
	default:
	}
	l.slotWaits.Add(1)
	select {
	case l.slots <- struct{}{}:
		return true, true
	case <-call.Done():
	case <-caller.Done():
	}
	return false, true
}

// releaseSlot gives back an in-flight slot.
func (l *Limiter) releaseSlot() {
	if l.slots != nil {
		<-l.slots
	}
}

// deadlineCtx is the context of one store call whose deadline comes before
// the caller's: the caller's context, ended by the engine's deadline.
// Unlike context.WithTimeout it does not register with the caller's context
// (until the call outlasts Timeout) and it is reused, timer and Done channel
// included, by later calls whose deadline did not pass; that spares several
// allocations, a lock and a timer per decision. Each Limiter keeps its own
// pool.
//
// For a store without a ReplyClock the context ends at the deadline, and
// Deadline reports it. For a store with one, the deadline is a check: the
// context ends there only when no reply arrived on the call's connections
// for a whole Timeout; otherwise the check moves to Timeout after the
// newest reply, up to the hard timeout (or the caller's deadline, when
// earlier). Deadline then reports none, since the end moves; the store
// must watch Done. A check that runs long after it was due and sees no
// reply (this process did not run, so replies may be waiting unread, or
// read and not yet recorded by the goroutine that reads them, which resumed
// at the same moment) looks again after the tolerance; when that check
// sees no reply either, it ends the call without holding it against the
// store.
//
// The store sees a cancellation of the caller's context only through Err
// before the call (callStore checks it first), and, once the call has
// outlasted Timeout, through Done.
type deadlineCtx struct {
	context.Context // the caller's, for Value
	l               *Limiter
	due             time.Time     // when the timer is due, for a store without a ReplyClock
	tolerance       time.Duration // lateness of the timer that means this process stalled
	check           ProgressCheck // the rule, for a store with a ReplyClock (guarded by mu)
	done            chan struct{}
	timer           *time.Timer
	expired         atomic.Bool
	why             atomic.Uint32

	mu       sync.Mutex // guards check, hits, one, running, watch and extended
	hits     []Hit      // what the call is for, for the ReplyClock
	one      [1]Hit     // a lease call's hit
	running  bool       // the call has not returned yet
	extended bool       // the call outlasted Timeout while the store made progress
	watch    func() bool
}

func newDeadlineCtx() any {
	c := &deadlineCtx{done: make(chan struct{})}
	c.timer = time.AfterFunc(time.Hour, c.fire)
	c.timer.Stop()
	return c
}

// start arms the context for one call that started at t0, for a caller
// whose deadline is cdl (zero: none).
func (c *deadlineCtx) start(l *Limiter, caller context.Context, t0, cdl time.Time, hits []Hit, lc *leaseCall) {
	c.Context, c.l = caller, l
	c.due = t0.Add(l.timeout)
	c.tolerance = max(l.timeout/2, minLateness)
	if l.clock != nil {
		c.mu.Lock()
		c.check = NewProgressCheck(t0, l.timeout, l.hardTimeout, cdl)
		c.hits = hits
		if lc != nil {
			c.one[0] = *lc.h
			c.hits = c.one[:]
		}
		c.running = true
		c.mu.Unlock()
	}
	c.timer.Reset(l.timeout)
}

// finish ends the context's part in a call that returned, and reports
// whether Done was not closed, so that the context can serve another call.
func (c *deadlineCtx) finish() bool {
	if c.l.clock != nil {
		c.mu.Lock()
		c.running = false
		c.hits = nil
		c.one[0] = Hit{}
		if c.extended {
			c.l.slowCalls.Add(1)
			c.extended = false
		}
		watch := c.watch
		c.watch = nil
		c.mu.Unlock()
		if watch != nil && !watch() {
			return false // the caller's end is closing Done
		}
	}
	return c.timer.Stop()
}

// fire runs when the timer is due: it ends the context, or, for a store
// that keeps answering, moves the timer on.
func (c *deadlineCtx) fire() {
	now := time.Now()
	l := c.l
	if l.clock == nil {
		late := now.Sub(c.due) > c.tolerance
		// A timer that fires much later than its deadline means that
		// this process did not run for a while (the machine was
		// overloaded or the process stopped), so the store's answer may
		// have arrived and been waiting to be read.
		if late {
			c.expire(whyLate)
		} else {
			c.expire(whyDeadline)
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return // the call returned; finish stops the timer
	}
	switch c.check.Check(now, c.lastReply) {
	case ProgressHard:
		c.expire(whyHard)
		return
	case ProgressUnknown:
		c.expire(whyDeadline)
		return
	case ProgressLate:
		// Still no reply since a check that ran late: the replies may
		// be waiting in this process all the same. Decided by policy,
		// but not held against the store.
		c.expire(whyLate)
		return
	case ProgressNone:
		c.expire(whyNoProgress)
		return
	case ProgressLooksAgain:
		// No reply seen, but this process did not run for a while,
		// and its goroutines have not run since either: a reply may
		// have been read off its connection and not yet recorded by
		// the goroutine that read it, which resumed with this one.
		c.timer.Reset(c.check.Due().Sub(now))
		return
	}
	if !c.extended {
		c.extended = true
		if c.Context.Done() != nil {
			c.watch = context.AfterFunc(c.Context, func() { c.expire(whyCaller) })
		}
	}
	c.timer.Reset(c.check.Due().Sub(now))
}

// lastReply asks the store when it last answered on the call's
// connections. It is called with mu held.
func (c *deadlineCtx) lastReply() (time.Time, bool) { return c.l.clock.LastReply(c.hits) }

// expire ends the context.
func (c *deadlineCtx) expire(why uint32) {
	if c.why.CompareAndSwap(whyNone, why) {
		c.expired.Store(true)
		close(c.done)
	}
}

// Deadline returns the store call's deadline, when it is fixed (see
// deadlineCtx).
func (c *deadlineCtx) Deadline() (time.Time, bool) {
	if c.l.clock != nil {
		return time.Time{}, false
	}
	return c.due, true
}

// Done is closed when the call's time is up.
func (c *deadlineCtx) Done() <-chan struct{} { return c.done }

// Err returns context.DeadlineExceeded once Done is closed, else nil.
func (c *deadlineCtx) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}
