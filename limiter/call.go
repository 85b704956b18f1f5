package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
)

// ErrNotSent reports a store call whose deadline passed before it left this
// process: it waited for an in-flight slot of the engine, or in a queue of
// the store's own (a store that gathers calls into batches returns an error
// wrapping it). Such a call was not applied, and it says nothing about the
// store's health: the engine decides its hits by their failure policies
// but does not hold it against the store.
var ErrNotSent = errors.New("limiter: store call not sent before its deadline")

// minLateness is the least lateness of a deadline timer that is taken to
// mean this process did not run: timers on a busy machine fire a few
// milliseconds late as a matter of course.
const minLateness = 5 * time.Millisecond

// outcome classifies how a store call ended, for the breaker.
type outcome uint8

const (
	answered  outcome = iota // the store answered (maybe with a caller error)
	storeFail                // the store failed or kept the call past its deadline
	ownFault                 // this process kept the call: never sent, or noticed late
	gaveUp                   // the caller's context ended
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
// op. For the others the deadline starts before the call
// waits for an in-flight slot (Options.MaxInFlight): the wait is part of
// what the caller waits for, but it is not held against the store.
func (l *Limiter) callStore(ctx context.Context, op Op, hits []Hit, out []floodgate.Decision, lc *leaseCall) (call, outcome, error) {
	c := call{end: -1}
	if l.inProcess {
		err := l.store.Apply(ctx, op, hits, out)
		if err != nil {
			c.sent = l.breaker.since()
		}
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
			dc.Context, dc.deadline, dc.tolerance = ctx, dl, max(l.timeout/2, minLateness)
			if dc.timer == nil {
				dc.timer = time.AfterFunc(l.timeout, dc.expire)
			} else {
				dc.timer.Reset(l.timeout)
			}
			sctx = dc
		}
	}
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
		}
		c.sent = l.breaker.at(sent)
		if lc != nil {
			lc.grant, err = l.leases.leaser.Lease(sctx, lc.h, lc.want, lc.back)
		} else {
			err = l.store.Apply(sctx, op, hits, out)
		}
		end := time.Now()
		c.latency, c.end = end.Sub(sent), l.breaker.at(end)
		l.releaseSlot()
	}
	o := l.classify(ctx, dc, err, c.latency)
	if dc != nil && dc.timer.Stop() {
		// Done was not closed: the context can serve another call.
		dc.Context = nil
		l.deadlines.Put(dc)
	}
	return c, o, err
}

// classify says whose fault a store call's error is. dc is the call's own
// deadline, if it had one, and held how long the store held the call.
func (l *Limiter) classify(ctx context.Context, dc *deadlineCtx, err error, held time.Duration) outcome {
	switch {
	case err == nil || isCallerError(err):
		return answered
	case callerDone(ctx):
		return gaveUp
	case errors.Is(err, ErrNotSent):
		l.queueTimeouts.Add(1)
		return ownFault
	case dc == nil || !errors.Is(err, context.DeadlineExceeded):
		return storeFail
	case dc.late.Load():
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
// the caller's: the caller's context with that earlier deadline. Unlike
// context.WithTimeout it does not register with the caller's context and it
// is reused, timer and Done channel included, by later calls whose
// deadline did not pass; that spares several allocations, a lock and a
// timer per decision. Each Limiter keeps its own pool. The store sees a cancellation of the caller's context
// only through Err before the call (callStore checks it first), not while
// waiting; the wait still ends at the deadline.
type deadlineCtx struct {
	context.Context // the caller's, for Value
	deadline        time.Time
	tolerance       time.Duration // lateness of the timer that means this process stalled
	done            chan struct{}
	timer           *time.Timer
	expired         atomic.Bool
	late            atomic.Bool
}

func newDeadlineCtx() any { return &deadlineCtx{done: make(chan struct{})} }

// expire runs when the deadline passes. A timer that fires much later than
// its deadline means that this process did not run for a while (the
// machine was overloaded or the process stopped), so the store's answer may
// have arrived and been waiting to be read.
func (c *deadlineCtx) expire() {
	c.late.Store(time.Since(c.deadline) > c.tolerance)
	c.expired.Store(true)
	close(c.done)
}

// Deadline returns the store call's deadline.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done is closed when the deadline passes.
func (c *deadlineCtx) Done() <-chan struct{} { return c.done }

// Err returns context.DeadlineExceeded once Done is closed, else nil.
func (c *deadlineCtx) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}
